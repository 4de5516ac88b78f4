"""The update GRPO and PPO share: clipped-ratio steps over turn samples, epochs x minibatches x ranks.

Owns: `UpdateResult`, what an online update tells the loop and the dream world, typed; `ClippedRatioTrainer`, the
base of the online trainers: `update(episodes) -> UpdateResult` is the whole of what the run loop
(`dreamgym.rl.loop`) asks of them, `optimize(samples)` the skeleton every such update runs
(recompute the "old" log-probs when the sampler's are not the learner's; `epochs` passes over the samples in a
seeded order, each cut into `minibatches` optimiser steps; each step's samples sorted by length and cut into
micro-batches of at most `optim.micro_batch_tokens` padded tokens, shared between the processes of a
distributed run; one clipped, summed-over-ranks optimiser step per minibatch), and the count of updates made,
which seeds each update's sample order.
Must not know: rollouts, environments, the real-step budget, iterations: the loop plays and counts; this only
learns from the episodes it is given.

State: besides the weights and the optimiser (`BaseTrainer`), the count of updates made (`updates`): a checkpoint
keeps it, so a resumed trainer draws the same sample orders as an uninterrupted one. The figures of an update
(`UpdateResult.metrics`) are logged by the run loop under `losses/` (`dreamgym.utils.metric_names`); what the loop
and the dream world act on are its typed fields, so nobody outside a trainer reads its figures by name.

What differs between the algorithms is the loss of one micro-batch (`_micro_step`): how much of the step's loss
it carries, and how much its statistics weigh in the logged means (GRPO: its share of the step's token weight;
PPO: its share of the step's turns). The logged means follow each algorithm's loss, as before the two shared
this skeleton.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import torch

from dreamgym.utils import distributed, fsdp
from dreamgym.episode import Episode
from dreamgym.trainers.anchor import Row, draw_rows
from dreamgym.trainers.common import BaseTrainer, clip_and_step, micro_batches, mix_seed, set_lr, supervised_backward


@dataclasses.dataclass(frozen=True)
class UpdateResult:
    """What one online update did. The typed fields are what the run loop and the dream world act on; `metrics` is
    every figure the algorithm reports (those fields included, as floats), logged as is under `losses/`."""

    optimizer_steps: int
    """Optimiser steps taken (0: nothing was learnt, e.g. every group's rewards were equal)."""
    loss: float
    """The update's mean loss (0.0 when it took no step)."""
    tokens: int
    """Tokens the update back-propagated (for its throughput)."""
    groups: int | None = None
    """Groups of episodes of one task the update saw (None: the algorithm does not group, PPO)."""
    zero_variance_groups: int | None = None
    """Of `groups`, those whose rewards were all equal: zero advantage, left out (None: no groups)."""
    deferred: bool = False
    """The update kept its samples for a later one (GRPO's `min_groups`) instead of stepping."""
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """Every figure of the update, by its name under `losses/`."""

    @classmethod
    def of(cls, metrics: dict[str, float]) -> UpdateResult:
        """The result of an update that reported `metrics` (its trainer's own names, read here and nowhere else)."""
        groups = metrics.get("groups")
        zero = metrics.get("zero_variance_groups")
        return cls(optimizer_steps=int(metrics.get("optimizer_steps", 0)), loss=float(metrics.get("loss", 0.0)),
                   tokens=int(metrics.get("update_tokens", 0)), groups=None if groups is None else int(groups),
                   zero_variance_groups=None if zero is None else int(zero),
                   deferred=bool(metrics.get("update_deferred", 0.0)), metrics=metrics)


class _TurnSample(Protocol):
    """What a clipped-ratio update reads of one turn (GRPO's and PPO's sample types both have it)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]


SampleT = TypeVar("SampleT", bound=_TurnSample)


class ClippedRatioTrainer(BaseTrainer, Generic[SampleT]):
    """An online trainer: `update(episodes)` turns episodes into samples and runs `optimize` on them."""

    STATS: tuple[str, ...] = ()
    """The micro-batch statistics `optimize` averages (in this order), besides grad_norm and the counts."""
    EXTRA_STATS: tuple[str, ...] = ()
    """The statistics of the whole update `_extra_stats` adds after the counts."""
    ORDER_SALT = 0
    """Mixed into the seed of each update's sample order, so two algorithms never share one."""

    def __init__(self, backend: Any, common: Any):
        super().__init__(backend, common)
        self.updates = 0
        """Updates made: seeds each update's sample order (an online run makes one per iteration)."""
        self.anchor_rows: list[Row] = []
        """The demonstration turns of the SFT anchor (`config.anchor`; set by the builder, empty when it is off)."""

    def update(self, episodes: Sequence[Episode]) -> UpdateResult:
        """Learn from one iteration's episodes (those that are not `trainable` are left out)."""
        raise NotImplementedError

    def _micro_step(self, part: list[SampleT], step: list[SampleT],
                    scale: float) -> tuple[dict[str, float], int, float]:
        """Forward and backward of the micro-batch `part` of the optimiser step whose samples are `step` (in the
        order they were drawn): its loss as its share of the step's loss, times `scale` (0: a lockstep repeat that
        adds nothing). Returns its statistics (`STATS`), its tokens and the weight of its statistics in the step's
        means."""
        raise NotImplementedError

    def _extra_stats(self, samples: Sequence[SampleT]) -> dict[str, float]:
        """`EXTRA_STATS` of an update on (non-empty) `samples`."""
        return {}

    def optimize(self, samples: Sequence[SampleT]) -> dict[str, float]:
        """`epochs` x `minibatches` clipped-ratio optimiser steps on `samples`; returns the averaged statistics
        (zeros, same keys, when there is nothing to learn from)."""
        anchor = self.config.anchor
        anchored = ("anchor_nll",) if anchor.on else ()
        if not samples:
            return dict.fromkeys((*self.STATS, "grad_norm", "optimizer_steps", "update_tokens", *anchored,
                                  *self.EXTRA_STATS), 0.0)
        cfg, opt_cfg = self.config, self.common.optim
        samples = self.with_learner_old_logprobs(samples)
        self.model.train()
        gen = torch.Generator().manual_seed(mix_seed(self.common.seed, self.updates, self.ORDER_SALT))
        sums: dict[str, float] = {}
        weight, tokens, n_steps, norm_sum, anchor_nll = 0.0, 0, 0, 0.0, 0.0
        for _ in range(cfg.epochs):
            order = torch.randperm(len(samples), generator=gen).tolist()
            for mb in split(order, cfg.minibatches):
                set_lr(self._opt, opt_cfg, self.global_step)
                drawn = [samples[i] for i in mb]
                # Sorted by length so micro-batches carry little padding (the step's sum does not depend on order).
                step = sorted(drawn, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
                # Several processes: each back-propagates the micro-batches at its positions (same samples
                # everywhere). A sharded policy pads the share with zero-weighted repeats (same collectives on every
                # rank).
                for chunk, real in distributed.share(micro_batches([len(s.prompt_ids) + len(s.completion_ids)
                                                                    for s in step], opt_cfg.micro_batch_tokens),
                                                     lockstep=fsdp.is_sharded(self.model)):
                    st, n_tok, w = self._micro_step([step[i] for i in chunk], drawn, 1.0 if real else 0.0)
                    if not real:
                        continue
                    tokens += n_tok
                    for k, v in st.items():
                        sums[k] = sums.get(k, 0.0) + v * w
                    weight += w
                if anchor.on and self.anchor_rows:  # + coef x the demonstrations' token-mean NLL, same step
                    rows = draw_rows(self.anchor_rows, anchor.batch_size, self.common.seed, self.global_step)
                    anchor_nll += supervised_backward(self.model, rows, self.pad_id, self.device,
                                                      opt_cfg.micro_batch_tokens, scale=anchor.coef)[0]
                norm_sum += clip_and_step(self._opt, self.params, opt_cfg)
                self.global_step += 1
                n_steps += 1
        self.model.eval()
        # Every rank sums the same keys (one that back-propagated nothing holds zeros) in the same order.
        *totals, weight, n_tokens = distributed.sum_floats([sums.get(k, 0.0) for k in self.STATS] + [weight, tokens])
        out = {k: t / weight for k, t in zip(self.STATS, totals)}
        out.update(grad_norm=norm_sum / n_steps, optimizer_steps=float(n_steps), update_tokens=n_tokens)
        if anchor.on:  # summed over ranks already (each step's figure is the whole step's)
            out["anchor_nll"] = anchor_nll / n_steps
        return out | self._extra_stats(samples)

    def with_learner_old_logprobs(self, samples: Sequence[SampleT]) -> list[SampleT]:
        """`samples` ready for a clipped-ratio update: unchanged when the sampler's log-probs are the learner's
        numerics (`sampler_matches_learner`), otherwise copies whose `old_logprobs` the learner recomputed, so the
        ratio is 1 before the first step."""
        if self.sampler_matches_learner():
            return list(samples)
        fresh = self.learner_logprobs([s.prompt_ids for s in samples], [s.completion_ids for s in samples])
        # Both sample types are dataclasses; the Protocol bound cannot say so to mypy.
        return [dataclasses.replace(s, old_logprobs=lp) for s, lp in zip(samples, fresh)]  # type: ignore[type-var]

    def _extra_state(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def _load_extra_state(self, extra: dict[str, Any], run: dict[str, Any]) -> None:
        # A checkpoint from before the count was kept: its run made one update per iteration.
        self.updates = int(extra.get("updates", run.get("iteration", 0)))


def split(order: list[int], parts: int) -> list[list[int]]:
    """`order` cut into `parts` nearly equal consecutive pieces (empty pieces dropped)."""
    parts = max(1, min(parts, len(order)))
    size, rem = divmod(len(order), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < rem else 0)
        out.append(order[start:end])
        start = end
    return [p for p in out if p]
