"""Checks of files on disk that need nothing else of the package: a path a command will write (`output_path`) and a
folder of model weights (`model_weights`: each safetensors file whole), run at start-up before anything is written or
any model is built.

A trainer's checkpoint folder (`checkpoint_problem`) is checked here too, so that start-up checks never import the
trainers (and torch) to read two files.

Owns: the names of a trainer checkpoint's state files, what "whole" means for a safetensors file (the format's own
rule: its header reads and its tensors end where the file does) and what a writable path is (of the right kind, a
file only a regular one, under a folder that can be written).
Must not know: models, torch (only file sizes and headers are read), which commands use them.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Literal

STATE_FILE = "trainer_state.pt"
"""A trainer checkpoint's optimizer, RNG and counter state (torch.save)."""
META_FILE = "trainer_state.json"
"""A trainer checkpoint's JSON meta: iteration, kind, config."""


def output_path(path: str | Path, kind: Literal["file", "folder"]) -> None:
    """A path a command will write a `kind` to, checked before any work so that a run never ends by failing to save
    what it computed: when it exists it is one (a file: a regular file, so an atomic rename never replaces a FIFO,
    a device, a socket or a folder), and its folder can be created and written (tried: a temporary entry is made
    and removed in the nearest folder that exists, since permission bits do not tell, e.g. under /proc or on a
    read-only mount, and root passes every permission check)."""
    p = Path(path)
    what = file_kind(p)
    if what is not None and what != ("folder" if kind == "folder" else "regular file"):
        raise ValueError(f"{path} is a {what.replace('regular ', '')}, not a {kind}"
                         + ("" if what in ("folder", "regular file") else " (such a path is never replaced: write "
                                                                        "to a regular file)"))
    nearest = p.absolute() if what == "folder" else \
        next(parent for parent in p.absolute().parents if parent.exists())
    if not nearest.is_dir():
        raise ValueError(f"{path}: its parent {nearest} is a file, not a folder")
    try:
        # What the writer will do there: a temporary file beside the target (atomic writes), or the folders
        # leading to it (or its files, in a folder that exists).
        if nearest == p.absolute().parent and kind == "file":
            fd, probe = tempfile.mkstemp(dir=nearest, prefix=f".{p.name}.", suffix=".probe")
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(dir=nearest, prefix=".dreamgym-probe-"))
    except OSError as e:
        where = "create folders in" if nearest != p.absolute().parent and what is None else "write in"
        raise ValueError(f"{path}: cannot {where} {nearest} ({e.strerror or e})") from None


def file_kind(path: str | Path) -> str | None:
    """What is at `path` (a symlink followed): "regular file", "folder", "FIFO", "device", "socket", None when
    nothing (a dangling symlink included); ValueError when it cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:  # a folder on the way that cannot be searched: said as bad input, not a traceback
        raise ValueError(f"{path}: cannot look at it ({e.strerror or e})") from None
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "socket" if stat.S_ISSOCK(mode) else "special file"


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


def checkpoint_problem(directory: Path) -> str | None:
    """Why `directory` is not a complete `BaseTrainer.save` checkpoint (None when it is): a cheap check of what
    `load` reads (counters in the JSON meta, the state file, the policy's weights, each safetensors file whole)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / META_FILE).read_text())
    except (OSError, ValueError) as e:
        return f"no readable {META_FILE} ({type(e).__name__}: {e})"
    if not isinstance(meta, dict) or "iteration" not in meta:
        return f"{META_FILE} has no iteration"
    if not (directory / STATE_FILE).is_file() or (directory / STATE_FILE).stat().st_size == 0:
        return f"no {STATE_FILE}"
    weights = directory / ("adapter" if meta.get("kind") == "lora" else "model")
    if not any(weights.glob("*.safetensors")):
        return f"no .safetensors weights in {weights.name}/"
    try:
        model_weights(weights)  # every file whole: a truncated one is refused here, not when the model is built
    except ValueError as e:
        return str(e)
    return None
