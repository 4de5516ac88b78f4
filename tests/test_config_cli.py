"""Bad input on every `dreamgym` subcommand ends in exit code 2 and one line on stderr, never a traceback; each run
is a fresh process, as a user's would be (`python -m dreamgym.cli`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamgym.cli import COMMANDS

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "config"

BAD_INPUT: dict[str, list[str]] = {
    "quickstart": ["--config", str(FIXTURES / "malformed.yaml")],
    "collect": ["--env", "dial", "--episodes", "0", "--out", "never.jsonl"],
    "check-family": ["--env", "dial", "--episodes-per-policy", "0"],
    "train-em": ["--data", "{data}", "batch_size=0"],
    "eval-em": ["--env", "dial", "--model", "{garbled_checkpoint}", "--data", "{data}"],
    "export-em": ["{garbled_checkpoint}", "exported"],
    "train": ["--algo", "grpo", "--env", "dial", "iterations=0"],
    "eval": ["--env", "dial", "temperature=-1"],
    "table": ["--env", "dial", "rows=[Nope]"],
    "alfworld": ["generate", "--n", "0"],
    "presets": ["info", "no/such/model/folder"],
    "serve-model": ["--preset", "no/such/model/folder"],
    "webshop": ["serve", "--max-steps", "0"],
    "view": ["no/such/run/folder"],
    "serve-env": ["--env", "dial", "--dream"],
}
"""One bad input per subcommand."""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A good trajectory file and an experience-model checkpoint whose em_config.json is not JSON."""
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl

    root = tmp_path_factory.mktemp("inputs")
    write_jsonl(root / "data.jsonl", dial_trajectories(2))
    (root / "em" / "model").mkdir(parents=True)
    (root / "em" / "em_config.json").write_text("{not json")
    return {"data": str(root / "data.jsonl"), "garbled_checkpoint": str(root / "em")}


MORE_BAD_INPUT: list[tuple[str, list[str]]] = [
    ("collect", ["--env", "dial", "--episodes", "2", "--out", "x.txt"]),  # a file no reader would read back
    ("webshop", ["serve", "--port", "99999999"]),  # used to end in an OverflowError traceback from bind()
]
"""Probes that once failed, beyond the one case per subcommand."""


@pytest.mark.parametrize("command, bad", [(c, None) for c in sorted(BAD_INPUT)] + MORE_BAD_INPUT)
def test_bad_input_is_one_line_and_exit_code_2(command, bad, tmp_path, inputs):
    assert set(BAD_INPUT) == set(COMMANDS)  # a new subcommand gets a case here
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [a.format(**inputs) for a in (bad or BAD_INPUT[command])]
    proc = subprocess.run([sys.executable, "-m", "dreamgym.cli", command, *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].split(": ")[0] in (f"dreamgym {command}", f"dreamgym {command} {args[0]}"), \
        proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was written before the input was refused


def test_yaml_problems_name_the_file_and_the_field():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def err(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "dreamgym.cli", "train", *args], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 2
        return proc.stderr.strip()

    assert err("--config", str(FIXTURES / "wrong_type.yaml")) == \
        "dreamgym train: eval_at_start: expected a bool, got 'maybe' (allowed: true or false)"
    assert err("--config", str(FIXTURES / "malformed.yaml")).startswith(
        f"dreamgym train: {FIXTURES / 'malformed.yaml'}: not valid YAML: line 3, column")
