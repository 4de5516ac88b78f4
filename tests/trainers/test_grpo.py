"""GRPO on the real Dial environment: it learns, it resumes exactly (with the run loop around it), and failures
stay inside their episode."""

import copy
import time

import pytest
import torch

from iterate import play_and_update

from dreamgym.rl.budget import RealStepBudget
from dreamgym.config import ConfigError, validate_config
from dreamgym.envs import dial, family
from dreamgym.rl.evaluate import two_proportion_z_test
from dreamgym.curriculum.pools import iteration_tasks
from dreamgym.rl.loop import LoopSettings, Phase, RealWorld, RunState, run_phases
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer

TIME_KEYS = ("time_s", "tokens_per_s")


def _stable(metrics):
    """Metrics without wall-clock figures (those differ between identical runs)."""
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIME_KEYS)}


@pytest.mark.slow
def test_grpo_raises_dial_success(warm_backend, dial_common, dial_eval, learning_report):
    """From a partially competent SFT start, two GRPO iterations raise the sampled policy's success
    significantly (two-proportion z-test over 216 + 216 evaluation episodes). Two, not six: success measured 0.30
    -> 0.63 after two (z=6.9) and 0.77 after six (z=9.8), so two already show learning far past p < 0.01, in a
    third of the time; with the learning rate at 0 (a trainer that does not update) the same test fails."""
    t0 = time.perf_counter()
    be = warm_backend
    tasks = dial.make_tasks("train")
    before = dial_eval(be, 101)
    cfg, common = GRPOConfig(epochs=2, minibatches=2), dial_common(lr=2e-4, group_size=8, tasks_per_iteration=8)
    tr = GRPOTrainer(be, cfg, common)
    end = run_phases(tr, [Phase(RealWorld(family("dial"), 0, tasks), 2)], RunState(RealStepBudget(None)),
                LoopSettings(common, progress=False))
    n_episodes = sum(int(m["rollout/episodes"]) for m in end.history)
    assert len(end.history) == 2
    for m in end.history:
        assert m["losses/samples"] > 0 and m["losses/optimizer_steps"] == 4 and m["rollout/real_steps_used"] > 0
    after = dial_eval(be, 202)
    z, p = two_proportion_z_test(before.n_success, before.n, after.n_success, after.n)
    learning_report("grpo", before, after, n_episodes, z, p, time.perf_counter() - t0)
    assert after.success_rate > before.success_rate and p < 0.01, (before, after, p)


def test_grpo_resume_is_exact(warm_preset, dial_common, tmp_path):
    """Interrupted after 2 iterations of the run loop, saved with the run's state, loaded into a fresh trainer and
    state, 1 more == 3 uninterrupted (the same task draws, rollouts, updates and real-step count)."""
    from dreamgym.llm.hf import HFBackend

    model, tok = warm_preset
    cfg, common = GRPOConfig(kl_coef=0.05, epochs=2, minibatches=2), \
        dial_common(seed=5, lr=1e-3, group_size=4, tasks_per_iteration=4)

    def fresh():
        m = copy.deepcopy(model)
        return GRPOTrainer(HFBackend(m, tok), cfg, common), RunState(RealStepBudget(500))

    def run(tr, state, until):
        end = run_phases(tr, [Phase(RealWorld(family("dial"), 5), until)], state, LoopSettings(common,
                                                                                          progress=False))
        return [_stable(m) for m in end.history]

    full, full_state = fresh()
    straight = run(full, full_state, 3)
    assert sum(m["losses/optimizer_steps"] for m in straight) >= 4 and any(m["losses/kl"] > 0 for m in straight)
    first, state = fresh()
    resumed = run(first, state, 2)
    first.save(tmp_path / "ck", state.state_dict())
    second, state = fresh()
    state.load_state_dict(second.load(tmp_path / "ck"))
    assert state.iteration == 2 and state.budget.used == resumed[-1]["rollout/real_steps_used"]
    resumed += run(second, state, 3)
    assert resumed == straight and state.budget.used == full_state.budget.used
    ref = full.model.state_dict()
    assert all(torch.equal(ref[k], v) for k, v in second.model.state_dict().items())


class CrashOnTarget7(dial.DialEnv):
    def _step(self, action):
        if self.target == 7:
            raise RuntimeError("simulated environment crash")
        return super()._step(action)


def test_crashing_env_leaves_the_iteration_intact(warm_backend, dial_common):
    tasks = [t for t in dial.make_tasks("train") if t.goal["target"] in (2, 7)][:4]
    assert {t.goal["target"] for t in tasks} == {2, 7}
    tr = GRPOTrainer(warm_backend, GRPOConfig(), dial_common(group_size=4))
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    eps, m = play_and_update(tr, tasks, CrashOnTarget7)
    crashed = [e for e in eps if e.task.goal["target"] == 7]
    assert crashed and all(e.end_reason == "env_error" and "simulated" in e.error for e in crashed)
    assert m["end_env_error"] == len(crashed) and m["episodes_trainable"] == len(eps) - len(crashed)
    assert m["optimizer_steps"] == 1 and m["samples"] > 0  # the healthy episodes were trained on
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_equal_reward_groups_are_counted_and_skipped(tiny_backend, dial_common):
    """The random-init model never writes a valid action: every reward is 0, so no group carries signal."""
    tr = GRPOTrainer(tiny_backend, GRPOConfig(), dial_common(group_size=3))
    eps, m = play_and_update(tr, dial.make_tasks("train")[:2], dial.DialEnv)
    assert all(e.end_reason == "invalid_action" and e.reward == 0 for e in eps)
    assert m["groups"] == 2 and m["zero_variance_groups"] == 2 and m["samples"] == 0 and m["optimizer_steps"] == 0


def test_lora_grpo_iteration_with_kl_and_adapter_checkpoint(warm_backend, dial_common, tmp_path):
    """LoRA (the path real presets take): only adapters train, the reference is the adapter-free base."""
    from dreamgym.trainers.common import ModelConfig

    common = dial_common(lr=1e-3, model=ModelConfig(preset="tiny", lora=True, lora_r=8), group_size=4)
    tasks = dial.make_tasks("train")[10:13]
    tr = GRPOTrainer(warm_backend, GRPOConfig(kl_coef=0.1), common)
    base = {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_" not in n}
    _, m1 = play_and_update(tr, tasks, dial.DialEnv, 0)
    _, m2 = play_and_update(tr, tasks, dial.DialEnv, 1)
    assert m1["samples"] + m2["samples"] > 0 and m2["kl"] >= 0.0
    assert all(torch.equal(base[n], p) for n, p in tr.model.named_parameters() if "lora_" not in n)
    tr.save(tmp_path / "ck")
    assert (tmp_path / "ck" / "adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "ck" / "model").exists()
    from dreamgym.rl.evaluate import load_policy

    model, tok, meta = load_policy(str(tmp_path / "ck"))
    assert meta["kind"] == "lora" and meta["base"] == "tiny"
    lora = {n: p for n, p in tr.model.named_parameters() if "lora_" in n}
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert lora.keys() == loaded.keys() and all(torch.equal(lora[n], loaded[n]) for n in lora)


def _ratio_one_samples(backend, lengths, advantages, loss_agg):
    """Turn samples of hand-made episodes whose old log-probs are the model's own (importance ratio exactly 1).

    lengths[e] lists the completion lengths of episode e's turns."""
    from dreamgym.episode import Episode, Turn
    from dreamgym.trainers.common import pack, policy_forward
    from dreamgym.trainers.grpo import episode_samples

    gen = torch.Generator().manual_seed(0)
    vocab = backend.model.config.vocab_size
    episodes = []
    for turns in lengths:
        ts = []
        for n in turns:
            prompt = torch.randint(3, vocab, (5,), generator=gen).tolist()
            comp = torch.randint(3, vocab, (n,), generator=gen).tolist()
            packed = pack([prompt], [comp], 0)
            with torch.no_grad():
                logp = policy_forward(backend.model, packed).logp[0][packed.loss_mask[0]].tolist()
            ts.append(Turn(state="", prompt_ids=prompt, completion_ids=comp, logprobs=logp, text="", action=None))
        episodes.append(Episode(task=None, seed=0, group=0, member=len(episodes), turns=ts))
    return episode_samples(episodes, advantages, loss_agg)


@pytest.mark.parametrize("loss_agg", ["token", "episode"])
def test_loss_aggregation_weights_match_the_formula(tiny_backend, dial_common, loss_agg):
    """At ratio 1 the clipped loss is -weighted mean(A): token mean -(sum A_e T_e)/(sum T_e); episode mean -mean(A_e).

    A group with a short win (+1, 4 tokens) and a long loss (-1, 3 turns of 4 tokens): the token mean pushes down
    by (4 - 12) / 16 = -0.5 per token, the episode mean is neutral (0)."""
    lengths, adv = [[4], [4, 4, 4]], [1.0, -1.0]
    samples = _ratio_one_samples(tiny_backend, lengths, adv, loss_agg)
    weights = {s.episode: s.weight for s in samples}
    assert weights == ({0: 1.0, 1: 1.0} if loss_agg == "token" else {0: 0.25, 1: 1 / 12})
    tr = GRPOTrainer(tiny_backend, GRPOConfig(loss_agg=loss_agg), dial_common(lr=1e-4))
    m = tr.optimize(samples)
    expected = -(1 * 4 - 1 * 12) / 16 if loss_agg == "token" else 0.0
    assert m["policy_loss"] == pytest.approx(expected, abs=1e-5)
    assert m["approx_kl"] == pytest.approx(0.0, abs=1e-5) and m["optimizer_steps"] == 1


def test_loss_agg_is_validated():
    with pytest.raises(ConfigError, match="loss_agg"):
        validate_config(GRPOConfig(loss_agg="sequence"))  # type: ignore[arg-type]


def test_min_groups_defers_the_update_until_enough_groups_carry_signal(warm_backend, dial_common):
    """With `min_groups` an iteration with too few informative groups keeps its samples and leaves the weights
    alone; the first iteration that brings the count up trains on the kept samples and its own together."""
    tasks = dial.make_tasks("train")[:6]
    tr = GRPOTrainer(warm_backend, GRPOConfig(min_groups=10**6), dial_common(group_size=4))
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    _, m1 = play_and_update(tr, tasks[:3], dial.DialEnv, 0)
    informative = m1["groups"] - m1["zero_variance_groups"]
    assert informative >= 1, "the warm policy should win some dial episodes"
    assert m1["update_deferred"] == 1 and m1["kept_groups"] == informative
    assert m1["samples"] == 0 and m1["optimizer_steps"] == 0
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())
    kept = len(tr._kept)
    tr.config.min_groups = 1
    _, m2 = play_and_update(tr, tasks[3:], dial.DialEnv, 1)
    # The update trains on the kept samples (and any new ones).
    assert m2["update_deferred"] == 0 and m2["optimizer_steps"] == 1 and m2["samples"] >= kept > 0
    assert tr._kept == [] and tr._kept_groups == 0
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())
    with pytest.raises(ConfigError, match="min_groups"):
        validate_config(GRPOConfig(min_groups=-1))


class PartialCreditDial(dial.DialEnv):
    """The dial with WebShop-style partial credit: a submit one notch off still pays 0.5 (and is still not a win)."""

    def _step(self, action):
        obs, reward, term, trunc, info = super()._step(action)
        if term and not info["won"] and abs(self.value - self.target) == 1:
            reward = 0.5
        return obs, reward, term, trunc, info


def _zero_groups(episodes, earned):
    by_group = {}
    for e in episodes:
        if e.trainable:
            by_group.setdefault(e.group, set()).add(earned(e))
    return sum(len(v) == 1 for v in by_group.values())


def test_success_reward_trains_on_wins_not_partial_credit(warm_preset, dial_common):
    """reward="success": a group of near-misses (0.5 and 0 rewards, no win) carries no signal, where "env" trains on
    it. Same start, same seed, so both trainers play the same episodes; only the advantages differ."""
    from dreamgym.llm.hf import HFBackend

    model, tok = warm_preset
    tasks = dial.make_tasks("train")[:24]
    runs = {}
    for reward in ("env", "success"):
        m = copy.deepcopy(model)
        tr = GRPOTrainer(HFBackend(m, tok, batch_size=128), GRPOConfig(reward=reward), dial_common(group_size=4))
        runs[reward] = play_and_update(tr, tasks, PartialCreditDial)
    (eps, m_env), (eps_s, m_success) = runs["env"], runs["success"]
    assert [(e.reward, e.won) for e in eps] == [(e.reward, e.won) for e in eps_s]
    assert any(e.reward == 0.5 for e in eps)  # near-misses were played, so the two rules can differ
    assert m_env["zero_variance_groups"] == _zero_groups(eps, lambda e: e.reward)
    assert m_success["zero_variance_groups"] == _zero_groups(eps, lambda e: e.won)
    assert m_success["zero_variance_groups"] > m_env["zero_variance_groups"], (m_success, m_env)
    assert m_success["mean_reward"] == m_env["mean_reward"]  # the logged reward stays the environment's


def test_grpo_reward_is_validated():
    with pytest.raises(ConfigError, match=r"reward: 'won' is not a valid choice \(allowed: one of env, success\)"):
        validate_config(GRPOConfig(reward="won"))  # type: ignore[arg-type]


@pytest.mark.parametrize("recompute", [True, False])
def test_first_update_ratio_is_one_when_sampler_and_learner_numerics_differ(separate_sampler, tiny_backend,
                                                                             dial_common, monkeypatch, recompute):
    """The learner recomputes the "old" log-probs when the sampler's are not its own numerics, so the importance
    ratio is exactly 1 at the first step (approx_kl 0, nothing clipped); taking the sampler's bf16 log-probs as old
    (the control) starts the ratio away from 1. A backend sampling with the trained model itself on CPU keeps its
    own log-probs (no extra forward pass)."""
    assert GRPOTrainer(tiny_backend, GRPOConfig(), dial_common()).sampler_matches_learner()
    tr = GRPOTrainer(separate_sampler, GRPOConfig(),
                     dial_common(seed=3, lr=1e-3, group_size=8, tasks_per_iteration=4))
    assert not tr.sampler_matches_learner()
    if not recompute:
        monkeypatch.setattr(tr, "sampler_matches_learner", lambda: True)
    _, metrics = play_and_update(tr, iteration_tasks(dial.make_tasks("train"), 4, 3, 0), dial.DialEnv)
    assert metrics["samples"] > 0
    if recompute:
        assert abs(metrics["approx_kl"]) < 1e-7 and metrics["clip_frac"] == 0.0
    else:
        assert abs(metrics["approx_kl"]) > 1e-5


def test_the_anchor_pulls_an_update_toward_the_demonstrations(warm_preset, dial_common, tmp_path):
    """`grpo.anchor`: the same update on the same episodes from the same start, once with the SFT anchor at weight 1
    on oracle demonstrations, ends with those demonstrations more likely than the plain update does (and than the
    start); the update reports the anchor's NLL; a step's draw is a function of (seed, step); a weight without
    demonstrations is refused at start-up naming the field."""
    from dreamgym.commands.collect import collect
    from dreamgym.commands.train import TrainConfig
    from dreamgym.config import load_config
    from dreamgym.data import load_trajectories
    from dreamgym.llm.hf import HFBackend
    from dreamgym.trainers.anchor import AnchorConfig, anchor_rows, draw_rows

    model, tok = warm_preset  # the warm-started dial policy: it wins some episodes, so groups carry signal
    demos = tmp_path / "demos.jsonl"
    collect("dial", {"oracle": 1.0}, 12, demos, split="train", seed=0)
    common = dial_common(seed=3, lr=1e-3, group_size=8, tasks_per_iteration=4)
    plain = GRPOTrainer(HFBackend(copy.deepcopy(model), tok, batch_size=128), GRPOConfig(), common)
    anchored = GRPOTrainer(HFBackend(copy.deepcopy(model), tok, batch_size=128),
                           GRPOConfig(anchor=AnchorConfig(coef=1.0, data=str(demos), batch_size=8)), common)
    rows = anchor_rows(load_trajectories(demos), anchored.backend, common.agent)
    anchored.anchor_rows = rows

    def nll(tr):
        lps = tr.learner_logprobs([p for p, _ in rows], [c for _, c in rows])
        return -sum(sum(lp) for lp in lps) / sum(len(lp) for lp in lps)

    start = nll(plain)
    episodes, metrics = play_and_update(plain, iteration_tasks(dial.make_tasks("train"), 4, 3, 0), dial.DialEnv)
    assert metrics["samples"] > 0 and "anchor_nll" not in metrics
    anchored_metrics = anchored.update(episodes).metrics
    assert 0 < anchored_metrics["anchor_nll"] < 2 * start  # the drawn turns' NLL over the update's steps
    assert nll(anchored) < 0.9 * start and nll(anchored) < 0.95 * nll(plain)  # measured 0.076, 0.057, 0.046
    assert draw_rows(rows, 8, 3, 5) == draw_rows(rows, 8, 3, 5) != draw_rows(rows, 8, 3, 6)
    with pytest.raises(ConfigError, match="grpo.anchor.data"):
        load_config(TrainConfig, None, ["grpo.anchor.coef=0.1"])
