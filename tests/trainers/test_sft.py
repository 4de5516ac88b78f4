"""SFT: demonstrations become exactly the rollout prompts, the loss falls, and resume mid-epoch is exact."""

import copy
import dataclasses

import torch

from dreamgym.agent import AgentConfig, build_messages
from dreamgym.commands.collect import run_episode
from dreamgym.envs import dial
from dreamgym.trainers.sft import SFTConfig, SFTTrainer, turn_examples


def demos(policy="expert", n=12, seed=0):
    env = dial.make_env("train")
    tasks = dial.make_tasks("train")
    return [run_episode(env, dial.POLICIES[policy](seed=seed + i), seed=seed + i, task=tasks[(7 * i) % len(tasks)],
                        policy_name=policy) for i in range(n)]


def test_examples_are_the_rollout_prompts_and_reply_format(tiny_backend):
    be = tiny_backend
    agent = AgentConfig(history=2, show_admissible=True)
    traj = next(t for t in demos(n=4) if len(t.steps) >= 3)
    exs = turn_examples(traj, be, agent, dial.admissible_from_state)
    assert len(exs) == len(traj.steps) >= 3
    # replay the episode as the rollout engine sees it: abstract state + the env's admissible actions
    env = dial.make_env("train")
    _, info = env.reset(seed=traj.seed, options={"task": traj.task})
    history = []
    for ex, step in zip(exs, traj.steps):
        msgs = build_messages(traj.task, history, info["abstract_state"], info["admissible_actions"], agent)
        expect = be.prompt_ids(msgs)
        assert ex.prompt_ids == expect
        assert be.tokenizer.decode(ex.target_ids) == f"<think></think><action>{step.action}</action><|im_end|>"
        history.append((info["abstract_state"], step.action))
        _, _, _, _, info = env.step(step.action)


def test_sft_loss_falls_on_expert_demos(tiny_backend, dial_common):
    data = demos(n=6)
    tr = SFTTrainer(tiny_backend, SFTConfig(epochs=1, batch_size=64), dial_common(lr=3e-3))
    exs, counts = tr.examples(data)
    first = tr.train_step(exs)["loss"]
    for _ in range(9):
        last = tr.train_step(exs)["loss"]
    assert counts["trajectories_used"] == 6 and first > 3.0 and last < 0.35 * first


def test_sft_resume_mid_epoch_is_exact(tiny_preset, dial_common, tmp_path):
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    data = demos(n=6)
    cfg = SFTConfig(epochs=2, batch_size=8)

    def fresh():
        return SFTTrainer(HFBackend(copy.deepcopy(model), tok), cfg, dial_common(lr=1e-3))

    full = fresh()
    full.fit(data)
    a = fresh()
    a.fit(data, on_step=lambda step: step == 3)  # stop inside the first or second epoch
    a.save(tmp_path / "ck")
    assert a.global_step == 3
    b = fresh()
    b.load(tmp_path / "ck")
    assert (b.iteration, b.batch_pos, b.global_step) == (a.iteration, a.batch_pos, 3)
    b.fit(data)
    assert b.global_step == full.global_step > 3
    ref = full.model.state_dict()
    assert all(torch.equal(ref[k], v) for k, v in b.model.state_dict().items())
    # sft.max_steps stops the same way: the capped run is the first 3 steps of the full one, bit for bit.
    capped = SFTTrainer(HFBackend(copy.deepcopy(model), tok), dataclasses.replace(cfg, max_steps=3),
                        dial_common(lr=1e-3))
    capped.fit(data)
    assert capped.global_step == 3
    assert all(torch.equal(a.model.state_dict()[k], v) for k, v in capped.model.state_dict().items())



def test_sft_stops_at_the_first_check_where_it_replays_its_demonstrations(tiny_preset, dial_common):
    """`stop_at` ends SFT at a measured criterion, not a step count: the first multiple of `check_every` at which the
    policy writes its demonstrations' replies with that mean probability, the product of each turn's reply
    probability averaged over the trajectories."""
    import math

    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    data = demos(n=6)
    # 0.005: reached at step 21 (0.0096; 0.0014 at step 18), so the run and the capped one below take 21 + 18 steps
    # (at 0.05 they took 30 + 27, the same behaviour at a later check).
    cfg = SFTConfig(epochs=80, batch_size=64, stop_at=0.005, check_every=3)

    def fresh(c=cfg):
        return SFTTrainer(HFBackend(copy.deepcopy(model), tok), c, dial_common(lr=3e-3))

    tr = fresh()
    before = tr.replay_success(data)
    tr.fit(data)
    step = tr.global_step
    assert tr.stopped_at == {"step": float(step), "replay_success": tr.replay_success(data)}
    assert step % 3 == 0 and 3 <= step < 80 and tr.replay_success(data) >= 0.005 > before
    # The value, recomputed turn by turn (the eos after each reply left out).
    probs = []
    for t in data:
        exs = turn_examples(t, tr.backend, dial_common().agent)
        assert all(e.target_ids[-1] == tok.eos_token_id for e in exs)
        lps = tr.learner_logprobs([e.prompt_ids for e in exs], [e.target_ids[:-1] for e in exs])
        probs.append(math.exp(sum(sum(lp) for lp in lps)))
    assert abs(sum(probs) / len(probs) - tr.replay_success(data)) < 1e-5
    # One check earlier the criterion was not met: the same run capped there is below it and did not stop itself.
    capped = fresh(dataclasses.replace(cfg, max_steps=step - 3))
    capped.fit(data)
    assert capped.global_step == step - 3 and not capped.stopped_at and capped.replay_success(data) < 0.005


def test_sft_that_never_reaches_stop_at_ends_on_its_best_check_even_across_a_resume(tiny_preset, dial_common,
                                                                                     tmp_path):
    """`keep_best`: a fit that ends without reaching `stop_at` returns the weights of its best check when its last
    weights replay the demonstrations less often (here they are scrambled after the last step, as a fit moving past
    its best would leave them); the best check's weights survive a pause, save and resume in between."""
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    data = demos(n=6)
    cfg = SFTConfig(epochs=80, batch_size=64, stop_at=0.99, check_every=3, max_steps=12)

    def fresh(c=cfg):
        return SFTTrainer(HFBackend(copy.deepcopy(model), tok), c, dial_common(lr=3e-3))

    def scramble(tr):
        def on_step(step):
            if step == 12:
                with torch.no_grad():
                    for p in tr.params:
                        p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
            return False
        return on_step

    first = fresh()
    first.fit(data, on_step=lambda step: step == 7)  # paused after step 7: checks 3 and 6 were made
    first.save(tmp_path / "ckpt")
    tr = fresh()
    tr.load(tmp_path / "ckpt")
    tr.fit(data, on_step=scramble(tr))
    assert tr.global_step == 12 and not tr.stopped_at
    best = tr.kept_best
    assert best["step"] in (3.0, 6.0, 9.0) and best["last_replay_success"] < best["replay_success"]
    assert tr.replay_success(data) == best["replay_success"]
    # The kept weights are the ones an unscrambled fit capped at that step ends with.
    capped = fresh(dataclasses.replace(cfg, max_steps=int(best["step"])))
    capped.fit(data)
    for a, b in zip(tr.params, capped.params):
        torch.testing.assert_close(a, b)
    # Without it the fit ends on its last weights.
    off = fresh(dataclasses.replace(cfg, keep_best=False))
    off.fit(data, on_step=scramble(off))
    assert not off.kept_best and off.replay_success(data) == best["last_replay_success"]
