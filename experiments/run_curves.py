"""Learning curves of finished (or running) training runs side by side, from their `metrics.jsonl` and
`eval.jsonl`: per iteration, the training episodes' success (in the dream for mode=dream, sampled) and each run's
held-out evaluations (greedy, real tasks) with their 95% intervals. Writes one PNG and prints the numbers.

    python experiments/run_curves.py runs/alf-dream13 runs/alf-dream13-nocur --labels full "no curriculum" \
        --start runs/alf-sft10 --out runs/alf-dream13/curriculum_curves.png

Why a script and not `dreamgym table`: the table trains every row itself; this reads runs trained separately
(e.g. two dream runs that differ in one setting) without retraining anything.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dreamgym.utils.metric_names import current_row


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written while we read
            continue
    return rows


def train_curve(run: Path) -> list[tuple[int, float]]:
    """(iteration, training-episode success) from the run loop's per-iteration rows (those with
    `rollout/success_rate`; a run logged before the metric namespaces is read under today's names)."""
    rows = [current_row(r) for r in read_jsonl(run / "metrics.jsonl")]
    return [(int(r["step"]), float(r["rollout/success_rate"])) for r in rows if "rollout/success_rate" in r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--labels", nargs="*", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start", type=Path, default=None,
                    help="the run the others started from: its final held-out evaluation is drawn at iteration 0")
    args = ap.parse_args()
    labels = args.labels or [r.name for r in args.runs]
    if len(labels) != len(args.runs):
        raise SystemExit("--labels: one per run")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for run, label in zip(args.runs, labels):
        curve = train_curve(run)
        evals = read_jsonl(run / "eval.jsonl")
        print(f"{label} ({run}): training success per iteration "
              + ", ".join(f"{s}: {100 * v:.1f}%" for s, v in curve))
        for e in evals:
            print(f"  held-out {e['tag']} at iteration {e['step']}: {e['n_success']} of {e['n']} = "
                  f"{100 * e['success_rate']:.1f}% [{100 * e['ci_low']:.1f}, {100 * e['ci_high']:.1f}]")
        if curve:
            xs, ys = zip(*curve)
            ax1.plot(xs, [100 * y for y in ys], marker="o", label=label)
        if evals:
            xs = [e["step"] for e in evals]
            ys = [100 * e["success_rate"] for e in evals]
            err = [[100 * (e["success_rate"] - e["ci_low"]) for e in evals],
                   [100 * (e["ci_high"] - e["success_rate"]) for e in evals]]
            ax2.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label=label)
    start = [e for e in read_jsonl(args.start / "eval.jsonl") if e["tag"] == "final"][-1:] if args.start else []
    for e in start:
        print(f"start ({args.start}): held-out {e['n_success']} of {e['n']} = {100 * e['success_rate']:.1f}% "
              f"[{100 * e['ci_low']:.1f}, {100 * e['ci_high']:.1f}]")
        ax2.errorbar([0], [100 * e["success_rate"]], yerr=[[100 * (e["success_rate"] - e["ci_low"])],
                     [100 * (e["ci_high"] - e["success_rate"])]], marker="s", color="black", capsize=4, label="start")
    ax1.set(xlabel="iteration", ylabel="training-episode success (%)", title="training episodes (sampled)")
    ax2.set(xlabel="iteration", ylabel="held-out real success (%)", title="held-out real tasks (greedy, 95% CI)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
