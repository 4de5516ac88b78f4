"""What the start-up check tests (test_checks.py, test_provenance.py) share: tiny `dreamgym train` settings, a
one-line-refusal assertion and a small collected dial file."""

from __future__ import annotations

from pathlib import Path

from dreamgym.cli import main as cli
from dreamgym.commands.collect import collect, parse_mix

TINY = ["--no-progress", "tensorboard=false", "eval_max_tasks=1", "agent.history=0", "agent.show_admissible=false",
        "rollout.max_new_tokens=4", "rollout.max_episode_steps=2"]
"""Overrides that make a `dreamgym train` run a few seconds long."""


def refused(capsys, argv: list[str], *words: str) -> str:
    """Run a command in this process: it must exit 2 with one line on stderr that holds every word."""
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dreamgym {argv[0]}: ") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


def dial_data(folder: Path) -> Path:
    """Eight collected dial episodes (oracle and random) in folder/dial.jsonl."""
    out = folder / "dial.jsonl"
    collect("dial", parse_mix("oracle:0.5,random:0.5"), 8, out, progress=False)
    return out
