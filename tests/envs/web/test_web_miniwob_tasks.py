"""Choosing MiniWoB++ tasks in the split (the default 18, `all` the `miniwob` package ships, or names), refusing
unknown names before anything runs, and the oracle refusing a task it has no rule for: none of it needs a browser.
Playing chosen tasks is in test_web_miniwob.py."""

from __future__ import annotations

import pytest

pytest.importorskip("miniwob")

from dreamgym.cli import main as cli  # noqa: E402
from dreamgym.commands.collect import EpisodeFailed, run_episode  # noqa: E402
from dreamgym.envs.web import miniwob_tasks as M  # noqa: E402
from dreamgym.envs.web.miniwob import parse_goal  # noqa: E402
from dreamgym.envs.web.miniwob_policies import ORACLE_TASKS, POLICIES, NoOracleRule  # noqa: E402
from dreamgym.envs.web.miniwob_tasks import UnknownTaskError, choose, shipped_tasks, split_specs  # noqa: E402
from dreamgym.types import Task  # noqa: E402


def test_the_default_split_is_unchanged_and_any_shipped_task_can_be_chosen():
    assert split_specs("train") == split_specs("train:default") == [(t, s) for t in M.TRAIN_TASKS for s in range(20)]
    assert split_specs("test") == [(t, 10_000 + s) for t in M.DEFAULT_TASKS for s in range(5)]
    assert len(M.DEFAULT_TASKS) == 18
    shipped = shipped_tasks()
    assert len(shipped) > 100 and set(M.DEFAULT_TASKS) < set(shipped)
    assert "click-checkboxes-large" in shipped and "use-slider" in shipped
    assert {t for t, _ in split_specs("test:all", 1)} == set(shipped)
    assert split_specs("train:use-slider, enter-date", 2) == [("use-slider", 0), ("use-slider", 1), ("enter-date", 0),
                                                               ("enter-date", 1)]
    assert split_specs("test:use-slider", 2) == [("use-slider", 10_000), ("use-slider", 10_001)]


@pytest.mark.parametrize("split, message", [
    ("train:click-checkboxes-larg", "unknown MiniWoB++ task 'click-checkboxes-larg' (close: click-checkboxes-large"),
    ("test:enter-text,nope", "unknown MiniWoB++ task 'nope'"),
    ("train:", "no task named"),
])
def test_an_unknown_task_is_refused_with_the_list_of_shipped_ones(split, message):
    with pytest.raises(UnknownTaskError) as e:
        split_specs(split)
    text = str(e.value)
    assert text.startswith(message) and "\n" not in text
    assert "choose default or extended or all or names from the" in text and ", ".join(shipped_tasks()) in text
    with pytest.raises(ValueError, match="splits 'train' and 'test'"):
        split_specs("valid:all")


@pytest.mark.parametrize("command", [
    ["collect", "--env", "miniwob", "--episodes", "2", "--no-progress"],
    ["eval", "--env", "miniwob"],
])
def test_commands_refuse_an_unknown_task_before_they_start(command, tmp_path, capsys):
    """One line on stderr, exit 2, and nothing written: no browser starts, no episode runs, no policy loads."""
    extra = ["--out", str(tmp_path / "x.jsonl")] if command[0] == "collect" else []
    assert cli([*command, *extra, "--split", "test:enter-txt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dreamgym {command[0]}: unknown MiniWoB++ task 'enter-txt' (close: enter-text")
    assert "\n" not in err and "use-slider" in err
    assert not list(tmp_path.iterdir())


def test_the_extended_set_adds_oracle_tasks_to_train_and_keeps_the_test_only_tasks_and_their_pages_out():
    """`train:extended` is the default train split plus `EXTRA_TRAIN_TASKS` at the same seeds; `test:extended` is the
    default test split plus them at the held-out seeds. No test-only task, nor a task that plays a test-only task's
    page under another name, is trained on; the oracle has a rule for every added task."""
    extra = M.EXTRA_TRAIN_TASKS
    train = split_specs("train:extended")
    assert train[:300] == split_specs("train") and train[300:] == [(t, s) for t in extra for s in range(20)]
    assert split_specs("test:extended") == split_specs("test") + [(t, 10_000 + s) for t in extra for s in range(5)]
    trained = {t for t, _ in train}
    same_page = {"click-collapsible-nodelay", "click-collapsible-2", "click-collapsible-2-nodelay",
                 "click-test-transfer"}
    assert not trained & (set(M.TEST_ONLY) | same_page) and set(extra) <= set(ORACLE_TASKS)
    assert len(set(extra)) == 8 and not set(extra) & set(M.DEFAULT_TASKS)
    assert choose("extended") == M.EXTENDED_TASKS == (*M.DEFAULT_TASKS, *extra)


def test_choose_names_each_task_once_in_the_order_given():
    assert choose("enter-date,use-slider,enter-date") == ("enter-date", "use-slider")
    assert choose("all") == shipped_tasks() and choose("default") == M.DEFAULT_TASKS


def _task(sub: str) -> Task:
    return Task(id=f"miniwob-{sub}-0", env="miniwob", instruction="", goal={"subdomain": sub, "seed": 0})


def test_the_oracle_refuses_a_task_it_has_no_rule_for_and_the_random_policy_plays_it():
    assert set(M.DEFAULT_TASKS) < set(ORACLE_TASKS) and "use-slider" not in ORACLE_TASKS
    for name in ("oracle", "expert", "noisy"):
        with pytest.raises(NoOracleRule, match="no rule for task 'use-slider'; it plays"):
            POLICIES[name](0).reset(_task("use-slider"), "", {})
        POLICIES[name](0).reset(_task("click-checkboxes-large"), "", {})
    POLICIES["random"](0).reset(_task("use-slider"), "", {})


def test_a_collection_counts_an_oracle_episode_without_a_rule_as_failed_with_the_reason():
    """What `dreamgym collect` records: a failed episode at the policy stage naming the task, not an episode of an
    "oracle" that guesses."""
    from dreamgym.envs.dial import DialEnv

    class OnePage(DialEnv):  # any environment: the oracle refuses before the first step
        def _reset(self, seed, options):
            obs, info = super()._reset(seed, {})
            info["task"] = options["task"]
            return obs, info

    with pytest.raises(EpisodeFailed) as e:
        run_episode(OnePage(), POLICIES["oracle"](0), 0, task=_task("use-slider"))
    assert e.value.stage == "policy" and "NoOracleRule: the MiniWoB++ oracle has no rule for task 'use-slider'" in \
        e.value.reason


@pytest.mark.parametrize("instruction, tasks", [
    ("Select mJ5sq03, Mb, YJ and click Submit.", ["click-checkboxes", "click-checkboxes-large", "click-checkboxes-soft",
                                                  "click-checkboxes-transfer", "click-option"]),
    ("Select Somalia from the list and click Submit.", ["choose-list"]),
    ("Select Brazil, Mauritania from the scroll list and click Submit.", ["click-scroll-list"]),
    ('Click on the "确定" button.', ["click-button", "unicode-test"]),
    ("Click button ONE.", ["click-test-2", "click-test-transfer"]),
])
def test_the_goal_parser_names_every_task_an_instruction_may_belong_to(instruction, tasks):
    assert parse_goal(instruction)["tasks"] == tasks
    assert parse_goal("Select 104 with the slider and hit Submit.") is None
