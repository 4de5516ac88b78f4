"""Several seeds of a recipe (`dreamgym quickstart --seeds`, `dreamgym table --seeds`): each seed is a whole run of
the recipe in `<run_dir>/seed-<s>/` (its own report.md and summary.json, exactly as a one-seed run writes them),
`workers` of them at a time, each in its own process; then the report over seeds at `<run_dir>/report.md` and
`<run_dir>/summary.json`.

Owns: the `--seeds` / `--workers` options (`add_seeds_options`, `seeds_overrides`: the command-line form of the
`seeds` and `workers` fields), `check_seeds` (the seeds and workers rules, at start-up), `run_seeds` (the per-seed
runs, in processes), `aggregate_seeds` (per row: success over every seed's episodes, the IQM over seeds with its
stratified bootstrap interval, paired comparisons with the reference rows on the same test episodes and the
probability of improvement over them), `render_seeds_report`, `row_findings` (the sentences under a table, derived
from its figures) and `write_seeds_report`.
Must not know: how a row is trained (a seed's run is the recipe's own function, given), trainers, environments.
The statistics are `dreamgym.rl.compare`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from dreamgym.utils.metrics import resolve_threads
from dreamgym.config import ConfigError
from dreamgym.rl.compare import (BOOTSTRAP_RESAMPLES, Outcomes, aggregate_runs, compare_paired, improvement_interval,
                                 outcomes, task_scores)
from dreamgym.utils.metrics import describe_machine
from dreamgym.utils.paths import atomic_write_text

REFERENCE_ROWS = ("SFT", "GRPO real")
"""The rows every other row is compared with, episode by episode: the start every RL row begins from, and RL in the
real environment."""


def check_seeds(seeds: Sequence[int], workers: int, threads: int) -> None:
    """The rules of `seeds` and `workers`: no seed twice, and no more threads at a time (`workers` x `threads`) than
    the cores this process may use: beyond that the runs only take turns on the cores, and their wall times (part of
    the report) measure the crowding."""
    dup = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if dup:
        raise ConfigError("seeds", f"seed {dup[0]} is listed twice")
    try:  # threads=0 is every command's rule (OMP_NUM_THREADS, else torch's count): what each run will use
        threads = resolve_threads(threads)
    except ValueError as e:
        raise ConfigError("threads", str(e)) from e
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    at_once = min(workers, max(len(seeds), 1))
    if len(seeds) > 1 and at_once * threads > cores:
        raise ConfigError("workers", f"{at_once} runs at a time x threads={threads} needs {at_once * threads} cores "
                                     f"and this process may use {cores}", f"workers <= {max(cores // threads, 1)}")


def seed_dir(run_dir: str | Path, seed: int) -> Path:
    """Where seed `seed`'s run of a several-seed recipe goes."""
    return Path(run_dir) / f"seed-{seed}"


def _run_seed(run_one: Callable[[Any, bool], dict[str, Any]], cfg: Any, progress: bool,
              log: str | None) -> dict[str, Any]:
    """One seed's run, in a process of its own; with `log`, its output goes to that file (several seeds at once
    would otherwise interleave their lines)."""
    if log is not None:
        out = open(log, "a", buffering=1, encoding="utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)  # file descriptors, so the libraries' own writes land there too
        os.dup2(out.fileno(), 2)
        for stream in (sys.stdout, sys.stderr):  # a line at a time: a killed run's log ends where it died
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(line_buffering=True)
    if not progress:
        # A spawned process starts with the libraries' bars on: the parent's `quiet_progress_bars` is a setting of
        # its own imported modules, not something a child inherits.
        from dreamgym.utils.quiet import quiet_progress_bars

        quiet_progress_bars()
    return run_one(cfg, progress)


def _in_own_process(run_one: Callable[[Any, bool], dict[str, Any]], cfg: Any, progress: bool,
                    log: str | None) -> dict[str, Any]:
    """`_run_seed` in a fresh spawned process; a process that dies raises `BrokenProcessPool` here."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as one:
        return one.submit(_run_seed, run_one, cfg, progress, log).result()


class SeedRunError(RuntimeError):
    """A seed's run failed or its process died; the message names the seed and what to do."""


def run_seeds(run_one: Callable[[Any, bool], dict[str, Any]], cfg: Any, *, seeds: Sequence[int],
              run_dir: str | Path, workers: int, progress: bool) -> dict[int, dict[str, Any]]:
    """Run `run_one(cfg at seed s, progress)` for every seed: `cfg` (a config with `seed`, `seeds`, `workers` and
    `run_dir` fields) with that seed and `seed_dir(run_dir, s)`, `workers` at a time, each in a fresh process
    (spawned: a seed's figures do not depend on what ran before it in the same process, nor on `workers`). With more
    than one worker a seed's output goes to its folder's log.txt. Returns what each run returned, by seed."""
    configs = {s: dataclasses.replace(cfg, seed=s, seeds=[], workers=1, run_dir=str(seed_dir(run_dir, s)))
               for s in seeds}
    logs = {s: seed_dir(run_dir, s) / "log.txt" for s in seeds}
    for s in seeds:
        seed_dir(run_dir, s).mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    parallel = workers > 1
    # A thread per seed run at a time, each waiting on a process of its own (not a pool of reused processes: a
    # seed's run must not see what another left behind in its process). Once a run fails no other one starts: the
    # thread that saw it says so before it can take the next seed.
    stop = threading.Event()

    def one(cfg: Any, log: str | None) -> dict[str, Any] | None:
        if stop.is_set():
            return None
        try:
            return _in_own_process(run_one, cfg, progress and not parallel, log)
        except BaseException:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {s: pool.submit(one, cfg, str(logs[s]) if parallel else None) for s, cfg in configs.items()}
        for s, fut in futures.items():
            try:
                got = fut.result()
            except BrokenProcessPool:
                raise SeedRunError(
                    f"seed {s}: a run's process died (killed, or out of memory); run the same command again: "
                    "rows that finished are read back from disk, not run again") from None
            except Exception as e:  # the seed's own error, said in one line; its log has the traceback
                where = f" (log: {logs[s]})" if parallel else ""
                raise SeedRunError(f"seed {s}: {type(e).__name__}: {e}{where}") from e
            if got is None:  # not started after an earlier seed's run failed (that one raised above)
                raise SeedRunError(f"seed {s}: not run, another seed's run failed first")
            results[s] = got
            if parallel:
                print(f"seed {s} finished: {Path(logs[s]).parent / 'report.md'}", flush=True)
    return results


def _pooled(per_seed: dict[int, dict[str, Any]], row: str) -> dict[int, Outcomes]:
    return {s: outcomes(run["episodes"][row], run=s, where=f"seed {s}, {row}") for s, run in per_seed.items()}


def aggregate_seeds(per_seed: dict[int, dict[str, Any]], *,
                    resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, dict[str, Any]]:
    """Per row, over the seeds (`per_seed[s]` is a seed run's {"results": row -> record, "episodes": row -> the
    evaluation's episode records}): real steps, wall times and success per seed, the aggregate of
    `dreamgym.rl.compare.aggregate_runs` and, for each reference row, the paired comparison on the episodes both
    played (same seed, task and evaluation seed: a row is paired with its own seed's SFT start)."""
    seeds = sorted(per_seed)
    rows = list(per_seed[seeds[0]]["results"])
    for s in seeds:
        missing = [r for r in rows if r not in per_seed[s]["results"]]
        if missing:
            raise ValueError(f"seed {s} has no row {missing[0]!r}")
    played = {row: _pooled(per_seed, row) for row in rows}
    scores = {row: task_scores(played[row]) for row in rows}
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        agg = aggregate_runs(played[row], resamples=resamples)
        vs = {}
        for ref in REFERENCE_ROWS:
            if ref in played and ref != row:
                first = {k: v for runs in played[ref].values() for k, v in runs.items()}
                second = {k: v for runs in played[row].values() for k, v in runs.items()}
                vs[ref] = compare_paired(first, second).to_dict()
                if scores[ref][0] == scores[row][0]:  # the same test tasks: the strata of the bootstrap
                    p, lo, hi = improvement_interval(scores[row][1], scores[ref][1], resamples=resamples)
                    vs[ref] |= {"probability_of_improvement": p, "poi_low": lo, "poi_high": hi}
        out[row] = {**agg.to_dict(), "real_steps": [per_seed[s]["results"][row].get("real_steps", 0) for s in seeds],
                    "wall_time_s": [per_seed[s]["results"][row].get("wall_time_s", 0.0) for s in seeds],
                    "vs": vs}
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 0.001 else "<0.001"


def render_seeds_report(title: str, per_seed: dict[int, dict[str, Any]], agg: dict[str, dict[str, Any]]) -> str:
    """Two Markdown tables: each row's success % [95% CI] per seed, then the aggregates over seeds."""
    seeds = sorted(per_seed)
    lines = [f"### {title}", "", "Per seed: success % [95% CI] (real steps in RL).", "",
             "| method | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|" + "---|" * len(seeds)]
    for row in agg:
        cells = []
        for s in seeds:
            r = per_seed[s]["results"][row]
            cells.append(f"{_pct(r['success_rate'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] "
                         f"({r.get('real_steps', 0)})")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    refs = [ref for ref in REFERENCE_ROWS if ref in agg]
    lines += ["", f"Over the {len(seeds)} seeds.", "",
              "| method | real steps in RL (per seed) | success % over all episodes [95% CI] (won/n) "
              "| IQM % [95% CI] | "
              + " | ".join(f"vs {ref}: only it / only {ref} (p); P(it > {ref}) [95% CI]" for ref in refs)
              + " | wall time (s, per seed) |",
              "|---|---|---|---|" + "---|" * len(refs) + "---|"]
    for row, a in agg.items():
        vs = []
        for ref in refs:
            c = a["vs"].get(ref)
            poi = (f"; {c['probability_of_improvement']:.2f} [{c['poi_low']:.2f}, {c['poi_high']:.2f}]"
                   if c and "probability_of_improvement" in c else "")
            vs.append(f"{c['only_second']} / {c['only_first']} ({_p(c['p_two_sided'])}){poi}" if c else "")
        lines.append(f"| {row} | {' / '.join(str(x) for x in a['real_steps'])} | "
                     f"{_pct(a['success_rate'])} [{_pct(a['ci_low'])}, {_pct(a['ci_high'])}] "
                     f"({a['n_success']}/{a['n']}) | {_pct(a['iqm'])} [{_pct(a['iqm_low'])}, {_pct(a['iqm_high'])}] | "
                     + " | ".join(vs) + f" | {' / '.join(f'{w:.0f}' for w in a['wall_time_s'])} |")
    return "\n".join(lines) + "\n"


def method_note(seeds: Sequence[int], tasks: int, agg: dict[str, dict[str, Any]]) -> str:
    """How the report over seeds was computed: what a reader needs to judge its intervals and tests."""
    tests = sum(len(a["vs"]) for a in agg.values())
    return (f"\nEach seed is a whole run of the recipe in seed-<s>/ (its own offline data, experience model and SFT "
            f"start; its report.md there): the SFT start is per seed, and every row is paired with its own seed's "
            f"SFT start. Success over all episodes: every seed's episodes pooled, Wilson 95% interval (it treats the "
            f"episodes as independent, so it leaves out the spread between seeds). IQM: interquartile mean of the "
            f"per-(seed, task) success rates over {len(seeds)} seeds x {tasks} test tasks, with the 95% percentile "
            f"interval of a stratified bootstrap (seeds resampled within each task, 2,000 resamples; Agarwal et al. "
            f"2021). vs a reference row: episodes paired by (seed, task, evaluation seed); the pairs only this row won "
            f"/ only the reference won, and the exact two-sided sign test on them (scipy.stats.binomtest); {tests} "
            f"comparisons, p-values not corrected for their number. P(it > reference): the probability of "
            f"improvement of rliable (per task, the share of (seed, seed) pairs in which this row scored higher, ties "
            f"half, averaged over tasks), with its stratified bootstrap interval; unpaired, it compares the seeds' "
            f"runs, not the episodes.\n")


def row_findings(reference: str, results: dict[str, dict[str, Any]] | None = None,
                 agg: dict[str, dict[str, Any]] | None = None) -> str:
    """Sentences that say, for every row, where it landed against `reference` (the SFT start), computed from the
    figures above them: one run's `results`, or the aggregates over seeds `agg`. Nothing in them is typed by hand,
    so they cannot contradict the table."""
    lines = []
    if agg is not None and reference in agg:
        ref = agg[reference]
        for row, a in agg.items():
            if row == reference:
                continue
            diffs = [x - y for x, y in zip(a["per_run"], ref["per_run"])]
            above = sum(d > 0 for d in diffs)
            c = a["vs"].get(reference)
            paired = (f"; paired on the same episodes, {c['only_second']} only it won and {c['only_first']} only "
                      f"{reference} won (sign test p = {_p(c['p_two_sided'])})") if c else ""
            lines.append(f"- {row}: above {reference} in {above} of {len(diffs)} seeds "
                         f"({', '.join(f'{100 * d:+.1f}' for d in diffs)} points){paired}.")
    elif results is not None and reference in results:
        ref_r = results[reference]
        for row, r in results.items():
            if row == reference:
                continue
            d = r["success_rate"] - ref_r["success_rate"]
            apart = r["ci_low"] > ref_r["ci_high"] or r["ci_high"] < ref_r["ci_low"]
            lines.append(f"- {row}: {100 * d:+.1f} points from {reference}, intervals "
                         f"{'apart' if apart else 'overlapping (not separated)'}.")
    return ("\nIn this run (derived from the table):\n" + "\n".join(lines) + "\n") if lines else ""


def write_seeds_report(run_dir: str | Path, title: str, env: str, per_seed: dict[int, dict[str, Any]],
                       extra: str = "", *, workers: int = 1) -> str:
    """report.md (the per-seed and over-seeds tables, how they were computed, the derived findings, `extra`, the
    machine) and summary.json (per seed: every row's record; over seeds: the aggregates and comparisons) at
    `run_dir`. Returns the report."""
    t0 = time.time()
    seeds = sorted(per_seed)
    agg = aggregate_seeds(per_seed)
    tasks = next(iter(agg.values()))["tasks"] if agg else 0
    machine = per_seed[seeds[0]].get("machine", {})
    at_once = f"; {min(workers, len(seeds))} seed runs at a time" if workers > 1 else ""
    report = (render_seeds_report(title, per_seed, agg) + method_note(seeds, tasks, agg)
              + row_findings("SFT", agg=agg) + extra
              + (f"\nMachine (seed {seeds[0]}'s run): {describe_machine(machine)}{at_once}.\n" if machine else ""))
    atomic_write_text(Path(run_dir) / "report.md", report)
    atomic_write_text(Path(run_dir) / "summary.json", json.dumps(
        {"env": env, "seeds": seeds, "sft_start": "per seed", "reference_rows": list(REFERENCE_ROWS),
         "per_seed": {str(s): {k: v for k, v in per_seed[s].items() if k != "episodes"} for s in seeds},
         "over_seeds": agg, "seed_dirs": {str(s): str(seed_dir(run_dir, s)) for s in seeds},
         "workers": workers, "aggregate_time_s": time.time() - t0}, indent=1))
    return report


def add_seeds_options(parser: argparse.ArgumentParser) -> None:
    """`--seeds` and `--workers`, the command-line form of the `seeds` and `workers` fields (quickstart, table)."""
    parser.add_argument("--seeds", default=None,
                        help="comma-separated seeds: every row once per seed, in run_dir/seed-<s>/, and the report "
                             "over seeds in run_dir (the `seeds` field)")
    parser.add_argument("--workers", default=None, help="seeds run at a time, each in its own process (`workers`)")


def seeds_overrides(args: argparse.Namespace) -> list[str]:
    """`--seeds` / `--workers` as overrides of the config's fields, so their values are checked like any other."""
    out = []
    if args.seeds is not None:
        out.append(f"seeds=[{args.seeds}]")
    if args.workers is not None:
        out.append(f"workers={args.workers}")
    return out
