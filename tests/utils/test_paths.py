"""Atomic writes (`dreamgym.utils.paths`): a rename replaces a regular file or nothing, never another kind of node."""

from __future__ import annotations

import os
import socket

import pytest

from dreamgym.data import write_jsonl, write_parquet
from dreamgym.utils.paths import atomic_write_text


def test_an_atomic_write_never_replaces_a_fifo_a_socket_or_a_folder(tmp_path):
    """Issue 69, 1: a FIFO (or, as root, a device node) named as an output was replaced by a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for target in (fifo, sock_path, tmp_path):
            for write in (lambda p: atomic_write_text(p, "x"), lambda p: write_jsonl(p, []),
                          lambda p: write_parquet(p, [])):
                with pytest.raises(FileExistsError, match="not a regular file"):
                    write(target)
        assert fifo.is_fifo() and sock_path.is_socket()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "sock"]  # no temporary file left either
    # A regular file is still replaced.
    (tmp_path / "f").write_text("old")
    atomic_write_text(tmp_path / "f", "new")
    assert (tmp_path / "f").read_text() == "new"
