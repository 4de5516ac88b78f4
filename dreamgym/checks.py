"""Start-up checks of what a config names, for `dreamgym.config.checked` fields: each takes the field's value and
raises ValueError (or OSError) saying what is wrong, cheaply and before any model or data loads.

Owns: what "usable" means at start-up for an environment family name (registered), a trajectory file (it exists,
has a known suffix and its first record reads as a trajectory), a folder of weights (its safetensors files whole:
`model_weights`), an experience-model checkpoint (its em_config.json reads and holds a model config this version
runs, its weights are whole), a policy model source (a preset, a loadable folder or a Hugging Face id), a list of
server URLs, a path a command will write (`output_path`) and the keyword arguments of a family's environment
(`env_kwargs`).
Must not know: which configs use them; models, torch (nothing is loaded); training.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

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
    """The registered families, for a field's `allowed` text."""
    from dreamgym.envs import family_names

    return ", ".join(family_names())


def trajectory_file(path: str) -> None:
    """A trajectory file the package's readers accept: it exists, is .jsonl/.json or .parquet, and its first
    record reads as a trajectory (the rest is read when the run needs it)."""
    from dreamgym.data import first_trajectory

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: {'not a file' if p.exists() else 'no such file'}")
    first_trajectory(p)


def em_checkpoint(path: str) -> None:
    """An experience-model checkpoint folder (`dreamgym train-em`) whose em_config.json this version can run."""
    from dreamgym.experience.checkpoint import MODEL_SUBDIR, checkpoint_model_config, read_checkpoint_meta

    meta: Any = read_checkpoint_meta(path)
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: em_config.json does not hold a mapping")
    checkpoint_model_config(meta)
    if not (Path(path) / MODEL_SUBDIR).is_dir():
        raise ValueError(f"{path}: the checkpoint has no {MODEL_SUBDIR}/ folder")
    model_weights(Path(path) / MODEL_SUBDIR)


def model_weights(folder: str | Path) -> None:
    """A folder of weights that will load: it holds safetensors files (or, from other tools, PyTorch .bin files)
    and each safetensors file is whole (its header reads and its tensors end exactly where the file does), so a
    missing or truncated file is refused before any model is built."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        if any(folder.glob("*.bin")):
            return
        raise ValueError(f"{folder}: holds no weights (no .safetensors file)")
    for f in files:
        problem = _safetensors_problem(f)
        if problem:
            raise ValueError(f"{f}: {problem}")


def _safetensors_problem(path: Path) -> str:
    """Why a safetensors file will not load ("" when whole): 8 bytes of header length, a JSON header of tensor
    offsets, then the tensors, ending at the file's end (the format's own rule)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(0)
            head = fh.read(8)
            if len(head) < 8:
                return f"truncated ({size} bytes, not a safetensors file)"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"truncated: its header needs {n} bytes, the file holds {size - 8} after the length"
            header = json.loads(fh.read(n))
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    except ValueError:
        return "not a safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return "not a safetensors file (its header is not a mapping)"
    ends = [v["data_offsets"][1] for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2 and isinstance(v["data_offsets"][1], int)]
    if len(ends) != sum(1 for k in header if k != "__metadata__"):
        return "not a safetensors file (a tensor without data offsets)"
    want = 8 + n + max(ends, default=0)
    if want != size:
        return f"truncated: its tensors need {want} bytes, the file holds {size}" if want > size else \
            f"damaged: {size - want} bytes after its last tensor"
    return ""


def model_source(name: str) -> None:
    """A policy or base model: a preset name, an existing folder (a model or a trainer checkpoint) or a Hugging Face
    id (`org/name`; whether it can be fetched is known only when it loads)."""
    from dreamgym.presets import PRESETS

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
        from dreamgym.trainers.checkpoint import checkpoint_problem  # torch: only for a checkpoint folder

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


def em_config_overrides(overrides: list[str]) -> None:
    """`key=value` settings of an `ExperienceModelConfig` (known fields, right types and ranges)."""
    from dreamgym.config import from_dict, parse_overrides
    from dreamgym.experience.config import ExperienceModelConfig

    from_dict(ExperienceModelConfig, parse_overrides(overrides))


def server_urls(spec: str) -> None:
    """One or more http(s) base URLs of OpenAI-compatible servers, with at most one served model name after `#`."""
    from dreamgym.llm.http import split_urls

    split_urls(spec)


def policy_mix(spec: str) -> None:
    """A scripted-policy mix such as `oracle:0.5,random:0.5` (`dreamgym.collect.parse_mix`)."""
    from dreamgym.collect import parse_mix

    parse_mix(spec)


def output_path(path: str | Path, kind: Literal["file", "folder"]) -> None:
    """A path a command will write a `kind` to: when it exists it is one, and its nearest existing parent is a
    folder (a parent that is a file can hold nothing)."""
    p = Path(path)
    if p.exists() and p.is_dir() != (kind == "folder"):
        raise ValueError(f"{path} is a {'folder' if p.is_dir() else 'file'}, not a {kind}")
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{path}: its parent {parent} is a file, not a folder")
            return


def env_kwargs(name: str, kwargs: Mapping[str, Any]) -> None:
    """Keyword arguments for family `name`'s `make_env(split, **kwargs)`: each names a parameter of `make_env` or,
    when `make_env` passes keywords on, of the environment class it returns (its return annotation). Values are the
    environment's to judge; names are checked here, so a typo is refused before anything runs."""
    from dreamgym.envs import family

    make_env = family(name).make_env
    accepted, open_ended = _keywords(make_env)
    if open_ended:
        try:
            env_class = typing.get_type_hints(make_env).get("return")
        except (NameError, TypeError):  # an annotation that does not resolve: the names cannot be known here
            return
        if not isinstance(env_class, type):
            return
        more, open_ended = _keywords(env_class)
        if open_ended:
            return
        accepted |= more
    accepted.discard("split")  # the command's own --split
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ValueError(f"{', '.join(map(repr, unknown))}: not a keyword of the {name} environment (allowed: "
                         f"{', '.join(sorted(accepted)) or 'none'})")


def _keywords(fn: Any) -> tuple[set[str], bool]:
    """The names `fn` takes as keywords, and whether it also takes any other (`**kwargs`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names - {"self"}, any(p.kind is p.VAR_KEYWORD for p in params)
