"""Evaluation: the statistics by hand, evaluate_policy on the real Dial env, and `dreamgym eval` on a checkpoint."""

import json
import math
import re

import pytest

from dreamgym.agent import AgentConfig
from dreamgym.envs.dial import DialEnv, expert_action, make_tasks
from dreamgym.rl.evaluate import (EvalConfig, episode_rows, evaluate_policy, paired_mean_difference, paired_sign_test,
                               two_proportion_z_test, wilson_interval)
from dreamgym.llm.base import Completion
from dreamgym.rl.rollout import RolloutConfig


def test_wilson_interval_by_hand():
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)
    assert wilson_interval(0, 20)[0] == 0.0 and 0.15 < wilson_interval(0, 20)[1] < 0.17
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_two_proportion_z_by_hand():
    z, p = two_proportion_z_test(30, 100, 50, 100)
    # pooled p = .4, se = sqrt(.4 * .6 * (2/100)) ; z = .2 / se
    assert z == pytest.approx(0.2 / math.sqrt(0.4 * 0.6 * 0.02))
    assert p == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)))
    assert p < 0.01 and two_proportion_z_test(50, 100, 30, 100)[1] > 0.99


def test_paired_sign_test_by_hand():
    # 2 pairs won only by the first, 8 only by the second: P(X >= 8), X ~ Bin(10, 1/2) = (45 + 10 + 1) / 1024
    assert paired_sign_test(2, 8) == pytest.approx(56 / 1024)
    assert paired_sign_test(0, 0) == 1.0 and paired_sign_test(5, 0) == 1.0
    assert paired_sign_test(0, 5) == pytest.approx(1 / 32)


def test_paired_mean_difference_by_hand():
    # differences 0.5, 0.0, 0.1, 0.2: mean 0.2; sample variance (0.09 + 0.04 + 0.01 + 0) / 3 = 0.14 / 3
    mean, half = paired_mean_difference([0.0, 1.0, 0.2, 0.3], [0.5, 1.0, 0.3, 0.5])
    assert mean == pytest.approx(0.2) and half == pytest.approx(1.96 * math.sqrt(0.14 / 3) / 2)
    # a constant shift has no spread, so its interval has zero width
    assert paired_mean_difference([0.1, 0.4, 0.9], [0.2, 0.5, 1.0]) == (pytest.approx(0.1), pytest.approx(0.0))
    assert paired_mean_difference([1.0], [0.0]) == (0.0, math.inf)
    with pytest.raises(ValueError, match="2 first values but 1 second"):
        paired_mean_difference([0.0, 1.0], [1.0])


class ExpertBackend:
    """Real tiny tokenizer; replies with the dial expert's action, or nonsense for target 4."""

    def __init__(self, tok):
        self.tokenizer = tok

    def prompt_ids(self, request):
        text = self.tokenizer.apply_chat_template(request, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate_from_ids(self, prompts, params):
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p)
            target = int(re.search(r"set the dial to (\d)", text).group(1))
            value = int(re.findall(r"\[dial\] (\d)", text)[-1])
            reply = "no idea" if target == 4 else f"<think></think><action>{expert_action(value, target)}</action>"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            out.append(Completion(text=reply, token_ids=ids, logprobs=[0.0] * len(ids)))
        return out


class Crash(DialEnv):
    def _step(self, action):
        if self.target == 9:
            raise RuntimeError("boom")
        return super()._step(action)


def test_evaluate_policy_counts_and_excludes_env_failures():
    from transformers import AutoTokenizer

    from dreamgym.llm.presets import resolve

    tok = AutoTokenizer.from_pretrained(resolve("tiny"))
    tasks = make_tasks("test")  # 18 tasks; targets 4 (unparseable reply) and 9 (env crash) among them
    n4 = sum(t.goal["target"] == 4 for t in tasks)
    n9 = sum(t.goal["target"] == 9 for t in tasks)
    res = evaluate_policy(ExpertBackend(tok), Crash, tasks, [0, 1], EvalConfig(agent=AgentConfig(history=1)))
    assert res.n_failed == 2 * n9 and res.n == 2 * (len(tasks) - n9)
    # each failure says why: counted by end reason in the result and its line, kept with its error per episode
    assert res.failures == {"env_error": 2 * n9} and f"env failures {2 * n9} (env_error {2 * n9})" in str(res)
    failed = [r for r in episode_rows(res.episodes) if r["failed"]]
    assert len(failed) == 2 * n9 and all(r["end_reason"] == "env_error" and "boom" in r["error"] for r in failed)
    assert all("end_reason" not in r for r in episode_rows(res.episodes) if not r["failed"])
    assert res.n_success == res.n - 2 * n4 and res.success_rate == pytest.approx(res.n_success / res.n)
    assert res.ci_low < res.success_rate < res.ci_high and res.mean_reward == pytest.approx(res.success_rate)
    assert res.invalid_action_rate > 0 and res.mean_steps > 1
    # the unparseable reply ends its episode before any step, and the expert never plays a no-op
    assert res.noop_step_rate == 0.0
    # passed to the env instead, the nonsense is a no-op on each of the env's 12 steps, every seed
    passed = evaluate_policy(ExpertBackend(tok), Crash, tasks, [0, 1],
                             EvalConfig(agent=AgentConfig(history=1), rollout=RolloutConfig(on_invalid_action="pass")))
    stepped = sum(t.stepped for e in passed.episodes for t in e.turns)
    assert passed.noop_step_rate == pytest.approx(2 * n4 * 12 / stepped) and "no-op steps" in str(passed)
    assert json.dumps(res.to_dict())  # JSON-able, episodes left out
