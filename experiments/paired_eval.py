"""Compare two policies evaluated on the same tasks and seeds (`dreamgym eval --json`, which writes one row per
episode): each one's success with its 95% interval, the pairs only one of them won, the exact one-sided
sign test that the second wins more often, and the paired mean-reward difference with its 95% interval (what a
graded reward such as WebShop's moves before success does). Pairing removes the task-to-task spread that two
independent intervals carry, so it detects a smaller gain than "non-overlapping intervals" does; both are
reported.

    python experiments/paired_eval.py runs/start-eval.json runs/after-eval.json

Either side may be several files joined by commas (evaluations of one policy on disjoint task ranges, e.g.
games 61-180 and 181-274): their episodes are pooled.
"""

from __future__ import annotations

import argparse
import json

from dreamgym.rl.evaluate import paired_mean_difference, paired_sign_test, two_proportion_z_test, wilson_interval


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", help="eval --json file(s), comma-separated, of the reference policy (e.g. the SFT start)")
    ap.add_argument("second", help="eval --json file(s), comma-separated, of the policy tested for a gain")
    args = ap.parse_args()
    runs = []
    for paths in (args.first, args.second):
        played: dict[tuple[str, int], tuple[bool, float]] = {}  # (task, seed) -> (won, reward)
        for path in paths.split(","):
            for r in json.load(open(path, encoding="utf-8"))["episodes"]:
                key = (r["task"], r["seed"])
                if key in played:
                    raise SystemExit(f"{path}: task {r['task']} seed {r['seed']} is in two of the pooled files")
                played[key] = (bool(r["won"]), float(r["reward"]))
        runs.append(played)
    common = sorted(set(runs[0]) & set(runs[1]))
    if not common:
        raise SystemExit("no (task, seed) pair was played by both policies")
    a, b = ([r[k][0] for k in common] for r in runs)
    n = len(common)
    for name, won in ((args.first, a), (args.second, b)):
        k = sum(won)
        lo, hi = wilson_interval(k, n)
        print(f"{name}: {k} of {n}, {100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]")
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    lo_b = wilson_interval(sum(b), n)[0]
    hi_a = wilson_interval(sum(a), n)[1]
    print(f"pairs won by the first only: {only_a}, by the second only: {only_b}, by both: "
          f"{sum(x and y for x, y in zip(a, b))} (of {n}; {len(runs[0]) - n} / {len(runs[1]) - n} unpaired left out)")
    print(f"one-sided paired sign test p = {paired_sign_test(only_a, only_b):.4f}; "
          f"unpaired two-proportion p = {two_proportion_z_test(sum(a), n, sum(b), n)[1]:.4f}; "
          f"intervals {'do not overlap' if lo_b > hi_a else 'overlap'}")
    ra, rb = ([r[k][1] for k in common] for r in runs)
    diff, half = paired_mean_difference(ra, rb)
    print(f"mean reward {sum(ra) / n:.3f} -> {sum(rb) / n:.3f}; paired difference {diff:+.3f} +- {half:.3f} (95%)")


if __name__ == "__main__":
    main()
