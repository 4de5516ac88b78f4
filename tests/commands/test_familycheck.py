"""`dreamgym check-family` (`dreamgym.commands.check_family`): the behaviour counts printed, a family that keeps its
contract exits 0, one whose behaviour disagrees exits 1, recorded episodes of another family are refused in one line."""

from __future__ import annotations

from dreamgym.commands.collect import collect
from dreamgym.envs.check import BEHAVIOUR_CHECKS
from dreamgym.commands.check_family import main


def test_the_command_prints_the_counts_and_fails_on_a_disagreement(capsys, tmp_path):
    assert main(["--env", "dial", "--episodes-per-policy", "2"]) == 0
    out = capsys.readouterr().out
    assert "keeps its contract" in out and all(check in out for check in BEHAVIOUR_CHECKS)
    # A limit of 1 step: every episode of more steps disagrees.
    assert main(["--env", "dial", "--episodes-per-policy", "2", "--step-limit", "1"]) == 1
    captured = capsys.readouterr()
    assert "more than the step limit MAX_STEPS (1)" in captured.err and "keeps its contract" not in captured.out
    assert captured.err.splitlines()[-1] == ("environment family 'dial' does not keep its contract: disagreements in "
                                             "step_limit")
    other = tmp_path / "webshop.jsonl"
    collect("webshop", {"random": 1.0}, 1, other, progress=False)
    assert main(["--env", "dial", "--data", str(other)]) == 2  # episodes of another family: refused, one line
    assert "webshop" in capsys.readouterr().err
