"""Shared fixtures of the trainer tests: the tiny preset (loaded once), fresh copies of it, dial helpers."""

import copy
import json
import time
from pathlib import Path

import pytest
import torch

from dreamgym.agent import AgentConfig
from dreamgym.paths import cache_dir
from dreamgym.rollout import RolloutConfig
from dreamgym.trainers.common import OptimConfig, TrainerConfig

# A short prompt keeps the tiny model's CPU cost down: history 0 is enough for the (Markov) dial, whose state
# already lists its buttons.
DIAL_AGENT = AgentConfig(history=0, show_admissible=False, system_prompt="You are an agent.")
DIAL_ROLLOUT = RolloutConfig(max_new_tokens=10, max_turns=12)


@pytest.fixture(scope="session")
def tiny_preset():
    from dreamgym.presets import load_preset

    torch.set_num_threads(1)
    return load_preset("tiny", device="cpu")


@pytest.fixture
def tiny_backend(tiny_preset):
    """A fresh HFBackend over a copy of the tiny model (trainers change the weights in place)."""
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    return HFBackend(copy.deepcopy(model), tok, batch_size=128)


@pytest.fixture
def dial_eval():
    """`dial_eval(backend, sample_seed)`: the sampled (temperature 1) policy on all 72 train tasks x 3 seeds —
    the distribution RL optimises — as an EvalResult."""
    from dreamgym.envs import dial
    from dreamgym.evaluate import EvalConfig, evaluate_policy

    def run(backend, sample_seed):
        cfg = EvalConfig(temperature=1.0, sample_seed=sample_seed, agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
        return evaluate_policy(backend, dial.DialEnv, dial.make_tasks("train"), [0, 1, 2], cfg)

    return run


@pytest.fixture
def learning_report():
    """Print a learning result (visible with -s) and append it to <cache>/test-reports/learning.jsonl."""

    def report(name, before, after, n_episodes, z, p, wall_s):
        row = {"name": name, "time": time.time(), "episodes_trained": n_episodes, "z": z, "p_one_sided": p,
               "wall_s": wall_s, "before": before.to_dict(), "after": after.to_dict()}
        print(f"\n[{name}] start {before.success_rate:.3f} [{before.ci_low:.3f}, {before.ci_high:.3f}] n={before.n} -> "
              f"end {after.success_rate:.3f} [{after.ci_low:.3f}, {after.ci_high:.3f}] n={after.n}; "
              f"{n_episodes} training episodes; z={z:.2f} p={p:.2g}; {wall_s:.0f}s")
        with open(cache_dir("test-reports") / "learning.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    return report


@pytest.fixture
def dial_common():
    """Build the shared trainer config used on the dial: `dial_common(seed=0, lr=1e-3, **fields)`."""

    def make(seed=0, lr=1e-3, **kw) -> TrainerConfig:
        return TrainerConfig(seed=seed, optim=OptimConfig(lr=lr, micro_batch_tokens=16384), agent=DIAL_AGENT,
                             rollout=DIAL_ROLLOUT, **kw)

    return make


# The start policy of the learning tests, "a brief SFT on expert then noisy demonstrations": (1) SFT of the tiny
# model on expert dial demonstrations until its sampled success on the 72 train tasks reaches `expert_until`
# (the tiny model learns the reply format within ~50 steps but the dial rule only in a sharp transition after a
# few hundred steps, so the stop is decided by measured success, not a fixed step count); (2) SFT on the
# family's noisy and random demonstrations, which teaches it their detours and premature submits, until its
# success falls to `soft_until`. The result knows the format and the rule but acts on it unreliably: partially
# competent. Built once per machine and cached (minutes of CPU); the learning tests then take about a minute.
WARM_RECIPE = {"version": 3, "batch": 32, "seed": 0, "expert_lr": 1e-3, "expert_until": 0.9, "expert_check": 20,
               "expert_min": 300, "expert_max": 900, "soft_lr": 3e-4, "soft_until": 0.4, "soft_check": 5,
               "soft_max": 60}


def _build_warm_state(model, tok):
    import random

    from dreamgym.collect import run_episode
    from dreamgym.envs import dial
    from dreamgym.evaluate import EvalConfig, evaluate_policy
    from dreamgym.llm.hf import HFBackend
    from dreamgym.trainers.sft import SFTConfig, SFTTrainer

    r = WARM_RECIPE
    be = HFBackend(copy.deepcopy(model), tok, batch_size=128)
    env, tasks = dial.make_env("train"), dial.make_tasks("train")

    def demos(policies):
        return [run_episode(env, dial.POLICIES[p](seed=i), seed=i, task=t, policy_name=p)
                for i, t in enumerate(tasks) for p in policies]

    def success(step):
        cfg = EvalConfig(temperature=1.0, sample_seed=step, agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
        return evaluate_policy(be, dial.DialEnv, tasks, [0], cfg).success_rate

    rng = random.Random(r["seed"])
    for policies, lr, stop, check, lo, hi in ((["expert"], r["expert_lr"], lambda x: x >= r["expert_until"],
                                               r["expert_check"], r["expert_min"], r["expert_max"]),
                                              (["noisy", "random"], r["soft_lr"], lambda x: x <= r["soft_until"],
                                               r["soft_check"], 0, r["soft_max"])):
        common = TrainerConfig(seed=r["seed"], optim=OptimConfig(lr=lr, micro_batch_tokens=16384), agent=DIAL_AGENT,
                               rollout=DIAL_ROLLOUT)
        sft = SFTTrainer(be, SFTConfig(batch_size=r["batch"], only_won=False), common)
        examples, _ = sft.examples(demos(policies))
        for step in range(1, hi + 1):
            sft.train_step(rng.sample(examples, r["batch"]))
            if step >= lo and step % check == 0 and stop(success(step)):
                break
    return {k: v.detach().clone() for k, v in be.model.state_dict().items()}


@pytest.fixture(scope="session")
def warm_state(tiny_preset):
    """State dict of the tiny model after the WARM_RECIPE SFT (cached under the DreamGym cache dir)."""
    import hashlib
    import os

    from dreamgym.presets import resolve

    spec = json.dumps({"recipe": WARM_RECIPE, "preset": Path(resolve("tiny")).name, "agent": repr(DIAL_AGENT),
                       "torch": torch.__version__}, sort_keys=True)
    path = cache_dir("test-fixtures") / f"dial-warm-{hashlib.sha256(spec.encode()).hexdigest()[:12]}.pt"
    if path.is_file():
        return torch.load(path)
    state = _build_warm_state(*tiny_preset)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return state


@pytest.fixture
def warm_backend(tiny_preset, warm_state):
    """A fresh HFBackend over the warm-started tiny model."""
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    m = copy.deepcopy(model)
    m.load_state_dict(warm_state)
    return HFBackend(m, tok, batch_size=128)


class SeparateSampler:
    """A policy backend that samples with its own bfloat16 copy of the policy while the trainer trains `model`: its
    log-probs are not the learner's numerics, as with a generation server or a learner under CUDA autocast."""

    def __init__(self, model, tokenizer):
        from dreamgym.llm.hf import HFBackend

        self.model, self.tokenizer = model, tokenizer
        self._sampler = HFBackend(copy.deepcopy(model).to(torch.bfloat16), tokenizer, batch_size=128)

    def prompt_ids(self, request):
        return self._sampler.prompt_ids(request)

    def generate_from_ids(self, prompts, params):
        return self._sampler.generate_from_ids(prompts, params)



@pytest.fixture
def separate_sampler(tiny_preset, warm_state):
    """A `SeparateSampler` over the warm-started tiny model."""
    model, tok = tiny_preset
    m = copy.deepcopy(model)
    m.load_state_dict(warm_state)
    return SeparateSampler(m, tok)
