"""Where DreamGym keeps derived files that are expensive to rebuild (presets, catalogs, generated games).

Owns: the cache directory (`$DREAMGYM_CACHE`, default `~/.cache/dreamgym`), atomic file writing (it replaces
nothing but a regular file), and the named crash points every crash-safe writer passes (`crash_point`), which tests
arm to kill a writer at an exact spot.
Must not know: what is cached.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from pathlib import Path

CRASH_ENV = "DREAMGYM_CRASH_AT"
"""Environment variable that arms one crash point: `NAME` kills the process at its first pass, `NAME@N` at the N-th."""
CRASH_RANK_ENV = "DREAMGYM_CRASH_RANK"
"""When set, only the process whose `RANK` (torchrun's) it names is killed: one rank of several dies."""

_crash_hits: dict[str, int] = {}


def crash_point(name: str, fd: int | None = None, data: bytes = b"") -> None:
    """A named spot in a writer where a kill would leave files in an intermediate state. When `$DREAMGYM_CRASH_AT`
    names it, the process SIGKILLs itself there (no `finally`, no flush: what a kill or an OOM does), after writing
    the first half of `data` to `fd` when given (a record torn mid-write). Crash tests arm it in a subprocess instead
    of racing a timer, so every intermediate state is reached on every run; unarmed it costs one dict lookup."""
    armed = os.environ.get(CRASH_ENV)
    if not armed:
        return
    want, _, nth = armed.partition("@")
    if want != name:
        return
    only = os.environ.get(CRASH_RANK_ENV)
    if only is not None and os.environ.get("RANK", "0") != only:
        return
    _crash_hits[name] = _crash_hits.get(name, 0) + 1
    if _crash_hits[name] < int(nth or 1):
        return
    if fd is not None and data:
        os.write(fd, data[: len(data) // 2])
        os.fsync(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("DREAMGYM_CACHE", Path.home() / ".cache" / "dreamgym"))
    p = root.joinpath(*parts)
    p.mkdir(parents=True, exist_ok=True)
    return p


def check_replaceable(path: str | Path) -> None:
    """Raise `FileExistsError` unless `path` is a regular file or nothing: what every rename onto a path checks
    first (a symlink is followed: what it points to is what a reader would read)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        raise FileExistsError(f"{path} exists and is not a regular file; refusing to replace it")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temp file in the same directory, fsync, then rename: readers see old or new, never half. Only a
    regular file (or nothing) is replaced: a rename onto a FIFO, a device, a socket or a folder would replace that
    node itself (as root, a device node), so such a path raises `FileExistsError` and is left as it was."""
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600 files; give the result the permissions a plain open() would (0666 & ~umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            crash_point("atomic_write.data", fd, data)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        crash_point("atomic_write.replace")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
