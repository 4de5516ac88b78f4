"""The one JSONL append writer and its torn-tail rule: a well-formed file is left byte for byte, a torn last line is
set aside to `<file>.torn` and cut, a whole record lacking only its newline gets the newline."""

import json

import pytest

from dreamgym.utils.jsonl import JsonlAppender, repair_tail, torn_path


def test_a_well_formed_file_is_appended_to_byte_for_byte(tmp_path):
    p = tmp_path / "sub" / "a.jsonl"
    with JsonlAppender(p) as out:
        assert out.set_aside == 0
        out.append({"a": "é"})
        assert out.append_many([{"b": 1}, {"c": [2.5]}]) == 2 and out.append_many([]) == 0
    with JsonlAppender(p, ensure_ascii=True) as out:
        out.append({"d": "é"})
    assert p.read_bytes() == '{"a": "é"}\n{"b": 1}\n{"c": [2.5]}\n{"d": "\\u00e9"}\n'.encode()
    assert not torn_path(p).exists() and repair_tail(p) == 0 and repair_tail(tmp_path / "none.jsonl") == 0


def test_a_torn_last_line_is_set_aside_and_a_whole_one_gets_its_newline(tmp_path):
    p = tmp_path / "a.jsonl"
    big = json.dumps({"x": "y" * 200_000})  # longer than the block the tail is read back in
    p.write_bytes(b'{"a": 1}\n' + big.encode()[:-3])
    with JsonlAppender(p) as out:
        assert out.set_aside == len(big) - 3
        out.append({"b": 2})
    assert p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert torn_path(p).read_bytes() == big.encode()[:-3] + b"\n"
    p.write_bytes(b'{"a": 1}\n{"c": 3}')  # written by another tool: complete, no newline
    assert repair_tail(p) == 0 and p.read_bytes() == b'{"a": 1}\n{"c": 3}\n'
    p.write_bytes(b'{"only": ')  # a single, torn line
    assert repair_tail(p) == 9 and p.read_bytes() == b""
    assert torn_path(p).read_bytes().endswith(b'\n{"only": \n')  # set-aside tails accumulate, none is lost


def test_a_closed_appender_refuses(tmp_path):
    out = JsonlAppender(tmp_path / "a.jsonl")
    out.close()
    out.close()
    with pytest.raises(ValueError, match="closed"):
        out.append({"a": 1})
