"""The recorded runs of the quickstart's defaults (`dreamgym.commands.recorded`): every figure is on the page that
reports it, and the text printed under the quickstart's table is derived from their counts."""

from pathlib import Path

from dreamgym.commands.recorded import QUICKSTART_RECORDED, RecordedRun, recorded_note
from dreamgym.rl.evaluate import wilson_interval


def test_the_recorded_quickstart_figures_are_the_ones_its_results_page_shows():
    """The text printed under the quickstart's table is derived from `QUICKSTART_RECORDED`; every figure there must be
    on the page it names, so the printed text and the docs cannot drift apart."""
    root = Path(__file__).resolve().parents[2]
    for page, runs in QUICKSTART_RECORDED.values():
        text = (root / page).read_text()
        for run in runs:
            for row, k in run.wins.items():
                lo, hi = wilson_interval(k, run.n)
                figure = f"{100 * k / run.n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
                assert figure in text, f"{run.setting}, {row}: {figure} is not on {page}"


def test_the_printed_expectations_are_derived_from_the_recorded_counts():
    note = recorded_note("dial")
    # The guarded dream above its start in every recorded seed, S2R in 6 of 8: the text says which, with the points.
    assert "DreamGym GRPO ended above it in 8 of 8 (+10.0, +3.3, +2.2, +4.4, +15.6, +23.3, +16.7, +4.4 points)" in note
    assert "DreamGym-S2R GRPO ended above it in 6 of 8" in note and "each time" not in note
    assert recorded_note("alfworld") == ""
    saved = QUICKSTART_RECORDED["dial"]
    try:
        QUICKSTART_RECORDED["dial"] = (saved[0], (RecordedRun("x", "d", {"SFT": 10, "DreamGym GRPO": 5}, n=20),))
        assert "DreamGym GRPO ended above it in 0 of 1 (-25.0 points)" in recorded_note("dial")
    finally:
        QUICKSTART_RECORDED["dial"] = saved
