"""What a recipe row's figures depend on, hashed: the row's settings as its hash holds them and the hash itself.

Owns: `row_hash` (the hash of a row's settings with the evaluation, the thread count and the offline data's settings),
`row_config` (a row's `dreamgym train` config as the hash holds it) and `dream_settings` (its dream settings). A row
finished on disk with an equal hash is that row (`dreamgym.commands.recipe.Recipe.resume_row` reads it back), so what
cannot change a row's figures stays out: an audit guard that is off (run folders from before the guard read back), the
same for a uniform task draw (`task_strata` empty), an SFT anchor that is off (`grpo.anchor`, `ppo.anchor`) and the
dream's `ground_states` at its default (no recipe family defines `ground_state`), and
the path of the policy a row starts from inside the run folder (the starting row's own hash stands for it: a run
folder copied or moved elsewhere reads its rows back).
Must not know: how rows are trained or stored, environments, trainers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from dreamgym.config import to_dict
from dreamgym.dream.world import DreamConfig
from dreamgym.commands.train import TrainConfig


def row_hash(row: dict[str, Any], evaluation: dict[str, Any], threads: int, data: Any) -> str:
    """16 hex digits of the row's settings (`row`), its evaluation (tasks, seeds, sampling), the thread count (float
    rounding moves results, docs/log/01-quickstart.md) and the offline data's settings."""
    text = json.dumps({"row": row, "evaluation": evaluation, "threads": threads, "data": data}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def row_config(cfg: TrainConfig, from_row: bool = False) -> dict[str, Any]:
    """A row's `dreamgym train` config as its hash holds it: its dream section as `dream_settings` holds it; for a row
    that starts from another row's policy (`from_row`), no `init`."""
    d = to_dict(cfg)
    d["dream"] = dream_settings(cfg.dream)
    if not cfg.task_strata:
        d.pop("task_strata", None)
    for algo in ("grpo", "ppo"):
        if not d[algo]["anchor"]["coef"]:
            d[algo].pop("anchor")
    if from_row:
        d.pop("init", None)
    return d


def dream_settings(dream: DreamConfig | None) -> dict[str, Any] | None:
    """A row's dream settings as its hash holds them, the guard left out while it is off and `ground_states` while
    on."""
    if dream is None:
        return None
    d = dataclasses.asdict(dream)
    if dream.ground_states:
        d.pop("ground_states")
    return d if dream.guard.on else {k: v for k, v in d.items() if k != "guard"}
