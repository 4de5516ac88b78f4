import random

import gymnasium
import pytest

import dreamgym.envs  # noqa: F401 - registers the environments
from dreamgym.env import CheckEnvError, TextEnv, check_env
from dreamgym.envs.dial import DialEnv, expert_action, make_tasks, parse_goal
from dreamgym.types import Task


def test_dial_passes_check_env():
    check_env(DialEnv())
    check_env(DialEnv(split="test"))


def test_dial_registered_with_gymnasium():
    env = gymnasium.make("dreamgym/Dial-v0")
    obs, info = env.reset(seed=3)
    assert "The dial shows" in obs and info["admissible_actions"] == ["turn up", "turn down", "submit"]
    check_env(env.unwrapped)


def test_a_reset_without_a_seed_continues_from_the_last_seeded_one():
    """Gymnasium's seeding: reset(seed=s) then reset() repeats; the task a seed picks is the one it always picked."""
    env = DialEnv()
    first = [env.reset(seed=123)[1]["task"].id, env.reset()[1]["task"].id, env.reset()[1]["task"].id]
    again = [env.reset(seed=123)[1]["task"].id, env.reset()[1]["task"].id, env.reset()[1]["task"].id]
    assert first == again and len(set(first)) > 1
    tasks = make_tasks("train")
    assert [env.reset(seed=s)[1]["task"] for s in range(5)] == [tasks[random.Random(s).randrange(len(tasks))]
                                                               for s in range(5)]


def test_dial_expert_wins_and_wrong_submit_loses():
    env = DialEnv()
    task = Task(id="t", env="dial", instruction="set the dial to 7 and press submit", goal={"target": 7, "start": 3})
    obs, info = env.reset(options={"task": task})
    steps = 0
    while True:
        from dreamgym.envs.dial import parse_state
        a = expert_action(parse_state(info["abstract_state"]), 7)
        obs, r, term, trunc, info = env.step(a)
        steps += 1
        if term or trunc:
            break
    assert r == 1.0 and info["won"] and steps == 5
    env.reset(options={"task": task})
    _, r, term, _, info = env.step("submit")
    assert term and r == 0.0 and not info["won"]


def test_dial_splits_disjoint_and_goal_parser():
    train, test = {t.id for t in make_tasks("train")}, {t.id for t in make_tasks("test")}
    assert train and test and not train & test
    assert parse_goal("set the dial to 4 and press submit") == {"target": 4}
    assert parse_goal("set the dial to 42 and press submit") is None
    assert parse_goal("buy a shirt") is None


class _Nondeterministic(DialEnv):
    """Deliberately broken: ignores the seed."""
    import itertools
    _counter = itertools.count()

    def _reset(self, seed, options):
        return super()._reset(next(self._counter), options)


class _UnseededReset(DialEnv):
    """Deliberately broken as a Gymnasium env: a reset without a seed draws from a generator no seed reaches."""

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed if seed is not None else random.randrange(2**31), options=options)


class _RaisesOnInvalid(DialEnv):
    def _step(self, action):
        if action not in ("turn up", "turn down", "submit"):
            raise ValueError("bad action")
        return super()._step(action)


class _NoInfo(TextEnv):
    def _reset(self, seed, options):
        return "hi", {}

    def _step(self, action):
        return "hi", 0.0, True, False, {}


class _NeverEnds(DialEnv):
    def _step(self, action):
        obs, r, term, trunc, info = super()._step("turn up")
        return obs, r, False, False, info


@pytest.mark.parametrize("broken, message", [
    (_Nondeterministic, "deterministic"),
    (_UnseededReset, r"reset\(seed=s\) then reset\(\) gave different observations"),
    (_RaisesOnInvalid, "raised"),
    (_NoInfo, "task"),
    (_NeverEnds, "never ended"),
])
def test_check_env_catches_broken_envs(broken, message):
    with pytest.raises(CheckEnvError, match=message):
        check_env(broken())


def test_step_batch_matches_step():
    a = [DialEnv() for _ in range(3)]
    b = [DialEnv() for _ in range(3)]
    for i, (x, y) in enumerate(zip(a, b)):
        x.reset(seed=i)
        y.reset(seed=i)
    for actions in (["turn up", "submit", "bogus"], ["turn down", "turn up", "submit"]):
        batched = DialEnv.step_batch(a, actions)
        single = [e.step(act) for e, act in zip(b, actions)]
        assert [r[:4] for r in batched] == [r[:4] for r in single]
    # The env that submitted in the first batch answers with the episode-over notice.
    assert batched[1][4].get("episode_over") is True
