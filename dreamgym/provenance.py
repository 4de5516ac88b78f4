"""Provenance: which environment family made a checkpoint, a run folder or a trajectory file (and, for a
checkpoint, which algorithm and which kind of weights), and the start-up check that refuses one from elsewhere.

Owns: `Provenance`, reading it from each kind of file (`of_trainer_checkpoint`, `of_em_checkpoint`, `of_run_dir`,
`of_model_folder`), `require` (a mismatch raises `ProvenanceError` naming both sides) and the check of every record
of a trajectory file (`check_trajectories`).
Must not know: models, torch (nothing is loaded: every check reads JSON or YAML, or streams records), how any
command runs.

Where each kind of file keeps its provenance (each field written by every version of the package, so files from
before these checks existed are read the same way):

| file | family | algorithm | model kind |
|---|---|---|---|
| trainer checkpoint (`trainer_state.json`) | `config.env` | `algo` | `kind` (full, lora) |
| experience model (`em_config.json`) | `env` | `experience-model` | `lora` (true: lora) |
| its resumable state (`<em>/checkpoint/`) | `config.env` | `algo` (experience-model) | `kind` |
| run folder (`config.yaml`) | `env` | `algo` | |
| trajectory file | every record's `task.env` | | |

A checkpoint written through the Python API with a config that names no family (a bare `TrainerConfig`) has no
family: it is accepted with a warning on stderr, never guessed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EM_ALGO = "experience-model"
"""The algorithm of an experience-model checkpoint (what `dreamgym train-em` trains)."""


class ProvenanceError(ValueError):
    """A checkpoint, run folder or trajectory file comes from another family, algorithm or kind of weights than the
    command was given; the message names both sides."""


@dataclass(frozen=True)
class Provenance:
    """What made a file: its environment family, and for a checkpoint its algorithm and kind of weights (None:
    not recorded, not checked)."""

    what: str
    """The file in words, for messages ("the checkpoint runs/x/checkpoint")."""
    family: str | None
    """The environment family (`Task.env` of what it was trained on or played)."""
    algo: str | None = None
    """The algorithm (grpo, ppo, sft, dpo, experience-model)."""
    model_kind: str | None = None
    """The weights: "full" or "lora"."""


def _json(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ProvenanceError(f"{path}: cannot read it ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise ProvenanceError(f"{path}: does not hold a JSON object")
    return meta


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def of_trainer_checkpoint(path: str | Path) -> Provenance:
    """A trainer checkpoint's (`trainer_state.json`; an experience model's resumable state included)."""
    meta = _json(Path(path) / "trainer_state.json")
    config = meta.get("config")
    family = _str(config.get("env")) if isinstance(config, Mapping) else None
    return Provenance(f"the checkpoint {path}", family, _str(meta.get("algo")), _str(meta.get("kind")))


def of_em_checkpoint(path: str | Path) -> Provenance:
    """A finished experience model's (`em_config.json`)."""
    meta = _json(Path(path) / "em_config.json")
    lora = meta.get("lora")
    return Provenance(f"the experience model {path}", _str(meta.get("env")), EM_ALGO,
                      None if lora is None else "lora" if lora else "full")


def of_run_dir(path: str | Path) -> Provenance | None:
    """A `dreamgym train` run folder's (its `config.yaml`); None when it holds none (a new run)."""
    import yaml

    config = Path(path) / "config.yaml"
    if not config.is_file():
        return None
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ProvenanceError(f"{config}: cannot read it ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ProvenanceError(f"{config}: does not hold a mapping")
    return Provenance(f"the run folder {path}", _str(data.get("env")), _str(data.get("algo")))


def of_model_folder(path: str | Path) -> Provenance | None:
    """Whatever a folder that holds a model records: a trainer checkpoint's or an experience model's provenance,
    None for a plain model folder (a base model belongs to no family)."""
    p = Path(path)
    if (p / "trainer_state.json").is_file():
        return of_trainer_checkpoint(p)
    if (p / "em_config.json").is_file():
        return of_em_checkpoint(p)
    return None


def require(found: Provenance, *, family: str | None = None, algo: str | None = None,
            model_kind: str | None = None) -> None:
    """Refuse `found` when its family, algorithm or model kind differs from the one a command was given (None:
    not checked), naming both. A file that records no family is accepted with a warning."""
    for name, want, have in (("environment family", family, found.family), ("algorithm", algo, found.algo),
                             ("model kind", model_kind, found.model_kind)):
        if want is None:
            continue
        if have is None:
            if name == "environment family":
                print(f"warning: {found.what} records no environment family; not checked against {want!r}",
                      file=sys.stderr)
            continue
        if have != want:
            raise ProvenanceError(f"{found.what} is of {name} {have!r}; this command was given {want!r}")


def check_trajectories(path: str | Path, family: str) -> int:
    """Read every record of a trajectory file (streaming, nothing kept), as the commands that train or evaluate on
    it will; a record that does not read or whose task is of another family raises `DataError` naming the file and
    the position. Returns how many trajectories it holds."""
    from dreamgym.data import check_trajectory_file

    return check_trajectory_file(path, family=family)
