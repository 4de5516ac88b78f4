"""Compare two policies evaluated on the same tasks and seeds (`dreamgym eval --json`, which writes one row per
episode): each one's success with its 95% interval, the pairs only one of them won, the exact one-sided
sign test that the second wins more often, and the paired mean-reward difference with its 95% interval (what a
graded reward such as WebShop's moves before success does). Pairing removes the task-to-task spread that two
independent intervals carry, so it detects a smaller gain than "non-overlapping intervals" does; both are
reported.

    python experiments/paired_eval.py runs/start-eval.json runs/after-eval.json
    python experiments/paired_eval.py runs/sft/eval.jsonl runs/dream/eval.jsonl
    python experiments/paired_eval.py runs/sft/eval.jsonl runs/dream-s0/eval.jsonl runs/dream-s1/eval.jsonl ...  # pooled

A run's `eval.jsonl` (`dreamgym train`) stands for its last evaluation, the policy it ended with; its rows carry
their episodes since 2026-12-07 (older rows have none and are refused, naming the file).

Episodes ended by an environment failure (`failed`) are left out, as `dreamgym eval` leaves them out of n. The
pairing and the tests are `dreamgym.rl.compare`'s, which the reports over seeds (`--seeds`) use too.

Either side may be several files joined by commas (evaluations of one policy on disjoint task ranges, e.g.
games 61-180 and 181-274): their episodes are pooled.
"""

from __future__ import annotations

import argparse
import json

from dreamgym.data import iter_jsonl_records
from dreamgym.rl.compare import Outcomes, PairedComparison, compare_paired, outcomes, sign_test
from dreamgym.rl.evaluate import two_proportion_z_test, wilson_interval


def episodes_of(path: str) -> list[dict]:
    """The episode records of an `eval --json` file, or of the last evaluation in a run's eval.jsonl."""
    if path.endswith(".jsonl"):
        rows = [rec for _, rec in iter_jsonl_records(path, skip_torn_tail=True)]
        if not rows:
            raise SystemExit(f"{path}: no evaluation in it")
        if "episodes" not in rows[-1]:
            raise SystemExit(f"{path}: its last evaluation ({rows[-1].get('tag')!r}) has no per-episode records "
                             "(written before eval.jsonl kept them); evaluate the policy with `dreamgym eval --json`")
        return rows[-1]["episodes"]
    return json.load(open(path, encoding="utf-8"))["episodes"]


def played(paths: str) -> Outcomes:
    """The episodes of one policy: its eval files (comma-separated), pooled; an episode (task, seed) in two of them,
    or a file that is not an evaluation, ends the script naming the file."""
    out: Outcomes = {}
    for path in paths.split(","):
        try:
            more = outcomes(episodes_of(path), where=path)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        if set(more) & set(out):
            raise SystemExit(f"{path}: an episode (task, seed) of it is in another of the pooled files")
        out.update(more)
    return out


def paired(first: Outcomes, second: Outcomes) -> PairedComparison:
    try:
        return compare_paired(first, second)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def pooled(first: str, seconds: list[str]) -> None:
    """Each run of `seconds` against `first` on the same episodes (a line each), then their pairs pooled: the sign
    test on all the pairs only one side won, one-sided for the runs and two-sided."""
    ref = played(first)
    only_first = only_second = 0
    for path in seconds:
        c = paired(ref, played(path))
        only_first, only_second = only_first + c.only_first, only_second + c.only_second
        print(f"{path}: {c.second_wins} of {c.n} ({100 * c.second_wins / c.n:.1f}%) against {c.first_wins}; pairs "
              f"won by the first only {c.only_first}, by it only {c.only_second}; one-sided p = {c.p_second_better:.4f}")
    print(f"pooled over {len(seconds)} runs: pairs won by the first only {only_first}, by the runs only {only_second}; "
          f"one-sided p = {sign_test(only_first, only_second, 'greater'):.4f}, two-sided p = "
          f"{sign_test(only_first, only_second):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("first", help="eval --json file(s), comma-separated, of the reference policy (e.g. the SFT start)")
    ap.add_argument("second", help="eval --json file(s), comma-separated, of the policy tested for a gain")
    ap.add_argument("more", nargs="*", help="more runs of that policy (other seeds), each compared with the first "
                                            "on the same episodes, then the pairs pooled over all of them")
    args = ap.parse_args()
    if args.more:
        pooled(args.first, [args.second, *args.more])
        return
    runs = [played(args.first), played(args.second)]
    c = paired(runs[0], runs[1])
    n = c.n
    for name, k in ((args.first, c.first_wins), (args.second, c.second_wins)):
        lo, hi = wilson_interval(k, n)
        print(f"{name}: {k} of {n}, {100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]")
    lo_b = wilson_interval(c.second_wins, n)[0]
    hi_a = wilson_interval(c.first_wins, n)[1]
    print(f"pairs won by the first only: {c.only_first}, by the second only: {c.only_second}, by both: "
          f"{c.first_wins - c.only_first} (of {n}; {c.unpaired_first} / {c.unpaired_second} unpaired left out)")
    print(f"one-sided paired sign test p = {c.p_second_better:.4f}; "
          f"unpaired two-proportion p = {two_proportion_z_test(c.first_wins, n, c.second_wins, n)[1]:.4f}; "
          f"intervals {'do not overlap' if lo_b > hi_a else 'overlap'}")
    mean_first = sum(runs[0][k][1] for k in set(runs[0]) & set(runs[1])) / n
    print(f"mean reward {mean_first:.3f} -> {mean_first + c.reward_difference:.3f}; paired difference "
          f"{c.reward_difference:+.3f} +- {c.reward_half_width:.3f} (95%)")


if __name__ == "__main__":
    main()
