"""Metric names: the namespaces every scalar a run logs (`metrics.jsonl`, TensorBoard) goes under, and how a name
that a run folder written before them holds reads today.

Owns: the five namespaces, fixed for every command and trainer (as CleanRL's `losses/` and `charts/`):
  - `rollout/`: what an iteration played and what it cost: the episodes' outcomes (`rollout/success_rate`, ...,
    `rollout/end_<reason>`) and the loop's counts and timings (`rollout/iteration`, `rollout/real_steps_used`,
    `rollout/synthetic_steps`, `rollout/rollout_time_s`, ...);
  - `losses/`: what an update or an optimiser step reports: the losses, the optimiser's and the algorithm's
    statistics (`losses/grad_norm`, `losses/clip_frac`, `losses/zero_variance_groups`, ...) and its cost
    (`losses/update_time_s`), for GRPO and PPO per iteration and for SFT and DPO every `log_every` steps;
  - `dream/`: the dream world's own figures after each iteration (curriculum, experience model, buffer, the
    iteration's report: `dream/failure_states`, `dream/zero_variance_groups`, `dream/optimizer_steps`, its
    audit in the real environment, `dream/audit/...`, and the audit guard's decision, `dream/guard/stopped_at` and
    `dream/guard/rolled_back_to`);
  - `em/`: the experience model's training (`dreamgym train-em`);
  - `eval/`: evaluations (held-out success, SFT's replay success on its demonstrations);
and `current_name`, the name today of a metric an older run logged (unprefixed rollout and update figures, SFT's
and DPO's `sft/` and `dpo/`), so that the viewer and the scripts read old run folders as new ones.
Must not know: trainers, worlds, files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROLLOUT = "rollout/"
LOSSES = "losses/"
DREAM = "dream/"
EM = "em/"
EVAL = "eval/"
NAMESPACES = (ROLLOUT, LOSSES, DREAM, EM, EVAL)

OLD_ROLLOUT_NAMES = frozenset({
    "episodes", "episodes_trainable", "episodes_failed", "success_rate", "mean_reward", "mean_turns",
    "invalid_action_rate", "grounded_action_rate", "noop_step_rate", "overruled_win_rate", "turns", "iteration",
    "real_steps_used", "synthetic_steps", "rollout_time_s", "rollout_tokens_per_s", "gen_tokens"})
"""The run loop's rollout figures and counts, logged without a namespace before there were namespaces (with the
`end_<reason>` counts); every other name it logged without one was the update's."""
OLD_PREFIXES = {"sft/replay_success": EVAL + "replay_success", "sft/": LOSSES, "dpo/": LOSSES}
"""Old prefixes (and one old name) and what replaces them, the most specific first."""


def namespaced(namespace: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` with each name under `namespace` (one of `NAMESPACES`)."""
    return {namespace + k: v for k, v in metrics.items()}


def current_name(name: str) -> str:
    """The name today of the metric `name` in a `metrics.jsonl` row (itself when it is one of today's)."""
    if "/" not in name:
        return (ROLLOUT if name in OLD_ROLLOUT_NAMES or name.startswith("end_") else LOSSES) + name
    for old, new in OLD_PREFIXES.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def current_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A `metrics.jsonl` row with every metric under its name today (`step` and `time` are not metrics)."""
    return {k if k in ("step", "time") else current_name(k): v for k, v in row.items()}
