"""`check_family`'s behaviour checks (`dreamgym.envs.check`): real episodes of a family's scripted policies replayed
through its members and hooks, each disagreement with the real environment counted with its reason; one
deliberately broken copy of a working family per hook, each caught by its own check and by no other; recorded
episodes given by the caller; and the family's policy roles."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from dreamgym.commands.collect import run_episode
from dreamgym.envs import CheckFamilyError, EnvFamily, FamilyHooks, check_family, family

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def lamps():
    """The fixture family `familypkg.lamps` (oracle/noisy/random, `noop_state` and `grounded_outcome`), by module."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from familypkg import lamps
    finally:
        sys.path.remove(str(FIXTURES))
    return lamps


@pytest.fixture(scope="module")
def good(lamps):
    return EnvFamily.from_module("lamps", lamps)


def test_a_working_family_agrees_with_its_real_environment_on_every_check_it_has(good):
    report = check_family(good, episodes_per_policy=4)
    assert report.ok and report.episodes == 3 * 4 + 12  # 4 episodes of each policy, a probe on each task played
    assert report.checked["admissible"] > 20 and report.checked["grounded_outcome"] > 20
    assert report.checked["offered"] > 20  # the offered actions, each tried in the real environment
    assert report.checked["noop_state"] >= 12 and report.checked["step_limit"] == 12  # a probe on each task played
    assert report.checked["state_round_trip"] == 0  # a hook it does not define is not checked
    assert all(n == 0 for n in report.disagreements.values())


def _hooks(lamps, **changed):
    """Lamps' own hooks with `changed` ones replaced."""
    return FamilyHooks.of({"noop_state": lamps.noop_state, "grounded_outcome": lamps.grounded_outcome, **changed})


def _broken(lamps) -> dict[str, dict]:
    message = lambda s: s.splitlines()[0]  # noqa: E731 - the state's first line, "[message] ..."
    return {
        # offers only "done": every toggle the environment carries out is missing
        "admissible": dict(admissible_from_state=lambda s: ["done"]),
        # also offers a lamp no room has: the environment refuses it ("Nothing happens."), the dream would not
        "offered": dict(admissible_from_state=lambda s: lamps.admissible_from_state(s) + ["toggle purple"]),
        # says every "done" ends with reward 0: the wins disagree
        "grounded_outcome": dict(hooks=_hooks(lamps, grounded_outcome=lambda task, s, a, n, history=(): (0.0, a == "done"))),
        # keeps the message: the environment shows "Nothing happens."
        "noop_state": dict(hooks=_hooks(lamps, noop_state=lambda s, a: s)),
        # writes the lamps only and carries the previous state's message over: the new message is lost
        "state_round_trip": dict(hooks=_hooks(lamps, model_state=lambda s: "\n".join(s.splitlines()[1:]),
                                              complete_state=lambda w, prev: message(prev) + "\n" + w)),
        # a step limit above the environment's (6): episodes the environment truncates end before it
        "step_limit": dict(MAX_STEPS=20),
    }


@pytest.mark.parametrize("check", ["admissible", "offered", "grounded_outcome", "noop_state", "state_round_trip",
                                   "step_limit"])
def test_each_broken_hook_is_caught_by_its_own_check(good, lamps, check):
    broken = dataclasses.replace(good, **_broken(lamps)[check])
    with pytest.raises(CheckFamilyError, match="disagree with the real environment") as e:
        check_family(broken, episodes_per_policy=4)
    report = e.value.report
    assert report is not None and report.disagreements[check] > 0, report.summary()
    assert {c for c, n in report.disagreements.items() if n} == {check}, report.summary()
    assert report.reasons[check] and all("on 'lamps-" in r for r in report.reasons[check])
    assert f"{check} " in str(e.value)  # the counts are in the message


def test_a_step_limit_below_the_environment_s_is_caught(good):
    with pytest.raises(CheckFamilyError) as e:
        check_family(dataclasses.replace(good, MAX_STEPS=3), episodes_per_policy=4)
    assert e.value.report.disagreements["step_limit"] > 0
    assert "more than the step limit MAX_STEPS (3)" in e.value.report.reasons["step_limit"][0]


def test_recorded_episodes_given_are_replayed_too(good, lamps):
    env = good.make_env("train")
    episodes = [run_episode(env, good.POLICIES["random"](i), i, task=task, policy_name="random")
                for i, task in enumerate(good.tasks("train")[:10])]
    alone = check_family(good)
    both = check_family(good, episodes=episodes)
    assert both.episodes == alone.episodes + 10 and both.steps == alone.steps + sum(len(t.steps) for t in episodes)
    assert both.checked["admissible"] == alone.checked["admissible"] + sum(len(t.steps) for t in episodes)
    broken = dataclasses.replace(good, **_broken(lamps)["admissible"])
    with pytest.raises(CheckFamilyError) as own:
        check_family(broken)
    with pytest.raises(CheckFamilyError) as given:
        check_family(broken, episodes=episodes)
    assert given.value.report.disagreements["admissible"] > own.value.report.disagreements["admissible"]


def test_the_policy_roles_are_declared_or_follow_the_documented_rule(good):
    dial = family("dial")
    assert dial.expert_policy() == "expert" and dial.explore_mix() == {"noisy": 0.7, "random": 0.3}
    assert good.expert_policy() == "oracle" and good.explore_mix() == {"noisy": 0.5, "random": 0.5}
    declared = dataclasses.replace(good, EXPERT_POLICY="noisy", EXPLORE_POLICIES={"random": 2})
    assert declared.expert_policy() == "noisy" and declared.explore_mix() == {"random": 2.0}
    assert dataclasses.replace(good, POLICIES={"random": good.POLICIES["random"]}).expert_policy() is None
    with pytest.raises(ValueError, match="EXPERT_POLICY 'expert' is not in POLICIES"):
        dataclasses.replace(good, EXPERT_POLICY="expert")
    with pytest.raises(ValueError, match="EXPLORE_POLICIES must map names in POLICIES"):
        dataclasses.replace(good, EXPLORE_POLICIES={"wander": 1.0})



def test_a_reward_rule_without_the_history_argument_is_refused_before_it_is_used(good, lamps):
    """`grounded_outcome` takes the episode's history since MiniWoB++'s reads passwords from it: a rule written for
    the earlier four arguments would raise on every dream step, and the synthetic environment would leave each step
    to the model without a word. The family checker and the synthetic environment both name it at start-up."""
    from dreamgym.dream.synthetic_env import SyntheticEnv
    from dreamgym.envs import register_family
    from dreamgym.experience import ExperienceModel
    from dreamgym.llm.fake import FakeLLM

    four = lambda task, s, a, n: lamps.grounded_outcome(task, s, a, n)  # noqa: E731 - the old signature
    old = dataclasses.replace(good, hooks=_hooks(lamps, grounded_outcome=four))
    with pytest.raises(CheckFamilyError, match="grounded_outcome raised TypeError"):
        check_family(old, episodes_per_policy=1)
    for name, fam in (("lamps_four_argument_rule", old), ("lamps_with_history", good)):
        register_family(name, dataclasses.replace(fam, name=name))
    dream = lambda name: SyntheticEnv(ExperienceModel(FakeLLM(lambda req: ""), env=name), reward_from="state")  # noqa: E731
    with pytest.raises(TypeError, match=r"grounded_outcome must take \(task, state, action, next_state, history\)"):
        dream("lamps_four_argument_rule")
    assert dream("lamps_with_history").grounded
