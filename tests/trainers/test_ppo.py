"""PPO with a turn-level critic on the real Dial environment: it learns; the separate critic and its
checkpoint work."""

import time

import pytest
import torch

from iterate import play_and_update

from dreamgym.rl.budget import RealStepBudget
from dreamgym.envs import dial, family
from dreamgym.rl.evaluate import two_proportion_z_test
from dreamgym.rl.loop import LoopSettings, Phase, RealWorld, RunState, run_phases
from dreamgym.trainers.ppo import PPOConfig, PPOTrainer


@pytest.mark.slow
def test_ppo_raises_dial_success(warm_backend, dial_common, dial_eval, learning_report):
    """From a partially competent SFT start, two PPO iterations raise the sampled policy's success
    significantly (two-proportion z-test over 216 + 216 evaluation episodes). Two, not six: success measured 0.33
    -> 0.57 after two (z=5.0) and 0.59 after six (z=5.4), the same margin in a third of the time; with the learning
    rate at 0 (a trainer that does not update) the same test fails."""
    t0 = time.perf_counter()
    be = warm_backend
    tasks = dial.make_tasks("train")
    before = dial_eval(be, 303)
    cfg = PPOConfig(epochs=2, minibatches=2, gamma=1.0, lam=0.95)
    common = dial_common(lr=2e-4, tasks_per_iteration=12, group_size=4)
    tr = PPOTrainer(be, cfg, common)
    end = run_phases(tr, [Phase(RealWorld(family("dial"), 0, tasks), 2)], RunState(RealStepBudget(None)),
                LoopSettings(common, progress=False))
    n_episodes = sum(int(m["rollout/episodes"]) for m in end.history)
    gaps = [abs(m["losses/value_mean"] - m["losses/return_mean"]) for m in end.history]
    assert len(end.history) == 2
    for m in end.history:
        assert m["losses/optimizer_steps"] == 4 and m["losses/samples"] > 0
    after = dial_eval(be, 404)
    z, p = two_proportion_z_test(before.n_success, before.n, after.n_success, after.n)
    learning_report("ppo", before, after, n_episodes, z, p, time.perf_counter() - t0)
    assert after.success_rate > before.success_rate and p < 0.01, (before, after, p)
    assert gaps[-1] < gaps[0]  # the critic (zero at the start) has moved toward the returns


def test_separate_critic_trains_and_checkpoints(warm_backend, dial_common, tmp_path):
    tasks = dial.make_tasks("train")[:4]
    tr = PPOTrainer(warm_backend, PPOConfig(critic="separate", epochs=2, minibatches=1),
                    dial_common(lr=1e-4, group_size=2))
    assert tr.critic is not None and tr.critic is not tr.model
    head0 = tr.value_head.proj.weight.detach().clone()
    _, m1 = play_and_update(tr, tasks, dial.DialEnv, 0)
    _, m2 = play_and_update(tr, tasks, dial.DialEnv, 1)
    assert m1["value_mean"] == 0.0  # the head starts at zero ...
    assert not torch.equal(head0, tr.value_head.proj.weight) and m2["value_mean"] != 0.0  # ... and learns
    assert {"value_loss", "explained_variance", "clip_frac", "entropy", "approx_kl"} <= set(m2)
    tr.save(tmp_path / "ck", {"iteration": 2})
    other = PPOTrainer(warm_backend, tr.config, dial_common(lr=1e-4))
    assert other.load(tmp_path / "ck") == {"iteration": 2}
    a, b = tr.critic.state_dict(), other.critic.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(tr.value_head.proj.weight, other.value_head.proj.weight) and other.updates == 2


def test_ppo_recomputes_old_logprobs_when_the_sampler_numerics_differ(separate_sampler, dial_common):
    """As GRPO: with a sampler whose log-probs are not the learner's, the first step's ratio is exactly 1."""
    tr = PPOTrainer(separate_sampler, PPOConfig(epochs=1, minibatches=1),
                    dial_common(seed=3, lr=1e-4, tasks_per_iteration=4, group_size=2))
    assert not tr.sampler_matches_learner()
    _, metrics = play_and_update(tr, dial.make_tasks("train")[:4], dial.DialEnv)
    assert metrics["optimizer_steps"] == 1 and abs(metrics["approx_kl"]) < 1e-7 and metrics["clip_frac"] == 0.0
