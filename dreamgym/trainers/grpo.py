"""GRPO for multi-turn agents: group-relative episode advantages on every policy token of every turn.

Owns: `GRPOConfig` and `GRPOTrainer.update` — the episode return normalised within its group (the G episodes the
run loop played of one task from one seed), that advantage applied to every generated token of every turn of the
episode, the clipped importance ratio against the sampling log-probs, an optional KL penalty (k3) to a frozen
reference, and a token-level mean loss over the whole batch (or, with `loss_agg="episode"`, a mean in which every
episode weighs the same).
Must not know: rollouts, environments, the real-step budget, presets, where tasks come from.

One update, step by step (the iteration around it, tasks and rollouts included, is `dreamgym.rl.loop`'s loop):
  1. advantages: `algos.grpo_advantages` over the trainable episodes; groups whose rewards are all equal carry
     no signal, are counted (`zero_variance_groups`) and left out of the update (with `min_groups`, the update
     waits until enough informative groups were collected);
  2. every turn of every remaining episode becomes one (prompt ids, generated ids, sampling log-probs,
     advantage) sample — the exact tokens that were sampled, the loss mask covering only generated tokens;
  3. `optimize` (`dreamgym.trainers.online`, shared with PPO): `epochs` passes over the samples in `minibatches`
     optimiser steps each; every micro-batch's loss weighted by its share of the step's token weight, so the step's
     loss is exactly the (weighted) token mean.

State: the weights, the optimiser, the update count (`dreamgym.trainers.online`) and, with `kl_coef` > 0, the
frozen reference; with `min_groups`, the samples kept until enough groups carried signal are not checkpointed (a
resumed run collects them again).

Choices the paper leaves open: the loss is a token mean over the batch (DAPO's), so an episode weighs by its
length; `loss_agg="episode"` gives each token the weight 1 / (its episode's generated tokens in the batch), so each
episode's tokens sum to one unit (DeepSeekMath's per-sequence mean) and within a group the advantages sum to zero
over the steps the episodes share as well (docs/decisions.md, GRPO loss aggregation). `reward="success"` trains on
the outcome reward of the paper where an environment pays partial credit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from dreamgym.trainers import algos
from dreamgym.trainers.anchor import AnchorConfig
from dreamgym.config import ranged
from dreamgym.episode import Episode
from dreamgym.trainers.common import TrainerConfig, pack, per_token, policy_forward
from dreamgym.trainers.online import UpdateResult, ClippedRatioTrainer


@dataclass
class GRPOConfig:
    scale_rewards: bool = True
    """Divide by the group's reward std (False: advantage = r - mean, as in Dr. GRPO)."""
    adv_eps: float = ranged(1e-6, gt=0)
    """Added to the group std."""
    clip_eps: float = ranged(0.2, gt=0)
    """PPO clip range of the importance ratio (lower side)."""
    clip_eps_high: float | None = ranged(None, gt=0)
    """Upper clip range (None = clip_eps; DAPO uses 0.28)."""
    kl_coef: float = ranged(0.0, ge=0)
    """Weight of the k3 KL penalty to the frozen initial policy (0 disables it and skips the reference pass)."""
    epochs: int = ranged(1, ge=1)
    """Passes over each rollout batch."""
    minibatches: int = ranged(1, ge=1)
    """Optimiser steps per pass (turn samples are shuffled and split evenly)."""
    loss_agg: Literal["token", "episode"] = "token"
    """How per-token losses are averaged: "token" (every trained token weighs the same, as in DAPO) or "episode"
    (every episode weighs the same, whatever its length)."""
    reward: Literal["env", "success"] = "env"
    """What an episode earned, for the group advantages: "env" (its total reward) or "success" (1.0 if won, else
    0.0: the paper's outcome reward). Logged rewards stay the environment's."""
    min_groups: int = ranged(0, ge=0)
    """Update only once this many groups with unequal rewards were collected, keeping the samples until then
    (DAPO's dynamic sampling over iterations; kept samples are not checkpointed). 0: update every iteration."""
    anchor: AnchorConfig = field(default_factory=AnchorConfig)
    """An SFT term on demonstrations in every optimiser step (`dreamgym.trainers.anchor`; off by default)."""


@dataclass
class TurnSample:
    """One turn, ready for the loss: exactly the sampled tokens and what they earned."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    episode: int
    weight: float = 1.0
    """Loss weight of each of this turn's tokens (1 under the token mean; 1 / episode tokens under "episode")."""


def episode_samples(episodes: Sequence[Episode], advantages: Sequence[float],
                    loss_agg: str = "token") -> list[TurnSample]:
    """Every turn of every episode with that episode's advantage (turns without generated tokens are skipped).

    With `loss_agg="episode"` each token is weighted 1 / (generated tokens of its whole episode), so the weights
    of one episode's tokens sum to 1 and the weighted token mean is the mean over episodes of each episode's
    token mean."""
    out = []
    for i, (ep, a) in enumerate(zip(episodes, advantages)):
        n_tok = sum(len(t.completion_ids) for t in ep.turns)
        w = 1.0 / n_tok if loss_agg == "episode" and n_tok else 1.0
        for t in ep.turns:
            if t.completion_ids:
                out.append(TurnSample(t.prompt_ids, t.completion_ids, t.logprobs, float(a), i, w))
    return out


class GRPOTrainer(ClippedRatioTrainer[TurnSample]):
    algo = "grpo"
    STATS = ("loss", "policy_loss", "kl", "entropy", "clip_frac", "approx_kl")
    EXTRA_STATS = ("trained_tokens",)
    ORDER_SALT = 1

    def __init__(self, backend: Any, config: GRPOConfig, common: TrainerConfig):
        super().__init__(backend, common)
        self.config: GRPOConfig = config
        self.reference = self._frozen_copy() if config.kl_coef > 0 else None
        self._build_optimizer()
        self._kept: list[TurnSample] = []  # samples of deferred updates (`min_groups`)
        self._kept_groups = 0

    def _extra_modules(self) -> dict[str, torch.nn.Module]:
        return {"reference": self.reference} if self.reference is not None else {}

    def update(self, episodes: Sequence[Episode]) -> UpdateResult:
        """Group advantages of the trainable `episodes`, then one `optimize` on their turns (or, with `min_groups`,
        on the samples kept until enough groups carried signal). Returns the group counts and the update's
        statistics."""
        cfg = self.config
        ok = [e for e in episodes if e.trainable]
        metrics: dict[str, float] = {}
        n_groups = len({e.group for e in ok})
        if ok:
            earned = [float(e.won) if cfg.reward == "success" else e.reward for e in ok]
            adv, zero = algos.grpo_advantages(torch.tensor(earned), torch.tensor([e.group for e in ok]),
                                              scale_by_std=cfg.scale_rewards, eps=cfg.adv_eps)
            keep = [i for i in range(len(ok)) if not bool(zero[i])]
            zero_groups = len({ok[i].group for i in range(len(ok)) if bool(zero[i])})
            samples = episode_samples([ok[i] for i in keep], [float(adv[i]) for i in keep], cfg.loss_agg)
        else:
            samples, zero_groups = [], 0
        if cfg.min_groups:
            self._kept += samples
            self._kept_groups += n_groups - zero_groups
            deferred = self._kept_groups < cfg.min_groups
            samples = [] if deferred else self._kept
            metrics.update(update_deferred=float(deferred), kept_groups=float(self._kept_groups))
            if not deferred:
                self._kept, self._kept_groups = [], 0
        metrics.update(groups=float(n_groups), zero_variance_groups=float(zero_groups), samples=float(len(samples)))
        metrics.update(self.optimize(samples))
        self.updates += 1
        return UpdateResult.of(metrics)

    def _extra_stats(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        return {"trained_tokens": float(sum(len(s.completion_ids) for s in samples) * self.config.epochs)}

    def _micro_step(self, part: list[TurnSample], step: list[TurnSample],
                    scale: float) -> tuple[dict[str, float], int, float]:
        """The clipped policy loss (+ KL) of `part`, a token mean weighted by each token's weight, scaled by its share
        of the step's token weight (the step's loss is the weighted token mean); its statistics weigh by that share."""
        cfg = self.config
        # The step's loss is the weighted token mean; its total weight is the token count under "token".
        share = sum(len(s.completion_ids) * s.weight for s in part) / sum(len(s.completion_ids) * s.weight
                                                                            for s in step)
        packed = pack([s.prompt_ids for s in part], [s.completion_ids for s in part], self.pad_id, self.device)
        old = per_token(packed, [s.old_logprobs for s in part])
        adv = torch.tensor([s.advantage for s in part], dtype=torch.float32, device=self.device)
        out = policy_forward(self.model, packed, entropy=True)
        assert out.entropy is not None  # asked for above
        # A float mask makes every masked mean below a weighted mean: [B, L] = loss mask x per-row token weight.
        row_w = torch.tensor([s.weight for s in part], dtype=torch.float32, device=self.device)
        mask = packed.loss_mask.float() * row_w[:, None]
        pg_loss, st = algos.clipped_policy_loss(out.logp, old, adv, mask, clip_eps=cfg.clip_eps,
                                                clip_eps_high=cfg.clip_eps_high)
        loss = pg_loss
        kl = torch.zeros(())
        if cfg.kl_coef > 0:
            ref = self._reference_forward(self.reference, packed)
            kl = algos.masked_mean(algos.kl_k3(out.logp, ref), mask)
            loss = loss + cfg.kl_coef * kl
        (loss * (share * scale)).backward()
        return {"loss": float(loss.detach()), "policy_loss": float(pg_loss.detach()), "kl": float(kl.detach()),
                "entropy": float(algos.masked_mean(out.entropy.detach(), mask)),
                "clip_frac": float(st["clip_frac"]), "approx_kl": float(st["approx_kl"])}, packed.n_tokens, share
