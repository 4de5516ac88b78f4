"""Comparisons of evaluations: episodes paired across policies, the exact sign test, and the aggregates of a method
run several times (Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice").

Owns: `Outcomes` (what each episode of an evaluation scored, keyed by (run, task id, evaluation seed)), `outcomes`
(read from `episode_rows` records, the rows `dreamgym eval --json` writes), `compare_paired` (two policies on the
episodes both played: wins, discordant pairs, the exact sign test, the paired reward difference),
`aggregate_runs` (several runs of one method: success over every episode with its Wilson interval, and the
interquartile mean of per-(run, task) success with a stratified bootstrap interval) and `improvement_interval`
(rliable's probability of improvement between two methods' runs, with its stratified bootstrap interval).
Must not know: how the policies were trained or evaluated, commands, report layouts.

The statistics are scipy's (`binomtest`, `bootstrap`, `trim_mean`), not rliable's: rliable 1.2.0 brings arch,
statsmodels, pandas and seaborn into the pinned environment for these functions (its probability of improvement
is a few lines of numpy, below). Its stratified bootstrap
(runs resampled independently within each task) is scipy's multi-sample bootstrap with one sample per task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dreamgym.rl.evaluate import paired_mean_difference, wilson_interval

Key = tuple[int, str, int]
"""(run seed, task id, evaluation seed): the same key in two rows' evaluations is the same test episode."""
Outcomes = dict[Key, tuple[bool, float]]
"""Each episode's (won, reward) by its key; episodes ended by an environment failure are not in it (as in `n`)."""

BOOTSTRAP_RESAMPLES = 2000
"""Resamples of the stratified bootstrap (rliable's default is 2,000 as well)."""


def outcomes(rows: Iterable[Mapping[str, Any]], run: int = 0, where: str = "") -> Outcomes:
    """The episodes of `rows` (records with task, seed, won, reward and failed, as `episode_rows` writes them) keyed
    under `run`. The same (task, seed) twice is refused: pairing would be ambiguous. `where` names the source in
    that error."""
    played: Outcomes = {}
    for r in rows:
        if r.get("failed"):
            continue  # an environment failure is not the policy's doing: out of n, out of the pairs
        key = (run, str(r["task"]), int(r["seed"]))
        if key in played:
            raise ValueError(f"{where or 'episodes'}: task {r['task']} seed {r['seed']} appears twice")
        played[key] = (bool(r["won"]), float(r["reward"]))
    return played


def sign_test(only_first: int, only_second: int, alternative: str = "two-sided") -> float:
    """Exact sign (McNemar) test on the discordant pairs: the p-value of `only_second` successes in
    `only_first + only_second` fair coin flips (`alternative` "greater": the second policy wins more often;
    "two-sided": either does). 1.0 when no pair is discordant."""
    n = only_first + only_second
    return float(stats.binomtest(only_second, n, 0.5, alternative=alternative).pvalue) if n else 1.0


@dataclass(frozen=True)
class PairedComparison:
    """Two policies on the episodes both played (same run, task and evaluation seed)."""

    n: int
    """Pairs: episodes both played."""
    first_wins: int
    second_wins: int
    only_first: int
    """Pairs the first policy won and the second lost."""
    only_second: int
    """Pairs the second policy won and the first lost."""
    p_two_sided: float
    """Exact two-sided sign test on the discordant pairs: is either policy ahead?"""
    p_second_better: float
    """Exact one-sided sign test: does the second policy win more often?"""
    reward_difference: float
    """Mean of second reward - first reward over the pairs."""
    reward_half_width: float
    """Half width of its 95% normal-approximation interval (inf under two pairs)."""
    unpaired_first: int
    """Episodes of the first policy with no partner (left out)."""
    unpaired_second: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compare_paired(first: Outcomes, second: Outcomes) -> PairedComparison:
    """`first` against `second` on the keys both hold. Pairing removes the task-to-task spread that two independent
    intervals carry, so it detects a smaller difference than "non-overlapping intervals" does."""
    common = sorted(set(first) & set(second))
    if not common:
        raise ValueError("no episode (run, task, seed) was played by both policies")
    a = [first[k] for k in common]
    b = [second[k] for k in common]
    only_first = sum(x[0] and not y[0] for x, y in zip(a, b))
    only_second = sum(y[0] and not x[0] for x, y in zip(a, b))
    diff, half = paired_mean_difference([x[1] for x in a], [y[1] for y in b])
    return PairedComparison(
        n=len(common), first_wins=sum(x[0] for x in a), second_wins=sum(y[0] for y in b), only_first=only_first,
        only_second=only_second, p_two_sided=sign_test(only_first, only_second),
        p_second_better=sign_test(only_first, only_second, "greater"), reward_difference=diff,
        reward_half_width=half, unpaired_first=len(first) - len(common), unpaired_second=len(second) - len(common))


def task_scores(runs: Mapping[int, Outcomes]) -> tuple[list[str], np.ndarray]:
    """(task ids, runs x tasks matrix of success rates over each task's evaluation seeds). Every run must have played
    every task: a missing one would turn the stratified bootstrap's strata ragged."""
    tasks = sorted({k[1] for played in runs.values() for k in played})
    scores = np.zeros((len(runs), len(tasks)))
    for i, (run, played) in enumerate(sorted(runs.items())):
        for j, task in enumerate(tasks):
            won = [w for (r, t, _), (w, _) in played.items() if t == task]
            if not won:
                raise ValueError(f"run {run} has no episode of task {task} that every other run played")
            scores[i, j] = sum(won) / len(won)
    return tasks, scores


def iqm(scores: np.ndarray, axis: int = -1) -> Any:
    """Interquartile mean: the mean of the middle 50% of the values (rliable's `aggregate_iqm`)."""
    return stats.trim_mean(scores, proportiontocut=0.25, axis=axis)


def iqm_interval(scores: np.ndarray, *, confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = 0) -> tuple[float, float, float]:
    """(IQM over every (run, task) score of `scores` (runs x tasks), low, high): the percentile interval of a
    stratified bootstrap that resamples runs independently within each task (rliable's `StratifiedBootstrap`).
    With one run there is nothing to resample: the interval is (nan, nan)."""
    point = float(iqm(scores.ravel()))
    if scores.shape[0] < 2:
        return point, float("nan"), float("nan")

    def statistic(*per_task: np.ndarray, axis: int = -1) -> Any:
        return iqm(np.concatenate(per_task, axis=axis), axis=axis)

    res = stats.bootstrap(tuple(scores[:, j] for j in range(scores.shape[1])), statistic, n_resamples=resamples,
                          confidence_level=confidence, method="percentile", vectorized=True,
                          rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
    """P(X > Y) of rliable (`metrics.probability_of_improvement`): for each task, the share of (run of x, run of y)
    pairs in which x scored higher, ties counting half (the Mann-Whitney U statistic over n x m), averaged over the
    tasks. `x`, `y`: (..., tasks, runs) score arrays, runs on the last axis."""
    del axis  # the bootstrap passes it; runs are always the last axis here
    gt = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return (gt + 0.5 * eq).mean(axis=-1)


def improvement_interval(x: np.ndarray, y: np.ndarray, *, confidence: float = 0.95,
                         resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(P(X > Y), low, high) for two methods' runs x tasks score matrices: the percentile interval of a stratified
    bootstrap resampling each method's runs within each task, as rliable does. (nan, nan) interval when either
    method has one run."""
    point = float(probability_of_improvement(x.T, y.T))
    if x.shape[0] < 2 or y.shape[0] < 2:
        return point, float("nan"), float("nan")
    tasks = x.shape[1]

    def statistic(*per_task: np.ndarray, axis: int = -1) -> Any:
        # per_task: x's runs of task 0..T-1, then y's; each (..., runs) -> (..., tasks, runs)
        return probability_of_improvement(np.stack(per_task[:tasks], axis=-2), np.stack(per_task[tasks:], axis=-2))

    res = stats.bootstrap(tuple(x[:, j] for j in range(tasks)) + tuple(y[:, j] for j in range(tasks)), statistic,
                          n_resamples=resamples, confidence_level=confidence, method="percentile", vectorized=True,
                          rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass(frozen=True)
class RunsAggregate:
    """One method run several times, each run evaluated on the same test episodes."""

    runs: list[int]
    """The runs' seeds."""
    per_run: list[float]
    """Success rate of each run, in the order of `runs`."""
    n: int
    """Episodes of every run together."""
    n_success: int
    success_rate: float
    """Success over every run's episodes pooled."""
    ci_low: float
    """Wilson 95% interval of `success_rate`; it treats the episodes as independent, so it does not carry the
    spread between runs (the IQM's interval does)."""
    ci_high: float
    iqm: float
    """Interquartile mean of the per-(run, task) success rates."""
    iqm_low: float
    """95% stratified bootstrap interval of `iqm` (nan with one run)."""
    iqm_high: float
    tasks: int
    """Test tasks: the strata of the bootstrap."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def aggregate_runs(runs: Mapping[int, Outcomes], *, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = 0) -> RunsAggregate:
    """Aggregate one method's runs (run seed -> its episodes), computed on exactly those episodes."""
    if not runs:
        raise ValueError("no run to aggregate")
    order = sorted(runs)
    per_run = [sum(w for w, _ in runs[r].values()) / len(runs[r]) if runs[r] else 0.0 for r in order]
    n = sum(len(runs[r]) for r in order)
    k = sum(w for r in order for w, _ in runs[r].values())
    lo, hi = wilson_interval(k, n)
    tasks, scores = task_scores(runs)
    point, iqm_lo, iqm_hi = iqm_interval(scores, resamples=resamples, seed=seed)
    return RunsAggregate(runs=order, per_run=per_run, n=n, n_success=k, success_rate=k / n if n else 0.0,
                         ci_low=lo, ci_high=hi, iqm=point, iqm_low=iqm_lo, iqm_high=iqm_hi, tasks=len(tasks))
