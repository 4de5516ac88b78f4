"""Shared fixtures of the trainer tests: fresh copies of the tiny preset, dial evaluation and reports, the shared
trainer config. The tiny preset and the warm start are in tests/conftest.py (other test folders use them too)."""

import copy
import json
import time

import pytest
import torch

from model_fixtures import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.utils.paths import cache_dir
from dreamgym.trainers.common import OptimConfig, TrainerConfig

__all__ = ["DIAL_AGENT", "DIAL_ROLLOUT"]


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
    from dreamgym.rl.evaluate import EvalConfig, evaluate_policy

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
def separate_sampler(warm_preset):
    """A `SeparateSampler` over the warm-started tiny model."""
    model, tok = warm_preset
    return SeparateSampler(copy.deepcopy(model), tok)
