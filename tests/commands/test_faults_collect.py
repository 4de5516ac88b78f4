"""`dreamgym collect --resume` never loses or mixes episodes: a collection SIGKILLed at each of its write points
(`dreamgym.utils.paths.crash_point`, armed through $DREAMGYM_CRASH_AT in a subprocess) resumes to the file an uninterrupted
run writes, and an output it cannot continue (unreadable, written by other settings, Parquet without its JSONL
stream holding more) is kept untouched and named in the error, not overwritten."""

from __future__ import annotations

import signal
import subprocess

import pytest
from crash import run_python

from dreamgym.commands import collect as C
from dreamgym.data import load_trajectories, read_jsonl

ARGS = ["--env", "dial", "--policy", "oracle:0.5,random:0.5", "--episodes", "10", "--no-progress"]


def _content(trajs):
    """What must be reproducible: everything except wall-clock timing."""
    return [(t.id, t.policy, t.seed, t.task.id, t.won, [(s.state, s.action, s.reward, s.next_state)
                                                      for s in t.steps]) for t in trajs]


def _cli(*argv: str, crash: str | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from dreamgym.commands.collect import main; sys.exit(main(sys.argv[1:]))"
    return run_python(code, *ARGS, *argv, crash=crash)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The 10 episodes of an uninterrupted collection with seed 5."""
    out = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    return _content(read_jsonl(out))


@pytest.mark.parametrize("point", ["jsonl.write@4", "parquet.replace", "atomic_write.data", "atomic_write.replace"])
def test_a_collection_killed_at_any_write_point_resumes_to_the_uninterrupted_file(tmp_path, reference, point):
    out = tmp_path / "o.parquet"
    proc = _cli("--seed", "5", "--out", str(out), crash=point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    written = len(list(read_jsonl(tmp_path / "o.jsonl", skip_torn_tail=True)))
    assert written == (3 if point.startswith("jsonl") else 10)
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"]) == 0
    assert _content(load_trajectories(out)) == _content(read_jsonl(tmp_path / "o.jsonl")) == reference
    if point.startswith("jsonl"):  # the half record the kill tore off is set aside, not glued to
        assert (tmp_path / "o.jsonl.torn").stat().st_size > 0


def test_parquet_without_its_jsonl_stream_is_kept_on_resume(tmp_path, reference, capsys):
    out = tmp_path / "o.parquet"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    (tmp_path / "o.jsonl").unlink()
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"]) == 0
    assert "10 already present" in capsys.readouterr().out
    assert _content(load_trajectories(out)) == _content(read_jsonl(tmp_path / "o.jsonl")) == reference


def test_resume_with_another_seed_refuses_instead_of_dropping_the_parquet(tmp_path, capsys):
    # The reproduction: before, this reported "0 already present" and the first 10 episodes were gone.
    out = tmp_path / "o.parquet"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    (tmp_path / "o.jsonl").unlink()
    before = out.read_bytes()
    assert C.main(ARGS + ["--seed", "0", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "dial-train-s5-000000" in err
    assert out.read_bytes() == before and not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("change", [["--seed", "0"], ["--policy", "oracle"], ["--episodes", "12"],
                                   ["--episodes-per-task", "2"]])
def test_resume_with_other_settings_refuses_and_keeps_the_jsonl(tmp_path, change, capsys):
    out = tmp_path / "o.jsonl"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    before = out.read_bytes()
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"] + change) == 2
    assert str(out) in capsys.readouterr().err and out.read_bytes() == before


def test_an_unreadable_parquet_is_named_not_overwritten(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    out.write_bytes(b"not parquet")
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"]) == 2
    assert str(out) in capsys.readouterr().err and out.read_bytes() == b"not parquet"
    assert not (tmp_path / "o.jsonl").exists()


def test_a_parquet_holding_episodes_its_jsonl_lacks_is_not_rebuilt_without_them(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    jsonl = tmp_path / "o.jsonl"
    jsonl.write_bytes(b"".join(jsonl.read_bytes().splitlines(keepends=True)[:4]))
    before = out.read_bytes()
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"]) == 2
    assert "6 episodes" in capsys.readouterr().err and out.read_bytes() == before


def test_a_corrupt_line_inside_the_jsonl_is_named(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert C.main(ARGS + ["--seed", "5", "--out", str(out)]) == 0
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:2] + [b"{broken\n"] + lines[2:]))
    assert C.main(ARGS + ["--seed", "5", "--out", str(out), "--resume"]) == 2
    assert f"{out}:3" in capsys.readouterr().err
