"""The rollout engine on the real Dial environment: token bookkeeping, failure isolation, batching, budget.

Most tests drive the engine with `ScriptedBackend` (tests/scripted_policy.py) — the real tiny tokenizer and chat
template with replies written by a function of the prompt — because what is under test is the engine, not the
model; the last tests use the real tiny model through HFBackend.
"""

import re
import threading
import time

import pytest
import torch
from scripted_policy import ScriptedBackend, expert_reply

from dreamgym.agent import AgentConfig, build_messages
from dreamgym.rl.budget import RealStepBudget
from dreamgym.envs.dial import DialEnv, make_tasks
from dreamgym.episode import RolloutConfig, rollout_metrics
from dreamgym.rl.rollout import run_rollouts

AGENT = AgentConfig(history=2, show_admissible=False, system_prompt="You are an agent.")


@pytest.fixture(scope="module")
def tiny():
    from dreamgym.llm.presets import load_preset

    torch.set_num_threads(1)
    return load_preset("tiny", device="cpu")


def task(start, target):
    return next(t for t in make_tasks("train") + make_tasks("test")
                if t.goal == {"target": target, "start": start})


def test_expert_rollouts_win_and_keep_exact_tokens(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    tasks = [task(0, 3), task(5, 2), task(9, 8)]
    stats = {}
    eps = run_rollouts(be, DialEnv, tasks, group_size=2, seed=1, config=RolloutConfig(), agent=AGENT, stats=stats,
                       policy_version="v7")
    assert [e.group for e in eps] == [0, 0, 1, 1, 2, 2] and [e.member for e in eps] == [0, 1] * 3
    assert all(e.won and e.end_reason == "terminated" and e.trainable and e.reward == 1.0 for e in eps)
    assert [len(e.turns) for e in eps] == [4, 4, 4, 4, 2, 2]  # |target - start| + 1
    assert eps[0].seed == eps[1].seed != eps[2].seed  # a group shares its environment seed
    assert stats["real_steps"] == 20 and stats["synthetic_steps"] == 0
    assert be.calls == 4  # one batched generation per turn, over all live episodes
    ep = eps[0]
    for k, t in enumerate(ep.turns):
        # the prompt is rebuilt from the task, the last H turns and the current state
        expect = be.prompt_ids(build_messages(ep.task, ep.history[:k], t.state, t.admissible_actions, AGENT))
        assert t.prompt_ids == expect and t.history_shown == min(k, 2)
        assert tok.decode(t.completion_ids) == t.text and len(t.logprobs) == len(t.completion_ids)
    assert ep.turns[2].state.startswith("[dial] 2")
    shown = tok.decode(ep.turns[3].prompt_ids).split("Current state")[0]  # turn 3 shows turns 1 and 2 only
    assert "[dial] 0" not in shown and "[dial] 1" in shown and "[dial] 2" in shown
    tr = ep.to_trajectory()
    assert tr.source == "real" and tr.won and tr.policy_version == "v7" and tr.seed == ep.seed
    assert [s.action for s in tr.steps] == ["turn up"] * 3 + ["submit"]
    assert tr.steps[0].info["agent_thought"] == "dial 0, target 3" and tr.steps[-1].info["end_reason"] == "terminated"
    assert tr.steps[1].state == tr.steps[0].next_state and tr.total_reward == 1.0


def test_invalid_reply_ends_episode_or_is_passed_to_env(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, lambda p: "I will turn the dial up")  # no <action> tag
    [ep] = run_rollouts(be, DialEnv, [task(0, 3)], config=RolloutConfig(), agent=AGENT)
    assert ep.end_reason == "invalid_action" and ep.trainable and ep.reward == 0.0 and not ep.won
    assert ep.invalid_actions == 1 and len(ep.turns) == 1 and not ep.turns[0].stepped
    assert ep.to_trajectory().steps == []

    [ep] = run_rollouts(be, DialEnv, [task(0, 3)], config=RolloutConfig(on_invalid_action="pass"), agent=AGENT)
    # the environment answers the raw text with its notice until its own step limit truncates the episode
    assert ep.end_reason == "truncated" and ep.invalid_actions == 12 and len(ep.turns) == 12
    assert all("Nothing happens" in t.observation for t in ep.turns)
    assert rollout_metrics([ep])["invalid_action_rate"] == 1.0
    # ... and says each step did nothing, which the engine counts apart from unparseable replies
    assert ep.noop_steps == 12 and rollout_metrics([ep])["noop_step_rate"] == 1.0


def test_grounding_maps_misspelt_actions_onto_admissible_ones(tiny):
    _, tok = tiny
    typo = {"turn up": "turn upp", "turn down": "tun down", "submit": "submitt"}

    def misspelt(prompt: str) -> str:
        reply = expert_reply(prompt)
        action = re.search(r"<action>(.*)</action>", reply).group(1)
        return reply.replace(f"<action>{action}<", f"<action>{typo[action]}<")

    be = ScriptedBackend(tok, misspelt)
    tasks = [task(0, 3), task(5, 2)]
    plain = run_rollouts(be, DialEnv, tasks, config=RolloutConfig(), agent=AGENT)
    assert not any(e.won for e in plain) and all(e.grounded_actions == 0 for e in plain)
    eps = run_rollouts(be, DialEnv, tasks, config=RolloutConfig(ground_actions=0.8), agent=AGENT)
    assert all(e.won for e in eps) and [e.grounded_actions for e in eps] == [4, 4]
    t = eps[0].turns[0]
    assert t.action == "turn up" and t.generated_action == "turn upp" and "turn upp" in t.text  # tokens as written
    assert eps[0].to_trajectory().steps[0].info["generated_action"] == "turn upp"
    assert rollout_metrics(eps)["grounded_action_rate"] == 1.0 and rollout_metrics(plain)["grounded_action_rate"] == 0


class CrashingDial(DialEnv):
    """Raises on its second step when the target is 7; hangs on its first step when the target is 8."""

    def _step(self, action):
        if self.target == 7 and self.t >= 1:
            raise RuntimeError("simulated crash")
        if self.target == 8:
            time.sleep(1.5)
        return super()._step(action)


class BrokenReset(DialEnv):
    def _reset(self, seed, options):
        raise OSError("cannot start")


def test_failures_are_isolated_and_recorded(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    tasks = [task(0, 3), task(2, 7), task(4, 8), task(6, 5)]
    cfg = RolloutConfig(step_timeout_s=0.3)
    t0 = time.monotonic()
    eps = run_rollouts(be, CrashingDial, tasks, config=cfg, agent=AGENT)
    assert time.monotonic() - t0 < 1.4  # the hanging step did not hold the batch
    reasons = [e.end_reason for e in eps]
    assert reasons == ["terminated", "env_error", "step_timeout", "terminated"]
    assert eps[1].error.startswith("RuntimeError: simulated crash") and len(eps[1].turns) == 2
    assert not eps[1].trainable and not eps[2].trainable and eps[0].won and eps[3].won
    m = rollout_metrics(eps)
    assert m["episodes_failed"] == 2 and m["success_rate"] == 1.0 and m["end_env_error"] == 1

    eps = run_rollouts(be, BrokenReset, tasks[:2], agent=AGENT)
    assert [e.end_reason for e in eps] == ["reset_error", "reset_error"] and eps[0].error.startswith("OSError")

    cfg = RolloutConfig(max_episode_steps=2)
    [ep] = run_rollouts(be, DialEnv, [task(0, 5)], config=cfg, agent=AGENT)
    assert ep.end_reason == "max_turns" and ep.trainable and len(ep.turns) == 2


class SlowUnsafeDial(DialEnv):
    """Not thread-safe: records how many of its kind run at once; each reset and step takes 0.2 s."""

    thread_safe = False
    running = 0
    most = 0
    lock = threading.Lock()

    def _timed(self, fn, *args):
        cls = SlowUnsafeDial
        with cls.lock:
            cls.running += 1
            cls.most = max(cls.most, cls.running)
        try:
            time.sleep(0.2)
            return fn(*args)
        finally:
            with cls.lock:
                cls.running -= 1

    def _reset(self, seed, options):
        return self._timed(super()._reset, seed, options)

    def _step(self, action):
        return self._timed(super()._step, action)


def test_envs_that_are_not_thread_safe_run_one_at_a_time(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    tasks = [task(0, 3), task(2, 7), task(4, 8), task(6, 5)]
    # 8 environments queued behind one worker: waiting (up to 1.4 s) does not count against a 0.5 s step timeout
    eps = run_rollouts(be, SlowUnsafeDial, tasks, group_size=2, config=RolloutConfig(step_timeout_s=0.5),
                       agent=AGENT)
    assert SlowUnsafeDial.most == 1
    assert all(e.end_reason == "terminated" and e.won for e in eps)
    SlowUnsafeDial.most = 0
    run_rollouts(be, type("SafeSlow", (SlowUnsafeDial,), {"thread_safe": True}), tasks, agent=AGENT)
    assert SlowUnsafeDial.most > 1  # the same environments declared safe do run together


def failing_factory():
    if failing_factory.calls.pop(0):
        raise ValueError("no such game")
    return DialEnv()


def test_a_failing_constructor_ends_only_its_episode(tiny):
    _, tok = tiny
    failing_factory.calls = [False, True, False]
    eps = run_rollouts(ScriptedBackend(tok, expert_reply), failing_factory, [task(0, 3), task(2, 7), task(6, 5)],
                       agent=AGENT)
    assert [e.end_reason for e in eps] == ["terminated", "reset_error", "terminated"]
    assert eps[1].error.startswith("ValueError: no such game") and eps[1].wall_time_s < 60


class BatchedDial(DialEnv):
    batched_step = True
    calls = []

    @classmethod
    def _step_batch(cls, envs, actions):
        cls.calls.append(len(envs))
        return [e._step(a) for e, a in zip(envs, actions)]


class SyntheticDial(DialEnv):
    is_synthetic = True


def test_batched_env_steps_once_per_turn_and_matches(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    tasks = [task(0, 3), task(5, 2), task(9, 8)]
    BatchedDial.calls = []
    a = run_rollouts(be, BatchedDial, tasks, agent=AGENT)
    b = run_rollouts(be, DialEnv, tasks, agent=AGENT)
    assert BatchedDial.calls == [3, 3, 2, 2]  # one step_batch per turn over the live episodes
    assert [[t.observation for t in e.turns] for e in a] == [[t.observation for t in e.turns] for e in b]


class SlowBatchedDial(DialEnv):
    """A batched environment whose step_batch takes 0.1 s per environment, like an experience model on a CPU."""

    batched_step = True

    @classmethod
    def _step_batch(cls, envs, actions):
        time.sleep(0.1 * len(envs))
        return [e._step(a) for e, a in zip(envs, actions)]


class SlowBackend(ScriptedBackend):
    def generate_from_ids(self, prompts, params):
        time.sleep(0.3)
        return super().generate_from_ids(prompts, params)


def test_timeouts_measure_each_episodes_own_environment_time(tiny):
    _, tok = tiny
    tasks = [task(0, 3), task(5, 2), task(9, 8), task(1, 4)]
    # a batched step of 8 environments takes 0.8 s: n steps at once get n step timeouts, not one
    eps = run_rollouts(ScriptedBackend(tok, expert_reply), SlowBatchedDial, tasks, group_size=2, agent=AGENT,
                       config=RolloutConfig(step_timeout_s=0.3))
    assert all(e.won for e in eps)
    # each turn charges an episode its share of the batch: ~0.1 s
    assert all(0.09 * len(e.turns) <= e.env_time_s < 0.1 * len(e.turns) + 0.15 for e in eps)
    # a slow policy (0.3 s per turn, 1.2 s per episode) does not count against the episodes' environment time
    eps = run_rollouts(SlowBackend(tok, expert_reply), DialEnv, tasks, agent=AGENT,
                       config=RolloutConfig(episode_timeout_s=0.5))
    assert all(e.won for e in eps) and all(e.wall_time_s > 0.5 > e.env_time_s for e in eps)
    # while environment time that adds up past the limit ends the episode
    eps = run_rollouts(ScriptedBackend(tok, expert_reply), SlowUnsafeDial, [task(0, 8)], agent=AGENT,
                       config=RolloutConfig(episode_timeout_s=0.5))
    assert eps[0].end_reason == "episode_timeout" and not eps[0].trainable and len(eps[0].turns) == 2


def test_real_step_budget_is_a_hard_cap(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    budget = RealStepBudget(10)
    tasks = [task(0, 5)] * 4  # 6 steps each
    eps = run_rollouts(be, DialEnv, tasks, budget=budget, agent=AGENT)
    assert budget.used == 10 and budget.exhausted
    assert sum(t.stepped for e in eps for t in e.turns) == 10
    assert all(e.end_reason == "budget" and not e.trainable for e in eps)
    # synthetic environments do not draw on the real budget
    eps = run_rollouts(be, SyntheticDial, tasks, budget=budget, agent=AGENT)
    assert all(e.won and e.source == "synthetic" for e in eps) and budget.used == 10
    assert eps[0].to_trajectory().source == "synthetic"


def test_prompt_is_cut_to_fit(tiny):
    _, tok = tiny
    be = ScriptedBackend(tok, expert_reply)
    full = be.prompt_ids(build_messages(task(0, 5), [("[dial] 0", "turn up")] * 2, "[dial] 2", None, AGENT))
    bare = be.prompt_ids(build_messages(task(0, 5), [], "[dial] 2", None, AGENT))
    [ep] = run_rollouts(be, DialEnv, [task(0, 5)], config=RolloutConfig(max_prompt_tokens=len(bare) + 30), agent=AGENT)
    assert ep.won and max(t.history_shown for t in ep.turns) < 2 < len(full) - len(bare)
    assert all(len(t.prompt_ids) <= len(bare) + 30 for t in ep.turns)
    [ep] = run_rollouts(be, DialEnv, [task(0, 5)], config=RolloutConfig(max_prompt_tokens=10), agent=AGENT)
    assert ep.end_reason == "prompt_too_long" and not ep.trainable


def test_real_model_rollouts_are_seeded(tiny):
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny
    be = HFBackend(model, tok)
    cfg = RolloutConfig(max_new_tokens=6, max_episode_steps=3, on_invalid_action="pass")
    tasks = [task(0, 3), task(5, 2)]
    a = run_rollouts(be, DialEnv, tasks, group_size=2, seed=3, config=cfg, agent=AGENT)
    b = run_rollouts(be, DialEnv, tasks, group_size=2, seed=3, config=cfg, agent=AGENT)
    c = run_rollouts(be, DialEnv, tasks, group_size=2, seed=4, config=cfg, agent=AGENT)
    ids = lambda eps: [[t.completion_ids for t in e.turns] for e in eps]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert ids(a)[0] != ids(a)[1]  # group members sample differently from the same prompt
    assert all(len(t.logprobs) == len(t.completion_ids) > 0 for e in a for t in e.turns)

