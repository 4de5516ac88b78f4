"""The comparison statistics: pairing by (run, task, seed), the exact sign test, and the aggregates over runs
computed on exactly the runs' episodes (no episode re-sampled or invented)."""

import math

import numpy as np
import pytest
from scipy import stats

from dreamgym.rl.compare import (aggregate_runs, compare_paired, improvement_interval, iqm_interval, outcomes,
                                 sign_test)


def _rows(wins, task_ids=("a", "b"), seeds=(0, 1)):
    it = iter(wins)
    return [{"task": t, "seed": s, "won": next(it), "reward": 1.0, "failed": False} for s in seeds for t in task_ids]


def test_pairs_are_matched_by_key_and_failed_episodes_left_out():
    first = outcomes(_rows([1, 0, 1, 0]))
    rows = _rows([1, 1, 0, 1])
    rows[3]["failed"] = True  # an environment failure: not a pair
    c = compare_paired(first, outcomes(rows))
    assert (c.n, c.only_first, c.only_second, c.unpaired_first, c.unpaired_second) == (3, 1, 1, 1, 0)
    assert c.p_two_sided == 1.0
    with pytest.raises(ValueError, match="appears twice"):
        outcomes(_rows([1, 0, 1, 0]) + _rows([1], task_ids=("a",), seeds=(0,)))


def test_sign_test_is_the_exact_binomial_on_discordant_pairs():
    # 9 discordant pairs, 8 for the second policy: P(X >= 8), X ~ Bin(9, 1/2) = 10/512.
    assert sign_test(1, 8, "greater") == pytest.approx(10 / 512)
    assert sign_test(1, 8) == pytest.approx(20 / 512)
    assert sign_test(0, 0) == 1.0


def test_aggregate_is_computed_on_the_runs_episodes():
    """Pooled success counts exactly the runs' episodes; the IQM is scipy's trim_mean over the (run, task) scores."""
    runs = {0: outcomes(_rows([1, 0, 1, 1]), run=0), 3: outcomes(_rows([0, 0, 1, 0]), run=3),
            7: outcomes(_rows([1, 1, 1, 1]), run=7)}
    agg = aggregate_runs(runs, resamples=200)
    assert (agg.runs, agg.n, agg.n_success) == ([0, 3, 7], 12, 8)
    assert agg.per_run == [0.75, 0.25, 1.0]
    # per-task success: run 0 a=1 b=0.5; run 3 a=0.5 b=0; run 7 a=1 b=1
    assert agg.iqm == pytest.approx(stats.trim_mean([1, 0.5, 0.5, 0, 1, 1], 0.25))
    assert agg.iqm_low <= agg.iqm <= agg.iqm_high and agg.tasks == 2


def test_stratified_bootstrap_resamples_runs_within_each_task():
    """Every bootstrap IQM is built from values that task actually holds: a task whose runs all scored 1 stays at 1
    in every resample, so with all tasks constant the interval collapses onto the point."""
    scores = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    point, lo, hi = iqm_interval(scores, resamples=200)
    assert (point, lo, hi) == (0.5, 0.5, 0.5)
    point, lo, hi = iqm_interval(np.array([[0.2, 0.4]]))
    assert point == pytest.approx(0.3) and math.isnan(lo) and math.isnan(hi)
    with pytest.raises(ValueError, match="no episode of task b"):
        aggregate_runs({0: outcomes(_rows([1, 0, 1, 0]), run=0), 1: outcomes(_rows([1, 1], task_ids=("a",)), run=1)})


def test_probability_of_improvement_is_the_mann_whitney_share_averaged_over_tasks():
    """rliable's P(X > Y): per task, U / (n m) with ties counted half, then the mean over tasks."""
    x = np.array([[1.0, 0.5], [0.5, 0.0], [1.0, 1.0]])
    y = np.array([[0.5, 0.5], [0.0, 0.0], [0.5, 1.0]])
    p, lo, hi = improvement_interval(x, y, resamples=300)
    assert p == pytest.approx(np.mean([stats.mannwhitneyu(x[:, j], y[:, j]).statistic / 9 for j in range(2)]))
    assert lo <= p <= hi
    assert improvement_interval(y, y, resamples=100)[0] == 0.5
    assert math.isnan(improvement_interval(x[:1], y, resamples=100)[1])
