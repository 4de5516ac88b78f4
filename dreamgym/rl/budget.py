"""The real-step budget: a hard cap on the real-environment steps of a run.

Owns: `RealStepBudget` — the count of real steps taken against an optional limit, what one more iteration can
afford (`affordable`), and its checkpoint state. A run builds one, from `real_step_budget`; the rollout engine
takes one unit before every real step (`take`) and never exceeds it, and its distributed form adds the other
processes' steps afterwards (`charge`).
Must not know: trainers, environments, models.
"""

from __future__ import annotations

import threading
from typing import Any


class RealStepBudget:
    """A thread-safe hard cap on real-environment steps (`limit` None: unlimited, steps are still counted)."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int = 1) -> bool:
        """Reserve `n` steps before taking them; False (and nothing reserved) when fewer are left."""
        with self._lock:
            if self.limit is not None and self.used + n > self.limit:
                return False
            self.used += n
            return True

    def charge(self, n: int) -> None:
        """Count `n` steps already taken under shares of this budget (the other processes of a distributed
        rollout, each held to its share), so every process ends with the whole run's use."""
        with self._lock:
            self.used += n

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else self.limit - self.used

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def affordable(self, n_tasks: int, episodes_per_task: int, episode_steps: int) -> int:
        """How many of an iteration's `n_tasks` to play so that every one of their `episodes_per_task` episodes can
        run to `episode_steps` steps (the run's step limit) within what is left: all of them without a limit, 0 when
        not even one task's episodes fit (the run stops there and leaves the rest unspent). The rollout engine steps
        episodes in lockstep, so a batch the budget cannot finish has every episode ended by the budget, none of them
        trainable."""
        remaining = self.remaining
        if remaining is None:
            return n_tasks
        return min(n_tasks, remaining // (episodes_per_task * episode_steps))

    def state_dict(self) -> dict[str, Any]:
        return {"limit": self.limit, "used": self.used}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """The steps a checkpoint's run had used; the limit stays this run's own (`real_step_budget` as configured
        now), so S2R continuing a dream's folder (saved with no limit) is held to its budget, and a resumed run whose
        budget was raised goes on under the new one."""
        self.used = int(d["used"])
