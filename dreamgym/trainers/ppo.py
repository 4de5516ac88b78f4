"""PPO for multi-turn agents with a turn-level critic and GAE over the episode's turns.

Owns: `PPOConfig` and `PPOTrainer.update` — V(s_k) for every turn's state from a value head on the policy's last
hidden state (critic="shared") or on a separate copy of the model (critic="separate"), turn-level GAE(γ, λ) with
the outcome reward at the last turn, advantage normalisation over the batch, and `optimize` (shared with GRPO:
`dreamgym.trainers.online`) over the clipped policy loss + clipped value loss (+ optional entropy bonus and KL
penalty to the frozen initial policy).
Must not know: rollouts, environments, the real-step budget, presets, where tasks come from.

The state of turn k is the prompt the policy read at that turn (task, last H turns, current state); V(s_k) is
read at its last token. Turn k's advantage is applied to every token the policy generated in that turn.
With critic="shared" the value loss also trains the policy's trunk (at the policy's learning rate); the head
and a separate critic use `value_lr`. A micro-batch's policy terms are token means weighted by its share of the
step's tokens, its value loss a turn mean weighted by its share of the step's turns; its logged statistics weigh
by the turn share.

State: the weights, the optimiser, the update count (`dreamgym.trainers.online`), the value head, the separate
critic (critic="separate") and, with `kl_coef` > 0, the frozen reference; all in every checkpoint.

The paper trains PPO with a learned value and GAE; the critic's granularity (one value per turn) and where it sits
(a head on the policy's own trunk by default) are our choices.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from dreamgym.trainers import algos
from dreamgym.trainers.anchor import AnchorConfig
from dreamgym.config import ranged
from dreamgym.episode import Episode
from dreamgym.trainers.common import (
    TrainerConfig,
    ValueHead,
    micro_batches,
    pack,
    per_token,
    policy_forward,
    state_hidden_only,
)
from dreamgym.trainers.online import UpdateResult, ClippedRatioTrainer


@dataclass
class PPOConfig:
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
    anchor: AnchorConfig = field(default_factory=AnchorConfig)
    """An SFT term on demonstrations in every optimiser step (`dreamgym.trainers.anchor`; off by default)."""


@dataclass
class PPOSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    ret: float
    old_value: float


class PPOTrainer(ClippedRatioTrainer[PPOSample]):
    algo = "ppo"
    STATS = ("loss", "policy_loss", "value_loss", "value_clip_frac", "entropy", "kl", "clip_frac", "approx_kl")
    EXTRA_STATS = ("explained_variance",)
    ORDER_SALT = 2

    def __init__(self, backend: Any, config: PPOConfig, common: TrainerConfig):
        super().__init__(backend, common)
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

    def update(self, episodes: Sequence[Episode]) -> UpdateResult:
        """Turn-level GAE over the trainable `episodes`, then one `optimize` on their turns. Returns the value and
        advantage statistics, the sample count and the update's statistics."""
        samples, metrics = self.build_samples([e for e in episodes if e.trainable])
        metrics = {**metrics, "samples": float(len(samples)), **self.optimize(samples)}
        self.updates += 1
        return UpdateResult.of(metrics)

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

    def _extra_stats(self, samples: Sequence[PPOSample]) -> dict[str, float]:
        rets = torch.tensor([s.ret for s in samples])
        vals = torch.tensor([s.old_value for s in samples])
        var = rets.var(unbiased=False)
        return {"explained_variance": float(1 - (rets - vals).var(unbiased=False) / var) if var > 0 else 0.0}

    def _micro_step(self, part: list[PPOSample], step: list[PPOSample],
                    scale: float) -> tuple[dict[str, float], int, float]:
        """Policy terms as token-level means (weighted by `part`'s share of the step's tokens), the value loss a
        turn-level mean (weighted by its share of the step's turns); its statistics weigh by the turn share."""
        cfg = self.config
        n_tok_step, n_turns_step = sum(len(s.completion_ids) for s in step), len(step)
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
                "approx_kl": float(st["approx_kl"])}, packed.n_tokens, turn_share
