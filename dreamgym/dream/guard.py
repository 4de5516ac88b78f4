"""The audit guard: a dream that has started fooling itself is stopped, and its policy goes back to one from before.

Owns: `AuditGuardConfig` (the `dream.guard.*` fields), `GuardStop` (the guard's verdict: the iteration after which
the dream stops, the policy to restore and why, with its JSON form for the dream's saved state) and `check`, the
rule: a pure function of the audit's per-iteration summaries (`dreamgym.dream.audit.summarize`).
Must not know: the run loop (the dream world hands it the verdict as a `dreamgym.rl.loop.PhaseEnd`, which a
`GuardStop` is, and the loop restores the policy), trainers, the experience model, environments.

Why: on the dial quickstart's three seeds, the dream of seed 1 learnt what the experience model wrongly credits
(its audit found 5 false successes among 6 dreamt wins in its last two iterations) and ended 2.2 points under its
SFT start, while seeds 0 and 2 ended above theirs (docs/concepts.md, "The dream's report and audit").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dreamgym.config import ranged


@dataclass
class AuditGuardConfig:
    """`dream.guard.*`: when the audit guard stops a dream and rolls its policy back (off by default)."""

    max_false_success_rate: float | None = ranged(None, ge=0, le=1)
    """Stop the dream when the audit's false successes exceed this share of its dreamt wins over the last `window`
    audited iterations, and roll the policy back to the one that played the iteration before them (None: off)."""
    window: int = ranged(2, ge=1)
    """Audited iterations the false-success rate is taken over."""
    min_wins: int = ranged(4, ge=1)
    """Dreamt wins the window must hold before its rate is trusted."""

    @property
    def on(self) -> bool:
        return self.max_false_success_rate is not None


@dataclass(frozen=True)
class GuardStop:
    """The guard's verdict: the dream stops after iteration `stopped_at`, and the policy goes back to the one that had
    made `restore` updates (the player of iteration `restore` + 1, policy version `...-it<restore>`)."""

    stopped_at: int
    restore: int
    dream_wins: int
    """The window's dreamt wins among its audited episodes."""
    false_successes: int
    """Those the real environment did not grant."""
    first: int
    """The window's first iteration (`stopped_at` its last)."""
    limit: float
    """The `max_false_success_rate` the window's rate exceeded."""

    @property
    def rate(self) -> float:
        return self.false_successes / self.dream_wins

    @property
    def by(self) -> str:
        """What ended the phase: the name its metrics go under (`dream/guard/stopped_at`)."""
        return "guard"

    @property
    def reason(self) -> str:
        return (f"the audit of iterations {self.first}-{self.stopped_at} found {self.false_successes} false successes "
                f"among {self.dream_wins} dreamt wins, a rate of {self.rate:.2f} > "
                f"dream.guard.max_false_success_rate={self.limit:g}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GuardStop:
        return cls(int(d["stopped_at"]), int(d["restore"]), int(d["dream_wins"]), int(d["false_successes"]),
                   int(d["first"]), float(d["limit"]))


def check(audits: Sequence[tuple[int, Mapping[str, float]]], config: AuditGuardConfig) -> GuardStop | None:
    """The rule, after the last of `audits` (each an iteration's number and its audit summary, in order): over the
    last `config.window` of them (fewer at the start), the false successes exceed `max_false_success_rate` of the
    dreamt wins, and the dreamt wins are at least `min_wins`. Then the verdict: stop after the last iteration, and
    restore the policy that played the iteration just before the window (for a full window ending at iteration i,
    the one that played i - window, after i - window - 1 updates; never before the start, 0 updates). None: go on
    (also when the guard is off or no iteration was audited)."""
    if not config.on or not audits:
        return None
    assert config.max_false_success_rate is not None
    window = audits[-config.window:]
    wins = int(sum(s.get("dream_wins", 0) for _, s in window))
    false = int(sum(s.get("false_successes", 0) for _, s in window))
    if wins < config.min_wins or false <= config.max_false_success_rate * wins:
        return None
    first, last = window[0][0], window[-1][0]
    return GuardStop(stopped_at=last, restore=max(0, first - 2), dream_wins=wins, false_successes=false, first=first,
                     limit=config.max_false_success_rate)
