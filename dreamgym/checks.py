"""Start-up checks of what a config names, for `dreamgym.config.checked` fields: each takes the field's value and
raises ValueError (or OSError) saying what is wrong, cheaply and before any model or data loads.

Owns: what "usable" means at start-up for an environment family name (registered), a trajectory file (it exists,
has a known suffix and its first record reads as a trajectory), a policy model source (a preset, a loadable
folder or a Hugging Face id) and a list of server URLs.
Must not know: which configs use them; models, torch (nothing is loaded); training; the experience model (its
checkpoint's checks are `dreamgym.experience.checkpoint`'s, so that this module, which trainers and the experience
model's training use, never imports that package back).
"""

from __future__ import annotations

import math

import re
from pathlib import Path

from dreamgym.utils.filecheck import checkpoint_problem, model_weights

SERVER_URLS = "http://host:port/v1#MODEL, or several URLs separated by commas"
"""What a server field (`model.policy_url`, `dream.em_url`) accepts, in words."""
POLICY_MIX = "a policy mix such as oracle:0.5,random:0.5"
"""What a policy-mix field accepts, in words."""
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def env_family(name: str) -> None:
    """A registered environment family (`dreamgym.envs.family_names()`)."""
    from dreamgym.envs import family_names

    if name not in family_names():
        raise ValueError(f"unknown environment family {name!r}")


def family_choices() -> str:
    """The families a field accepts, for its `allowed` text: the built-in ones, and any an installed package declares
    by entry point, named when some are found (so `--help` and errors list what this machine has, and the generated
    reference, made where none is installed, names the built-in ones and the rule)."""
    from dreamgym.envs import BUILTIN_FAMILIES, family_names

    found = [name for name in family_names() if name not in BUILTIN_FAMILIES]
    return (f"{', '.join(BUILTIN_FAMILIES)}, or a family an installed package declares in the `dreamgym.envs` "
            f"entry-point group" + (f" (found: {', '.join(found)})" if found else ""))


def trajectory_file(path: str) -> None:
    """A trajectory file the package's readers accept: it exists, is .jsonl/.json or .parquet, and its first
    record reads as a trajectory (the rest is read when the run needs it)."""
    from dreamgym.data import first_trajectory

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: {'not a file' if p.exists() else 'no such file'}")
    first_trajectory(p)


def model_source(name: str) -> None:
    """A policy or base model: a preset name, an existing folder (a model or a trainer checkpoint) or a Hugging Face
    id (`org/name`; whether it can be fetched is known only when it loads)."""
    from dreamgym.llm.presets import PRESETS

    path = Path(name)
    if path.exists() and name not in PRESETS:
        loadable_model_folder(path)
        return
    if name in PRESETS or (_HF_ID.match(name) and not name.startswith((".", "~"))):
        return
    raise ValueError(f"{name!r} is neither a preset, an existing folder nor a Hugging Face id")


def loadable_model_folder(path: Path) -> None:
    """A folder a policy loads from: a trainer checkpoint (`trainer_state.json`) complete, or a Hugging Face model
    folder (`config.json`) whose weights are whole."""
    if not path.is_dir():
        raise ValueError(f"{path} is a file, not a model folder")
    if (path / "trainer_state.json").is_file():
        problem = checkpoint_problem(path)
        if problem:
            raise ValueError(f"{path}: not a loadable checkpoint: {problem}")
        return
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is neither a trainer checkpoint (no trainer_state.json) nor a model folder "
                         f"(no config.json)")
    model_weights(path)


def task_source(value: str) -> None:
    """A dream's base tasks (`dream.task_pool`): 'all', 'data' or a trajectory file."""
    if value not in ("all", "data"):
        trajectory_file(value)


def real_task_file(path: str) -> None:
    """Real RL's task pool (`real_task_pool`): a trajectory file. A dream run's folder is refused: S2R from a dream
    has one route, `dreamgym train mode=s2r`."""
    if Path(path).is_dir():
        raise ValueError(f"{path} is a folder, not a trajectory file; to continue a dream run in the real "
                         f"environment (S2R) use `dreamgym train mode=s2r dream.em=...`")
    trajectory_file(path)


def server_urls(spec: str) -> None:
    """One or more http(s) base URLs of OpenAI-compatible servers, with at most one served model name after `#`."""
    from dreamgym.llm.http import split_urls

    split_urls(spec)


def policy_mix(spec: str) -> None:
    """A scripted-policy mix such as `oracle:0.5,random:0.5` (`parse_mix`)."""
    parse_mix(spec)


def parse_mix(spec: str) -> dict[str, float]:
    """"oracle:0.5,noisy:0.3,random:0.2" -> {"oracle": 0.5, ...}; a bare name has weight 1."""
    mix: dict[str, float] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, w = part.partition(":")
        try:
            weight = float(w) if w else 1.0
        except ValueError:
            raise ValueError(f"bad policy weight in {part!r} (expected name:number)") from None
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"policy weight must be a finite number >= 0, got {part!r}")
        mix[name.strip()] = mix.get(name.strip(), 0.0) + weight
    if not mix or sum(mix.values()) <= 0:
        raise ValueError(f"empty policy mix {spec!r}")
    return mix

