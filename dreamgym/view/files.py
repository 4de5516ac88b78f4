"""Opening a file of a run folder for `dreamgym view`: a regular file whose real location, read from the opened
descriptor, is inside the folder, and nothing else.

Owns: `open_in_run` (a binary file object), `arrow_file_in_run` (the same file for Arrow, a Parquet reader),
`file_kind` (what a non-regular file is, for a problem line) and `Refused` (an OSError saying why a file is not read).
Must not know: what the files hold, HTTP, pages.

Why the check is made on the opened descriptor and not on the listing: the viewer lists a run folder at most every
2 s, and a file listed as a regular file inside it can be replaced by a link to a file outside it, or by a FIFO,
before it is read. The file is opened without waiting (a FIFO opens at once instead of blocking until a writer
comes); the descriptor must then be a regular file, and the path the kernel holds for it, every link resolved, must
lie inside the run folder.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO


class Refused(OSError):
    """A file the viewer does not read; `strerror` says why in words a problem line can show."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO", "a socket", ...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "not a regular file"


def _opened_path(fd: int) -> str:
    """Where the kernel says descriptor `fd` leads, links resolved."""
    if sys.platform == "darwin":
        import fcntl

        return fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).split(b"\0", 1)[0].decode()
    return os.readlink(f"/proc/self/fd/{fd}")


def _open_fd(path: Path, root: Path) -> int:
    """A read-only descriptor of `path`, a regular file inside `root` (resolved); raises `Refused` or OSError."""
    # Links are followed (a link inside the run to a file inside it is fine); where they lead is checked below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file")
        if not Path(_opened_path(fd)).is_relative_to(root):
            raise Refused(errno.EACCES, "a link to a file outside the run folder")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_in_run(path: Path, root: Path) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file whose real location is inside `root` (a resolved
    run folder); raises `Refused` naming why not, or the OSError of a file that cannot be opened."""
    return os.fdopen(_open_fd(path, root), "rb")


def arrow_file_in_run(path: Path, root: Path) -> Any:
    """`path` as `open_in_run` checks it, opened by Arrow itself (a `pyarrow.OSFile`): Arrow reopens the checked
    descriptor (/dev/fd/N is the same open file), so what it reads is the file that was checked, and its buffers are
    its own, never Python objects its threads would have to release."""
    import pyarrow as pa

    fd = _open_fd(path, root)
    try:
        return pa.OSFile(f"/dev/fd/{fd}")
    finally:
        os.close(fd)
