"""Shared fixtures of the trainer tests: the tiny preset (loaded once), fresh copies of it, dial helpers."""

import copy
import json
import time

import pytest
import torch

from dreamgym.paths import cache_dir

from dreamgym.agent import AgentConfig
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
    """`dial_eval(backend, sample_seed)`: the sampled (temperature 1) policy on all 72 train tasks x 2 seeds —
    the distribution RL optimises — as an EvalResult."""
    from dreamgym.envs import dial
    from dreamgym.evaluate import EvalConfig, evaluate_policy

    def run(backend, sample_seed):
        cfg = EvalConfig(temperature=1.0, sample_seed=sample_seed, agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
        return evaluate_policy(backend, dial.DialEnv, dial.make_tasks("train"), [0, 1], cfg)

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
