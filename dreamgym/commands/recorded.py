"""The recorded runs of the quickstart's defaults, and the text derived from them that the quickstart prints under
its table, so that text cannot claim more than the runs show.

Owns: `RecordedRun`, `QUICKSTART_RECORDED` (per environment, the page that reports the runs and their win counts; a
test checks each figure is on that page), `recorded_note`.
Must not know: how a quickstart runs (`dreamgym.commands.recipe` calls `recorded_note`), how the runs were made.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordedRun:
    """One recorded run of the quickstart's defaults, as its results page reports it."""

    setting: str
    """The CPU, its kernels and the thread count: what moves the figures (docs/log/01-quickstart.md)."""
    date: str
    """When it ran (UTC)."""
    wins: dict[str, int]
    """Held-out episodes each row won."""
    n: int = 180
    """Held-out episodes of each row."""


QUICKSTART_RECORDED: dict[str, tuple[str, tuple[RecordedRun, ...]]] = {
    # The defaults since the audit guard is on at 0.5 (`--seeds 0,1,2,3,4 threads=1` on an AMD EPYC, one run per
    # seed, seed 3 with its SFT start on its best check; `--seeds 0,1,2 threads=1` on an Intel Xeon). The unguarded
    # runs of the earlier defaults stay on the page as history.
    "dial": ("docs/results/dial.md", (
        RecordedRun("AMD EPYC, AVX-512 kernels, 1 thread, seed 0", "2026-12-06",
                    {"SFT": 61, "DreamGym GRPO": 79, "DreamGym-S2R GRPO": 58, "GRPO real": 73}),
        RecordedRun("AMD EPYC, AVX-512 kernels, 1 thread, seed 1", "2026-12-06",
                    {"SFT": 44, "DreamGym GRPO": 50, "DreamGym-S2R GRPO": 57, "GRPO real": 68}),
        RecordedRun("AMD EPYC, AVX-512 kernels, 1 thread, seed 2", "2026-12-06",
                    {"SFT": 68, "DreamGym GRPO": 72, "DreamGym-S2R GRPO": 64, "GRPO real": 76}),
        RecordedRun("AMD EPYC, AVX-512 kernels, 1 thread, seed 3", "2026-12-07",
                    {"SFT": 53, "DreamGym GRPO": 61, "DreamGym-S2R GRPO": 68, "GRPO real": 57}),
        RecordedRun("AMD EPYC, AVX-512 kernels, 1 thread, seed 4", "2026-12-06",
                    {"SFT": 53, "DreamGym GRPO": 81, "DreamGym-S2R GRPO": 75, "GRPO real": 65}),
        RecordedRun("Intel Xeon, AVX-512 kernels, 1 thread, seed 0", "2026-12-07",
                    {"SFT": 62, "DreamGym GRPO": 104, "DreamGym-S2R GRPO": 86, "GRPO real": 72}),
        RecordedRun("Intel Xeon, AVX-512 kernels, 1 thread, seed 1", "2026-12-07",
                    {"SFT": 54, "DreamGym GRPO": 84, "DreamGym-S2R GRPO": 56, "GRPO real": 58}),
        RecordedRun("Intel Xeon, AVX-512 kernels, 1 thread, seed 2", "2026-12-07",
                    {"SFT": 72, "DreamGym GRPO": 80, "DreamGym-S2R GRPO": 94, "GRPO real": 60}),
    )),
}
"""Recorded runs of the quickstart's defaults per environment, with the page that reports them (a test checks that
the page shows every figure here). `recorded_note` derives the text printed under a quickstart's table from these
counts, so that text cannot claim more than the runs show. A new recorded run goes here and on the page."""


def recorded_note(env: str) -> str:
    """What recorded runs of the defaults showed on `env`, derived from `QUICKSTART_RECORDED` ("" when none)."""
    if env not in QUICKSTART_RECORDED:
        return ""
    page, runs = QUICKSTART_RECORDED[env]
    sft = [r.wins["SFT"] / r.n for r in runs]
    lines = [f"Recorded runs of the defaults ({page}; one run per row in each of {len(runs)} settings of CPU, "
             f"kernels, threads and seed): the SFT start landed at {100 * min(sft):.1f}-{100 * max(sft):.1f}% "
             "(SFT stops on a measured replay criterion because where a fixed step count lands moves with the "
             "CPU's float rounding)."]
    for row in runs[0].wins:
        if row == "SFT":
            continue
        diffs = [(r.wins[row] - r.wins["SFT"]) / r.n for r in runs]
        lines.append(f"{row} ended above it in {sum(d > 0 for d in diffs)} of {len(runs)} "
                     f"({', '.join(f'{100 * d:+.1f}' for d in diffs)} points).")
    return "\n" + " ".join(lines) + "\n"
