"""Direct preference optimisation of the agent on (successful, failed) trajectory pairs of the same task.

Owns: `DPOConfig`, pair building (`build_pairs`), and `DPOTrainer` — the sigmoid DPO loss on whole episodes,
one optimiser step per batch of pairs (the fit loop, shuffled and resumable mid-epoch, is
`dreamgym.trainers.offline`'s, shared with SFT).
Must not know: concrete environments, presets, how the trajectories were collected.

Granularity (our choice, documented): **per episode**. A trajectory's log-probability is the sum, over all of
its turns, of the log-probabilities of the assistant tokens of that turn (each turn in the rollout prompt
format, via `dreamgym.trainers.sft.turn_examples`); the chosen trajectory won the task, the rejected one did
not. Per-episode pairs need no alignment of the two episodes' turns, and they credit the whole decision
sequence, as the outcome reward does. Reference log-probabilities are those of the policy before the first
DPO step (computed once, kept in the checkpoint so a resumed run uses the same ones).

State: the weights, the optimiser, the fit loop's epoch and batch position (`dreamgym.trainers.offline`) and the
reference log-probabilities.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dreamgym.trainers import algos

from dreamgym.utils import distributed, fsdp
from dreamgym.config import ranged
from dreamgym.utils.metrics import MetricsLogger
from dreamgym.trainers.common import TrainerConfig, clip_and_step, pack, policy_forward, set_lr
from dreamgym.trainers.offline import FitTrainer
from dreamgym.trainers.sft import AdmissibleFn, Example, turn_examples
from dreamgym.types import Trajectory


STEP_STATS = ("loss", "accuracy", "margin", "chosen_reward", "rejected_reward")
"""What `DPOTrainer.train_step` averages over a step's pairs (the loss and `algos.dpo_loss`'s stats)."""


@dataclass
class DPOConfig:
    beta: float = ranged(0.1, gt=0)
    """Strength of the implicit KL regulariser."""
    label_smoothing: float = ranged(0.0, ge=0, lt=0.5)
    """Conservative DPO: assumed probability that a preference label is flipped."""
    epochs: int = ranged(2, ge=1)
    """Passes over the pairs."""
    pairs_per_step: int = ranged(8, ge=1)
    """Pairs per optimiser step."""
    max_pairs_per_task: int = ranged(4, ge=1)
    """At most this many (won, failed) pairs per task."""
    log_every: int = ranged(5, ge=1)
    """Log metrics every this many optimiser steps."""


def build_pairs(trajectories: Sequence[Trajectory], max_pairs_per_task: int,
                seed: int) -> list[tuple[Trajectory, Trajectory]]:
    """(chosen, rejected) pairs: a won and a failed trajectory of the same task (by task id), deterministic in
    `seed`. A task with k won and m failed trajectories gives min(max_pairs_per_task, max(k, m)) pairs, reusing
    the shorter side in turn."""
    by_task: dict[str, tuple[list[Trajectory], list[Trajectory]]] = {}
    for t in trajectories:
        if t.steps:
            by_task.setdefault(t.task.id, ([], []))[0 if t.won else 1].append(t)
    rng = random.Random(seed)
    pairs = []
    for task_id in sorted(by_task):
        won, lost = (sorted(x, key=lambda t: t.id) for x in by_task[task_id])
        if not won or not lost:
            continue
        rng.shuffle(won)
        rng.shuffle(lost)
        for i in range(min(max_pairs_per_task, max(len(won), len(lost)))):
            pairs.append((won[i % len(won)], lost[i % len(lost)]))
    return pairs


@dataclass
class _Pair:
    chosen: list[Example]
    rejected: list[Example]


class DPOTrainer(FitTrainer[_Pair]):
    algo = "dpo"
    ORDER_SALT = (3,)

    def __init__(self, backend: Any, config: DPOConfig, common: TrainerConfig, *,
                 logger: MetricsLogger | None = None, admissible_fn: AdmissibleFn | None = None):
        super().__init__(backend, common, logger=logger)
        self.config: DPOConfig = config
        self.admissible_fn = admissible_fn
        self.ref_logps: torch.Tensor | None = None  # [P, 2] reference (chosen, rejected) log-probs
        self._build_optimizer()

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "ref_logps": self.ref_logps}

    def _load_extra_state(self, extra: dict[str, Any], run: dict[str, Any]) -> None:
        super()._load_extra_state(extra, run)
        self.ref_logps = extra.get("ref_logps")

    def pairs(self, trajectories: Sequence[Trajectory]) -> list[_Pair]:
        agent = self.common.agent
        return [_Pair(turn_examples(c, self.backend, agent, self.admissible_fn),
                      turn_examples(r, self.backend, agent, self.admissible_fn))
                for c, r in build_pairs(trajectories, self.config.max_pairs_per_task, self.common.seed)]

    def sequence_logps(self, pairs: Sequence[_Pair]) -> torch.Tensor:
        """[P, 2] summed assistant-token log-probs of (chosen, rejected) under the current policy, with the
        gradient attached when grad is enabled. All turns of the given pairs go through one packed forward."""
        exs: list[Example] = []
        owner: list[int] = []
        for i, p in enumerate(pairs):
            for j, side in enumerate((p.chosen, p.rejected)):
                exs += side
                owner += [2 * i + j] * len(side)
        packed = pack([e.prompt_ids for e in exs], [e.target_ids for e in exs], self.pad_id, self.device)
        logp = policy_forward(self.model, packed).logp  # [R, L], 0 off the mask
        per_row = logp.sum(-1)  # [R]
        seq = torch.zeros(2 * len(pairs), device=self.device).index_add(
            0, torch.tensor(owner, device=self.device), per_row)
        return seq.view(len(pairs), 2)

    def _reference(self, pairs: Sequence[_Pair]) -> torch.Tensor:
        ref = torch.zeros(len(pairs), 2)
        with torch.no_grad():
            for i in range(len(pairs)):
                ref[i] = self.sequence_logps([pairs[i]]).cpu()
        return ref

    # -- the fit loop's parts (dreamgym.trainers.offline)
    def _items(self, trajectories: Sequence[Trajectory]) -> tuple[list[_Pair], dict[str, float]]:
        """The pairs, with their reference log-probs computed once (kept in the checkpoint)."""
        pairs = self.pairs(trajectories)
        if pairs and (self.ref_logps is None or len(self.ref_logps) != len(pairs)):
            self.ref_logps = self._reference(pairs)
        return pairs, {"pairs": float(len(pairs))}

    def _batch_size(self) -> int:
        return self.config.pairs_per_step

    def _step(self, items: list[_Pair], idx: list[int]) -> dict[str, float]:
        assert self.ref_logps is not None  # computed by `_items`
        return self.train_step([items[i] for i in idx], self.ref_logps[idx])

    def train_step(self, pairs: Sequence[_Pair], ref: torch.Tensor) -> dict[str, float]:
        """One optimiser step on `pairs` (ref: [P, 2] reference log-probs); one pair per forward chunk so memory
        is bounded by the longest episode pair, gradients accumulated with weight 1/P."""
        opt_cfg = self.common.optim
        self.model.train()
        t0 = time.perf_counter()
        lr = set_lr(self._opt, opt_cfg, self.global_step)
        sums = dict.fromkeys(STEP_STATS, 0.0)
        # Several processes: each back-propagates the pairs at its positions; the gradients are summed in the step.
        # A sharded policy pads the share with zero-weighted repeats (same collectives on every rank).
        for (i, p), real in distributed.share(list(enumerate(pairs)), lockstep=fsdp.is_sharded(self.model)):
            pol = self.sequence_logps([p])  # [1, 2]
            r = ref[i: i + 1].to(self.device)
            loss, st = algos.dpo_loss(pol[:, 0], pol[:, 1], r[:, 0], r[:, 1], beta=self.config.beta,
                                      label_smoothing=self.config.label_smoothing)
            (loss / len(pairs) * (1.0 if real else 0.0)).backward()
            if not real:
                continue
            sums["loss"] += float(loss.detach()) / len(pairs)
            for k, v in st.items():
                sums[k] += float(v) / len(pairs)
        sums = dict(zip(STEP_STATS, distributed.sum_floats([sums[k] for k in STEP_STATS])))
        sums["grad_norm"] = clip_and_step(self._opt, self.params, opt_cfg)
        sums["lr"] = lr
        self.global_step += 1
        self.model.eval()
        sums["step_time_s"] = time.perf_counter() - t0
        return sums
