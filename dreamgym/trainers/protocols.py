"""The two kinds of trainer, as the training loops see them: online (rollouts over an environment factory, then an
update) and offline (a fit over stored trajectories).

Owns: the `Trainer`, `OnlineTrainer` and `OfflineTrainer` protocols — the only surface `dreamgym.loops`,
`dreamgym.dream`, `dreamgym.recipe` and `dreamgym train` may use.
Must not know: any algorithm (GRPO/PPO are online trainers, SFT/DPO offline ones, by shape alone), environments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from dreamgym.env import TextEnv
from dreamgym.budget import RealStepBudget
from dreamgym.rollout import Episode, PolicyBackend
from dreamgym.types import Task, Trajectory


class Trainer(Protocol):
    """What every trainer offers: the policy's backend, counters, the real-step budget and exact checkpoints."""

    backend: PolicyBackend
    budget: RealStepBudget
    iteration: int
    """Completed `train_iteration` calls (online) or epochs (offline)."""
    global_step: int
    """Optimiser steps."""

    def save(self, directory: str | Path) -> Path: ...

    def load(self, directory: str | Path) -> None: ...


class OnlineTrainer(Trainer, Protocol):
    """GRPO and PPO: one rollout batch in the environment `env_factory` makes, then one update."""

    def train_iteration(self, tasks: Sequence[Task],
                        env_factory: Callable[[], TextEnv]) -> tuple[list[Episode], dict[str, Any]]: ...

    def policy_version(self) -> str:
        """The policy's name in the transitions it generates (the replay buffer keeps it)."""
        ...


class OfflineTrainer(Trainer, Protocol):
    """SFT and DPO: epochs over stored trajectories."""

    def fit(self, trajectories: Sequence[Trajectory], *, epochs: int | None = None, progress: bool = False,
            on_step: Callable[[int], bool] | None = None) -> dict[str, float]: ...
