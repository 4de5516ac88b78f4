"""The fit loop SFT and DPO share: epochs over a fixed list of items in a seeded order, one optimiser step per
batch, resumable mid-epoch.

Owns: `FitTrainer`, the base of the offline trainers — `fit(trajectories)`: the items (`_items`: SFT's turn
examples, DPO's episode pairs), each epoch's order (seeded by the run seed and the epoch), one `_step` per batch,
metrics every `log_every` steps under `losses/` (`dreamgym.utils.metric_names`), a progress bar, the early stops
(`on_step`, the trainer's own `_stop_after`), and the epoch and batch position a checkpoint keeps so a resumed fit
continues where it stopped.
Must not know: environments, rollouts, any one algorithm's loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from dreamgym.utils.metric_names import LOSSES
from dreamgym.utils.metrics import MetricsLogger
from dreamgym.trainers.common import BaseTrainer, TrainerConfig, mix_seed
from dreamgym.types import Trajectory

ItemT = TypeVar("ItemT")


class FitTrainer(BaseTrainer, Generic[ItemT]):
    """An offline trainer: `fit` over stored trajectories. Subclasses give the items, a batch's step, the batch
    size and, optionally, a criterion to stop early."""

    ORDER_SALT: tuple[int, ...] = ()
    """Mixed into the seed of each epoch's order after (seed, epoch) (SFT: none; DPO: 3)."""

    def __init__(self, backend: Any, common: TrainerConfig, *, logger: MetricsLogger | None = None):
        super().__init__(backend, common)
        self.logger = logger
        self.iteration = 0
        """Completed epochs."""
        self.batch_pos = 0
        """Optimiser steps done inside the current epoch (for mid-epoch resume)."""

    # -- what a subclass gives
    def _items(self, trajectories: Sequence[Trajectory]) -> tuple[list[ItemT], dict[str, float]]:
        """What one epoch runs over, and the counts the fit's metrics start from."""
        raise NotImplementedError

    def _batch_size(self) -> int:
        raise NotImplementedError

    def _step(self, items: list[ItemT], idx: list[int]) -> dict[str, float]:
        """One optimiser step on `items[idx]`; returns its statistics (with "loss")."""
        raise NotImplementedError

    def _max_steps(self) -> int:
        """Optimiser steps after which the fit stops, mid-epoch if need be (0: none)."""
        return 0

    def _stop_after(self) -> dict[str, float] | None:
        """Checked after every step: None to go on, or the figures to end the fit with."""
        return None

    def _ended(self, figures: dict[str, float]) -> dict[str, float]:
        """Called when the fit has run all its epochs or `_max_steps` (not when `on_step` paused it or `_stop_after`
        ended it); returns the figures `fit` returns."""
        return figures

    # -- the loop
    def fit(self, trajectories: Sequence[Trajectory], *, epochs: int | None = None, progress: bool = False,
            on_step: Callable[[int], bool] | None = None) -> dict[str, float]:
        """Train for `epochs` (default `config.epochs`) counted from the start of the run, so a resumed trainer
        finishes the remaining ones. `on_step(global_step)` may return True to stop early (after that step; the
        trainer can be saved and resumed); `_max_steps` and `_stop_after` stop it the same way. Returns the last
        epoch's mean metrics (those of the steps so far when stopped early)."""
        items, counts = self._items(trajectories)
        if not items:
            return counts
        total_epochs = self.config.epochs if epochs is None else epochs
        size = self._batch_size()
        n_batches = (len(items) + size - 1) // size
        done = self.iteration * n_batches + self.batch_pos
        planned = total_epochs * n_batches
        if self._max_steps():
            planned = min(planned, self._max_steps())
        bar = progress_bar(progress, self.algo, total=max(0, planned - done))
        last: dict[str, float] = dict(counts)
        try:
            while self.iteration < total_epochs:
                order = torch.randperm(len(items), generator=torch.Generator().manual_seed(
                    mix_seed(self.common.seed, self.iteration, *self.ORDER_SALT))).tolist()
                sums: dict[str, float] = {}
                while self.batch_pos < n_batches:
                    if 0 < self._max_steps() <= self.global_step:
                        return self._ended({**counts, **{k: v / max(1, self.batch_pos) for k, v in sums.items()}})
                    st = self._step(items, order[self.batch_pos * size:(self.batch_pos + 1) * size])
                    self.batch_pos += 1
                    for k, v in st.items():
                        sums[k] = sums.get(k, 0.0) + v
                    if self.logger is not None and self.global_step % self.config.log_every == 0:
                        self.logger.log(self.global_step, {**st, "epoch": float(self.iteration)}, prefix=LOSSES)
                    if bar is not None:
                        bar[0].update(bar[1], advance=1, description=f"{self.algo} loss {st['loss']:.3f}")
                    if on_step is not None and on_step(self.global_step):
                        return {**counts, **{k: v / max(1, self.batch_pos) for k, v in sums.items()}}
                    stop = self._stop_after()
                    if stop is not None:
                        return {**counts, **{k: v / max(1, self.batch_pos) for k, v in sums.items()}, **stop}
                last = {**counts, **{k: v / n_batches for k, v in sums.items()}, "epoch": float(self.iteration)}
                self.iteration += 1
                self.batch_pos = 0
        finally:
            if bar is not None:
                bar[0].stop()
        return self._ended(last)

    # -- checkpoints: the epoch is the fit's run state, the batch position its own
    def save(self, directory: str | Path, run: Mapping[str, Any] | None = None) -> Path:
        return super().save(directory, {"iteration": self.iteration, **(run or {})})

    def _extra_state(self) -> dict[str, Any]:
        return {"batch_pos": self.batch_pos}

    def _load_extra_state(self, extra: dict[str, Any], run: dict[str, Any]) -> None:
        self.iteration = int(run["iteration"])
        self.batch_pos = int(extra.get("batch_pos", 0))


def progress_bar(enabled: bool, name: str, total: int) -> tuple[Any, Any] | None:
    """A started rich progress bar and its task id, or None."""
    if not enabled or total <= 0:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    p.start()
    return p, p.add_task(name, total=total)
