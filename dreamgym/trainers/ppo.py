"""PPO for multi-turn agents with a turn-level critic and GAE over the episode's turns.

Owns: `PPOConfig` and `PPOTrainer.train_iteration` — rollouts, V(s_k) for every turn's state from a value head
on the policy's last hidden state (critic="shared") or on a separate copy of the model (critic="separate"),
turn-level GAE(γ, λ) with the outcome reward at the last turn, advantage normalisation over the batch, and
several epochs of minibatches of the clipped policy loss + clipped value loss (+ optional entropy bonus and
KL penalty to the frozen initial policy).
Must not know: concrete environments, presets, where tasks come from.

The state of turn k is the prompt the policy read at that turn (task, last H turns, current state); V(s_k) is
read at its last token. Turn k's advantage is applied to every token the policy generated in that turn.
With critic="shared" the value loss also trains the policy's trunk (at the policy's learning rate); the head
and a separate critic use `value_lr`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from dreamgym import algos, distributed, fsdp
from dreamgym.config import ranged
from dreamgym.env import TextEnv
from dreamgym.metrics import MetricsLogger
from dreamgym.budget import RealStepBudget
from dreamgym.rollout import Episode, rollout_metrics
from dreamgym.trainers.common import (
    BaseTrainer,
    TrainerConfig,
    ValueHead,
    clip_and_step,
    micro_batches,
    mix_seed,
    pack,
    per_token,
    policy_forward,
    set_lr,
    state_hidden_only,
)
from dreamgym.trainers.grpo import _split
from dreamgym.types import Task


@dataclass
class PPOConfig:
    tasks_per_iteration: int = ranged(16, ge=1)
    """Tasks per rollout batch (the caller passes them to `train_iteration`)."""
    episodes_per_task: int = ranged(4, ge=1)
    """Rollouts per task in each batch."""
    gamma: float = ranged(1.0, ge=0, le=1)
    """Discount over turns."""
    lam: float = ranged(0.95, ge=0, le=1)
    """GAE λ."""
    clip_eps: float = ranged(0.2, gt=0)
    """Clip range of the policy ratio."""
    value_clip_eps: float | None = ranged(0.2, gt=0)
    """Clip range of the value update around the rollout-time value (None = unclipped)."""
    vf_coef: float = ranged(0.5, ge=0)
    """Weight of the value loss."""
    ent_coef: float = ranged(0.0, ge=0)
    """Weight of the entropy bonus."""
    kl_coef: float = ranged(0.0, ge=0)
    """Weight of the k3 KL penalty to the frozen initial policy."""
    epochs: int = ranged(4, ge=1)
    """Passes over each rollout batch."""
    minibatches: int = ranged(4, ge=1)
    """Optimiser steps per pass."""
    normalize_advantages: bool = True
    """Normalise turn advantages to zero mean, unit std over the batch."""
    critic: Literal["shared", "separate"] = "shared"
    """Value head on the policy's trunk, or on a separate copy of the initial model."""
    value_lr: float = ranged(1e-3, gt=0)
    """Learning rate of the value head (and of the separate critic)."""


@dataclass
class PPOSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    ret: float
    old_value: float


class PPOTrainer(BaseTrainer):
    algo = "ppo"

    def __init__(self, backend: Any, config: PPOConfig, common: TrainerConfig, *,
                 logger: MetricsLogger | None = None, budget: RealStepBudget | None = None):
        super().__init__(backend, common, logger=logger, budget=budget)
        self.config: PPOConfig = config
        model_config: Any = self.model.config  # a transformers config (nn.Module types attributes as Tensor | Module)
        hidden = model_config.hidden_size
        self.critic: nn.Module | None = None
        if config.critic == "separate":
            # get_base_model is a PEFT method: nn.Module.__getattr__ types it as Tensor | Module.
            base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model  # type: ignore[operator]
            self.critic = copy.deepcopy(base)
            for p in self.critic.parameters():
                p.requires_grad_(True)
        self.value_head = ValueHead(hidden).to(self.device)
        self.reference = self._frozen_copy() if config.kl_coef > 0 else None
        self._build_optimizer([self.value_head, self.critic], extra_lr=config.value_lr)

    def _extra_modules(self) -> dict[str, nn.Module]:
        mods: dict[str, nn.Module] = {"value_head": self.value_head}
        if self.critic is not None:
            mods["critic"] = self.critic
        if self.reference is not None:
            mods["reference"] = self.reference
        return mods

    # ------------------------------------------------------------------------------------------ values
    def values(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """[N] V(s) of each prompt (no gradient), in micro-batches."""
        out = torch.zeros(len(prompts))
        with torch.no_grad():
            for chunk in micro_batches([len(p) for p in prompts], self.common.optim.micro_batch_tokens):
                h = state_hidden_only(self.critic or self.model, [prompts[i] for i in chunk], self.pad_id, self.device)
                out[chunk] = self.value_head(h).cpu()
        return out

    # ------------------------------------------------------------------------------------------ one iteration
    def train_iteration(self, tasks: Sequence[Task],
                        env_factory: Callable[[], TextEnv]) -> tuple[list[Episode], dict[str, Any]]:
        """Roll out `episodes_per_task` episodes per task, compute turn-level GAE, run the PPO epochs."""
        cfg = self.config
        t0 = time.perf_counter()
        stats: dict[str, float] = {}
        episodes = self.play(tasks, env_factory, cfg.episodes_per_task, stats)
        t_roll = time.perf_counter() - t0
        metrics: dict[str, Any] = rollout_metrics(episodes)
        samples, adv_stats = self.build_samples([e for e in episodes if e.trainable])
        metrics.update(adv_stats)
        t1 = time.perf_counter()
        metrics.update(self.update(samples))
        t_upd = time.perf_counter() - t1
        self.iteration += 1
        metrics.update(
            iteration=float(self.iteration), samples=float(len(samples)), real_steps_used=float(self.budget.used),
            synthetic_steps=float(stats["synthetic_steps"]), rollout_time_s=t_roll, update_time_s=t_upd,
            rollout_tokens_per_s=stats["gen_tokens"] / stats["gen_time_s"] if stats["gen_time_s"] > 0 else 0.0,
            gen_tokens=stats["gen_tokens"])
        if metrics.get("update_tokens", 0) and t_upd > 0:
            metrics["update_tokens_per_s"] = metrics["update_tokens"] / t_upd
        self.log(metrics)
        return episodes, metrics

    def build_samples(self, episodes: Sequence[Episode]) -> tuple[list[PPOSample], dict[str, float]]:
        """Turn samples with GAE advantages and value targets (turns without generated tokens are dropped)."""
        cfg = self.config
        eps = [e for e in episodes if any(t.completion_ids for t in e.turns)]
        if not eps:
            return [], {}
        turns = [[t for t in e.turns if t.completion_ids] for e in eps]
        K = max(len(ts) for ts in turns)
        flat = [t for ts in turns for t in ts]
        v_flat = self.values([t.prompt_ids for t in flat])
        rewards = torch.zeros(len(eps), K)
        values = torch.zeros(len(eps), K)
        mask = torch.zeros(len(eps), K, dtype=torch.bool)
        i = 0
        for e, ts in enumerate(turns):
            for k, t in enumerate(ts):
                rewards[e, k], values[e, k], mask[e, k] = t.reward, v_flat[i], True
                i += 1
        adv, ret = algos.gae(rewards, values, mask, gamma=cfg.gamma, lam=cfg.lam)
        raw_adv = adv
        if cfg.normalize_advantages:
            adv = algos.normalize(adv, mask)
        samples = []
        for e, ts in enumerate(turns):
            for k, t in enumerate(ts):
                samples.append(PPOSample(t.prompt_ids, t.completion_ids, t.logprobs, float(adv[e, k]),
                                         float(ret[e, k]), float(values[e, k])))
        raw_var = algos.masked_mean((raw_adv - algos.masked_mean(raw_adv, mask)) ** 2, mask)
        return samples, {"value_mean": float(algos.masked_mean(values, mask)),
                         "return_mean": float(algos.masked_mean(ret, mask)), "advantage_raw_std": float(raw_var.sqrt())}

    # ------------------------------------------------------------------------------------------ the update
    def update(self, samples: Sequence[PPOSample]) -> dict[str, float]:
        cfg, opt_cfg = self.config, self.common.optim
        if not samples:
            return dict.fromkeys(("loss", "policy_loss", "value_loss", "value_clip_frac", "entropy", "kl", "clip_frac",
                                  "approx_kl", "grad_norm", "optimizer_steps", "update_tokens",
                                  "explained_variance"), 0.0)
        samples = self.with_learner_old_logprobs(samples)
        self.model.train()
        gen = torch.Generator().manual_seed(mix_seed(self.common.seed, self.iteration, 2))
        sums: dict[str, float] = {}
        weight, tokens, n_steps, norm_sum = 0.0, 0, 0, 0.0
        for _ in range(cfg.epochs):
            order = torch.randperm(len(samples), generator=gen).tolist()
            for mb in _split(order, cfg.minibatches):
                part_all = sorted((samples[i] for i in mb), key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
                set_lr(self._opt, opt_cfg, self.global_step)
                n_tok_step = sum(len(s.completion_ids) for s in part_all)
                # Several processes: each back-propagates the micro-batches at its positions (same samples everywhere).
                # A sharded policy pads the share with zero-weighted repeats (same collectives on every rank).
                for chunk, real in distributed.share(micro_batches([len(s.prompt_ids) + len(s.completion_ids)
                                                                    for s in part_all], opt_cfg.micro_batch_tokens),
                                                     lockstep=fsdp.is_sharded(self.model)):
                    part = [part_all[i] for i in chunk]
                    st, n = self._micro_step(part, n_tok_step, len(part_all), scale=1.0 if real else 0.0)
                    if not real:
                        continue
                    tokens += n
                    w = len(part) / len(part_all)
                    for k, v in st.items():
                        sums[k] = sums.get(k, 0.0) + v * w
                    weight += w
                norm_sum += clip_and_step(self._opt, self.params, opt_cfg)
                self.global_step += 1
                n_steps += 1
        self.model.eval()
        # Every rank sums the same keys (one that back-propagated nothing holds zeros) in the same order.
        keys = ("loss", "policy_loss", "value_loss", "value_clip_frac", "entropy", "kl", "clip_frac", "approx_kl")
        *totals, weight, n_tokens = distributed.sum_floats([sums.get(k, 0.0) for k in keys] + [weight, tokens])
        out = {k: t / weight for k, t in zip(keys, totals)}
        rets = torch.tensor([s.ret for s in samples])
        vals = torch.tensor([s.old_value for s in samples])
        var = rets.var(unbiased=False)
        out.update(grad_norm=norm_sum / n_steps, optimizer_steps=float(n_steps), update_tokens=n_tokens,
                   explained_variance=float(1 - (rets - vals).var(unbiased=False) / var) if var > 0 else 0.0)
        return out

    def _micro_step(self, part: list[PPOSample], n_tok_step: int, n_turns_step: int,
                    scale: float = 1.0) -> tuple[dict[str, float], int]:
        """Forward + backward of one micro-batch. Policy terms are token-level means (weighted by the
        micro-batch's share of the step's tokens), the value loss a turn-level mean (weighted by turns); the whole
        loss times `scale` (0: a lockstep repeat that adds nothing)."""
        cfg = self.config
        packed = pack([s.prompt_ids for s in part], [s.completion_ids for s in part], self.pad_id, self.device)
        old = per_token(packed, [s.old_logprobs for s in part])
        adv = torch.tensor([s.advantage for s in part], dtype=torch.float32, device=self.device)
        ret = torch.tensor([s.ret for s in part], dtype=torch.float32, device=self.device)
        old_v = torch.tensor([s.old_value for s in part], dtype=torch.float32, device=self.device)
        mask = packed.loss_mask
        out = policy_forward(self.model, packed, entropy=True, entropy_grad=cfg.ent_coef > 0,
                             state_hidden=self.critic is None)
        assert out.entropy is not None  # asked for above
        if self.critic is None:
            v = self.value_head(out.state_hidden)
        else:
            v = self.value_head(state_hidden_only(self.critic, [s.prompt_ids for s in part], self.pad_id, self.device))
        pg_loss, st = algos.clipped_policy_loss(out.logp, old, adv, mask, clip_eps=cfg.clip_eps)
        v_loss, v_clip = algos.clipped_value_loss(v, old_v, ret, torch.ones_like(ret, dtype=torch.bool),
                                                  clip_eps=cfg.value_clip_eps)
        ent = algos.masked_mean(out.entropy, mask)
        kl = torch.zeros((), device=self.device)
        if cfg.kl_coef > 0:
            kl = algos.masked_mean(algos.kl_k3(out.logp, self._reference_forward(self.reference, packed)), mask)
        tok_share = packed.n_trained / max(1, n_tok_step)
        turn_share = len(part) / n_turns_step
        total = (pg_loss - cfg.ent_coef * ent + cfg.kl_coef * kl) * tok_share + cfg.vf_coef * v_loss * turn_share
        (total * scale).backward()
        return {"loss": float(pg_loss.detach() + cfg.vf_coef * v_loss.detach()), "policy_loss": float(pg_loss.detach()),
                "value_loss": float(v_loss.detach()), "value_clip_frac": float(v_clip), "entropy": float(ent.detach()),
                "kl": float(kl.detach()), "clip_frac": float(st["clip_frac"]),
                "approx_kl": float(st["approx_kl"])}, packed.n_tokens
