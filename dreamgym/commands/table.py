"""`dreamgym table`: the shape of the paper's Table 1 (and its ablations) at a scale 2 CPU cores can run.

Owns: `TableConfig` (the recipe's shared fields, `dreamgym.commands.recipe.RecipeConfig`, and the table's own:
experience-model epochs, S2R iterations, evaluation period, rows), the list of rows and how each is
trained (through `dreamgym.commands.recipe.Recipe`, which reads back rows an interrupted run finished), `results.md`
and the PNG learning curves; with several seeds, one table per seed and the report over seeds
(`dreamgym.commands.seeds`).
Must not know: trainer or experience-model internals, concrete environments.

Rows (every RL row starts from the same SFT policy; every evaluation is at `eval_temperature` on the same held-out
real tasks):
SFT; DPO; GRPO real and PPO real with a real-step budget B; DreamGym GRPO and PPO (0 real steps beyond the
offline data); DreamGym-S2R GRPO and PPO (the dream policy continued in the real environment with B/16 real
steps); ablations of DreamGym GRPO: no replay (retrieval off at inference, the same experience model), no
reasoning (an experience model trained and run without traces), no curriculum (task generation off). With
`dream_guard` on, every DreamGym row's dream is guarded (`dreamgym.dream.guard`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.config import CommandParser, ConfigError, default_of, describe, fail, load_config, ranged
from dreamgym.curriculum.generator import CurriculumConfig
from dreamgym.dream.world import DreamConfig
from dreamgym.utils.paths import atomic_write_text
from dreamgym.commands.recipe import Recipe, RecipeConfig
from dreamgym.commands.seeds import SeedRunError, add_seeds_options, run_seeds, seeds_overrides, write_seeds_report

S2R_SHARE = 16
"""The S2R rows of the table get B / S2R_SHARE real steps (B: `budget`)."""


@dataclass
class TableConfig(RecipeConfig):
    """`dreamgym table`: every row of the table on one environment (the shared recipe fields, with the quickstart's
    defaults, in `RecipeConfig`; configs/*/table*.yaml set the table's scale)."""

    budget: int = ranged(default_of(RecipeConfig, "budget"), ge=S2R_SHARE)
    """B: the real-step budget of the real RL rows; the S2R rows get B/16 (fewer than 16 would give them none)."""
    em_epochs: float = ranged(3, gt=0)
    """Experience-model SFT epochs."""
    s2r_iterations: int = ranged(5, ge=1)
    """Most real iterations of the S2R rows (B/16 usually ends them first)."""
    eval_every: int = ranged(5, ge=0)
    """Evaluate every this many iterations for the learning curves (0: only at the end)."""
    rows: list[str] = field(default_factory=list)
    """Subset of rows to run (empty: all), by name as printed in the table."""

    def validate(self) -> None:
        super().validate()
        unknown = [r for r in self.rows if r not in ALL_ROWS]
        if unknown:
            raise ConfigError("rows", f"unknown {unknown}", ", ".join(ALL_ROWS))


ALL_ROWS = ["SFT", "DPO", "GRPO real", "PPO real", "DreamGym GRPO", "DreamGym-S2R GRPO", "DreamGym PPO",
            "DreamGym-S2R PPO", "DreamGym GRPO (no replay)", "DreamGym GRPO (no reasoning)",
            "DreamGym GRPO (no curriculum)"]


def plot_curves(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    # An S2R row's curve starts with its dream parent's: drawn first and dashed, it does not hide the parent's.
    for name, r in sorted(results.items(), key=lambda kv: "S2R" not in kv[0]):
        if r.get("curve"):
            xs, ys = zip(*r["curve"])
            ax.plot(xs, [100 * y for y in ys], marker="o", label=name, linestyle="--" if "S2R" in name else "-")
    ax.set_xlabel("iteration")
    ax.set_ylabel("success on held-out real tasks (%)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_table(t: TableConfig, progress: bool = True) -> dict[str, Any]:
    """The table: one run in `t.run_dir` (at `t.seed`, or at the one seed `t.seeds` holds), or with several
    `t.seeds` one table per seed (`run_table_seeds`). Rows that finished in an earlier run with the same settings
    are read back, not run again. Returns the rows' records and episodes, the wall time and the machine record."""
    t = dataclasses.replace(t, run_dir=t.run_dir or f"runs/table-{t.env}")
    if len(t.seeds) > 1:
        return run_table_seeds(t, progress)
    if t.seeds:
        t = dataclasses.replace(t, seed=t.seeds[0], seeds=[])
    rows = t.rows or ALL_ROWS
    t0 = time.time()
    r = Recipe(t.env, t.run_dir, seed=t.seed, eval_tasks=t.eval_tasks,
               eval_seeds=t.eval_seeds, eval_temperature=t.eval_temperature, progress=progress,
               train_overrides=t.train_overrides, em_overrides=t.em_overrides, threads=t.threads)
    r.collect_offline(t.offline_episodes, t.offline_mix, t.sft_policy)
    # The experience model is the costly artefact on CPU: trained only when a row dreams.
    em = r.experience_model("em", epochs=t.em_epochs) if any("DreamGym" in row for row in rows) else None
    r.sft(epochs=t.sft_epochs, stop_at=t.sft_stop_at or None, check_every=t.sft_check_every)
    common: dict[str, Any] = dict(tasks_per_iteration=t.tasks_per_iteration, group_size=t.group_size, lr=t.lr,
                                  eval_every=t.eval_every)
    s2r_budget = t.budget // S2R_SHARE
    if "DPO" in rows:
        r.dpo()
    algos: tuple[Literal["grpo", "ppo"], ...] = ("grpo", "ppo")
    for algo in algos:
        A = algo.upper()
        if f"{A} real" in rows:
            r.run_method(f"{A} real", algo=algo, mode="real", budget=t.budget, real_iterations=t.real_iterations,
                         **common)
        if f"DreamGym {A}" in rows or f"DreamGym-S2R {A}" in rows:
            r.run_method(f"DreamGym {A}", algo=algo, mode="dream", em=em, dream=t.dream(),
                         dream_iterations=t.dream_iterations, **common)
        if f"DreamGym-S2R {A}" in rows:
            r.run_method(f"DreamGym-S2R {A}", algo=algo, mode="s2r", from_method=f"DreamGym {A}", budget=s2r_budget,
                         real_iterations=t.s2r_iterations, **common)
    ablations = {
        "DreamGym GRPO (no replay)": (em, DreamConfig(em_overrides=["use_retrieval=false"])),
        "DreamGym GRPO (no curriculum)": (em, DreamConfig(curriculum=CurriculumConfig(enabled=False))),
    }
    if "DreamGym GRPO (no reasoning)" in rows:
        ablations["DreamGym GRPO (no reasoning)"] = (
            r.experience_model("em-no-reasoning", epochs=t.em_epochs, adjust=lambda c: dataclasses.replace(
                c, em=dataclasses.replace(c.em, use_reasoning=False))),
            DreamConfig())
    for name, (em_dir, dcfg) in ablations.items():
        if name in rows:
            r.run_method(name, algo="grpo", mode="dream", em=em_dir, dream=t.dream(dcfg),
                         dream_iterations=t.dream_iterations, **common)
    wall = time.time() - t0
    curves = r.run / "learning_curves.png"
    plot_curves(r.results, curves, f"{t.env}: success on held-out real tasks")
    note = (f"\nB = {t.budget} real steps (S2R: {s2r_budget}); {len(r.test_tasks)} held-out test tasks x "
            f"{len(t.eval_seeds)} seeds at temperature {t.eval_temperature:g}; tiny preset; "
            f"offline real transitions: {r.real_offline}; total wall time {wall:.0f} s{r.resumed_note()}. Learning "
            f"curves: {curves.name}.\n")
    report = r.write_report(f"DreamGym results — {t.env}", note)
    atomic_write_text(r.run / "results.md", report)
    print("\n" + report)
    return {"results": r.results, "episodes": r.episodes, "wall_time_s": wall, "machine": r.machine}


def run_table_seeds(t: TableConfig, progress: bool = True) -> dict[str, Any]:
    """The table once per seed of `t.seeds`, each a whole one-seed table in `<run_dir>/seed-<s>/` (its learning
    curves there), `t.workers` at a time; then the report over seeds at `t.run_dir` (report.md, its copy results.md,
    summary.json)."""
    t0 = time.time()
    per_seed = run_seeds(run_table, t, seeds=t.seeds, run_dir=t.run_dir, workers=t.workers, progress=progress)
    wall = time.time() - t0
    # A resumed table reads finished rows back: their own wall times (kept in each row's record) say what the
    # table cost, this invocation's wall time only what was left.
    rows_wall = sum(rec.get("wall_time_s", 0.0) for s in t.seeds for rec in per_seed[s]["results"].values())
    note = (f"\nB = {t.budget} real steps (S2R: {t.budget // S2R_SHARE}); {len(t.eval_seeds)} evaluation seeds per "
            f"test task at temperature {t.eval_temperature:g}; tiny preset; wall time of this run {wall:.0f} s, "
            f"the rows' own wall times summed over the seeds {rows_wall:.0f} s. Learning curves: "
            "seed-<s>/learning_curves.png.\n")
    report = write_seeds_report(t.run_dir, f"DreamGym results — {t.env}, seeds {', '.join(map(str, t.seeds))}",
                                t.env, per_seed, note, workers=t.workers)
    atomic_write_text(Path(t.run_dir) / "results.md", report)
    print("\n" + report)
    return {"per_seed": per_seed, "wall_time_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="dreamgym table", description=__doc__.split("\n\n")[0],
                           epilog="Config fields (key=value):\n" + describe(TableConfig),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=None, help="environment family")
    parser.add_argument("--config", default=None, help="YAML file with TableConfig fields")
    parser.add_argument("--no-progress", action="store_true")
    add_seeds_options(parser)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args(argv)
    if args.no_progress:
        from dreamgym.utils.quiet import quiet_progress_bars

        quiet_progress_bars()  # other libraries' bars too
    try:
        t = load_config(TableConfig, args.config,
                        args.overrides + ([f"env={args.env}"] if args.env else []) + seeds_overrides(args))
    except ConfigError as e:
        return fail("table", e)
    try:
        run_table(t, progress=not args.no_progress)
    except SeedRunError as e:
        return fail("table", e)
    return 0
