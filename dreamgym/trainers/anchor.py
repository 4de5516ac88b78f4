"""The SFT anchor of an online update: a cross-entropy term on demonstrations added to every GRPO/PPO optimiser step.

Owns: `AnchorConfig` (the `grpo.anchor.*` / `ppo.anchor.*` fields), `anchor_rows` (a demonstration file's turns as
(prompt ids, target ids) rows, in the SFT trainer's format) and `draw_rows` (the rows of one optimiser step, a
function of (seed, step) so a resumed run draws what an uninterrupted one would).
Must not know: the run loop, rollouts, environments (a family's `admissible_from_state` is passed in), how the
update's own loss is made.

Why: GRPO's KL penalty (`kl_coef`) holds the policy near its start only on the tokens its rollouts sampled. On
MiniWoB++ an update from the SFT start lost whole task families it had not drawn (click-collapsible 9 -> 1 of 10
test pages) while winning nothing back (docs/results/miniwob.md): the anchor keeps the start's behaviour where the
rollouts do not look, on every family's demonstrations, as InstructGPT's PPO-ptx keeps pretraining behaviour with
a language-model term mixed into PPO's objective. Per step the update's loss becomes policy loss + `coef` x the
token-mean cross-entropy of `batch_size` demonstration turns.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.checks import trajectory_file
from dreamgym.config import ConfigError, checked, ranged
from dreamgym.types import Trajectory
from dreamgym.utils.seeds import mix_seed

Row = tuple[list[int], list[int]]
"""(prompt ids, target ids) of one demonstration turn."""

ANCHOR_BASIS = 0x3C6EF372
"""`mix_seed` basis of the anchor's draws: unrelated to the update's own sample order."""


@dataclass
class AnchorConfig:
    """`grpo.anchor.*` / `ppo.anchor.*`: an SFT term on demonstrations in every optimiser step (off by default)."""

    coef: float = ranged(0.0, ge=0)
    """Weight of the demonstrations' token-mean cross-entropy in each step's loss (0: off)."""
    data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """Demonstration trajectories (JSONL/Parquet) whose turns the anchor trains on."""
    batch_size: int = ranged(16, ge=1)
    """Demonstration turns per optimiser step."""
    only_won: bool = True
    """Use only the successful trajectories of `data`."""

    @property
    def on(self) -> bool:
        return self.coef > 0

    def validate(self) -> None:
        """A weight without demonstrations is refused at start-up."""
        if self.on and not self.data:
            raise ConfigError("data", f"coef={self.coef:g} needs demonstrations to anchor on",
                              "a trajectory file (.jsonl or .parquet)")


def anchor_rows(trajectories: Sequence[Trajectory], backend: Any, agent: Any, *, only_won: bool = True,
                max_seq_tokens: int = 2048,
                admissible_fn: Callable[[str], list[str]] | None = None) -> list[Row]:
    """Every turn of the (won, with `only_won`) `trajectories` as a row in the prompt format the policy plays with,
    as SFT makes its examples (`dreamgym.trainers.sft.demonstration_examples`); rows longer than `max_seq_tokens`
    are left out. ValueError when none is left: an anchor on nothing would silently be no anchor."""
    from dreamgym.trainers.sft import demonstration_examples

    examples, _ = demonstration_examples(trajectories, backend, agent, admissible_fn, only_won=only_won,
                                         max_seq_tokens=max_seq_tokens)
    rows: list[Row] = [(e.prompt_ids, e.target_ids) for e in examples]
    if not rows:
        raise ValueError(f"the anchor's data holds no {'won ' if only_won else ''}turn of at most {max_seq_tokens} "
                         f"tokens ({len(trajectories)} trajectories)")
    return rows


def draw_rows(rows: Sequence[Row], n: int, seed: int, step: int) -> list[Row]:
    """The `n` rows of optimiser step `step` (without replacement; all of them when there are fewer)."""
    rng = random.Random(mix_seed(seed, step, basis=ANCHOR_BASIS))
    return rng.sample(list(rows), min(n, len(rows)))
