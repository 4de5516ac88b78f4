"""Appending JSON lines so that a kill never corrupts a file: DreamGym's one JSONL append writer and its torn-tail rule.

Owns: `JsonlAppender` (records appended to a file, each call one `os.write` on an `O_APPEND` descriptor followed by
`fsync`) and `repair_tail`, the torn-tail rule every appender applies to a file before it appends to it.
Must not know: what the records mean (trajectories, metric rows, evaluations, replay-buffer transitions).

The torn-tail rule. A process killed while appending leaves every earlier line intact and at most one torn line at
the end: the bytes after the last newline. When they parse as JSON they are a whole record that only lacks its
newline (a file from another tool), and the newline is added. Otherwise they are set aside, appended to
`<file>.torn` (fsynced, never lost), and cut off, so a new record is never glued onto garbage. A file that ends with
a newline is left as it is, byte for byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dreamgym.utils.paths import crash_point

_BLOCK = 1 << 16


def torn_path(path: str | Path) -> Path:
    """Where `repair_tail` sets aside the torn tail of `path`."""
    return Path(str(path) + ".torn")


def repair_tail(path: str | Path) -> int:
    """Apply the torn-tail rule (module docstring) to `path` if it exists; returns how many bytes were set aside."""
    p = Path(path)
    if not p.exists():
        return 0
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        return _repair_fd(p, fd)
    finally:
        os.close(fd)


def _repair_fd(path: Path, fd: int) -> int:
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    with open(path, "rb") as fh:
        pos, tail = size, b""
        while pos > 0 and b"\n" not in tail:  # back in blocks to the last newline: records can be large
            start = max(0, pos - _BLOCK)
            fh.seek(start)
            tail = fh.read(pos - start) + tail
            pos = start
    if tail.endswith(b"\n"):
        return 0
    torn = tail[tail.rfind(b"\n") + 1:]  # the whole tail when the file has one unterminated line
    try:
        json.loads(torn)
    except ValueError:
        pass
    else:
        _write_all(fd, b"\n")
        os.fsync(fd)
        return 0
    with open(torn_path(path), "ab") as side:
        side.write(torn + b"\n")
        side.flush()
        os.fsync(side.fileno())
    os.ftruncate(fd, size - len(torn))
    os.fsync(fd)
    return len(torn)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class JsonlAppender:
    """Appends JSON objects to `path` (created with its folders if missing), one line each, after applying the
    torn-tail rule to what is there (`set_aside`: the bytes it set aside). `ensure_ascii` is `json.dumps`'s;
    `crash_name` names the crash point each write passes (`dreamgym.utils.paths.crash_point`). Use as a context manager
    or `close()` it."""

    def __init__(self, path: str | Path, *, ensure_ascii: bool = False, crash_name: str = "jsonl.write"):
        self.path = Path(path)
        self.ensure_ascii = ensure_ascii
        self.crash_name = crash_name
        self._fd: int | None = None  # set first: __del__ runs even when opening fails
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.set_aside = _repair_fd(self.path, self._fd)
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._fd is None

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record as a line: one write, one fsync."""
        self.append_many([record])

    def append_many(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Append records as lines with one write and one fsync (a kill tears at most the last line it reached);
        returns how many."""
        if self._fd is None:
            raise ValueError(f"{type(self).__name__} for {self.path} is closed")
        lines = [json.dumps(r, ensure_ascii=self.ensure_ascii).encode("utf-8") + b"\n" for r in records]
        if not lines:
            return 0
        data = b"".join(lines)
        crash_point(self.crash_name, self._fd, data)
        _write_all(self._fd, data)
        os.fsync(self._fd)
        return len(lines)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
