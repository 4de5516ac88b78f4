"""`dreamgym check-family` (`dreamgym.commands.check_family`): the behaviour counts printed, a family that keeps its
contract exits 0, one whose behaviour disagrees exits 1, recorded episodes of another family and options the family
cannot take are refused in one line (exit 2)."""

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


def test_options_the_family_cannot_take_are_bad_input_exit_2_not_a_family_failure(capsys):
    """Issue 69, 4: these were exit 1 ("the family breaks its contract"), against the command's documented codes."""
    for argv, words in ((["--split", "nosuch"], "--split 'nosuch': environment family 'dial' has no tasks"),
                        (["--splits", "train,nosuch"], "--splits 'nosuch': environment family 'dial' has no tasks"),
                        (["--splits", ","], "names no split"),
                        (["--task-kw", "bogus=1"], "'bogus': not a keyword of the dial tasks (allowed: none)"),
                        (["--seed", "-1"], "argument --seed: -1 is out of range")):
        try:
            code = main(["--env", "dial", *argv])
        except SystemExit as e:  # argparse's own usage error (an option's type) exits 2 too
            code = e.code
        err = capsys.readouterr().err.strip()
        assert code == 2 and words in err and "\n" not in err and "Traceback" not in err, (argv, code, err)
