"""What MiniWoB++'s state hooks add to a synthetic step: microseconds per step of `ground_state` (the typed text, the
clicked box) and of the reward rule `grounded_outcome` with and without the episode's history (the password read from
its fills), over the recorded steps of a `dreamgym collect` file, best of `--repeats` passes. A synthetic step of the
tiny experience model takes ~455 ms (bench_synthetic.py), so these are its share. No browser, no model.

    python benchmarks/bench_miniwob_rules.py runs/mw-all/offline.jsonl [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from dreamgym.data import load_trajectories
from dreamgym.envs.web.miniwob import ground_state, grounded_outcome


def per_step_us(fn: Callable[..., Any], steps: list[tuple[Any, ...]], repeats: int) -> float:
    """The best of `repeats` passes of `fn` over `steps`, in microseconds per step."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for args in steps:
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / len(steps))
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a `dreamgym collect` output of MiniWoB++ episodes")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    steps = [(traj.task, st.state, st.action, st.next_state, traj.history(i))
             for traj in load_trajectories(args.data) for i, st in enumerate(traj.steps)]
    if not steps:
        raise SystemExit(f"{args.data}: no steps")
    rows = {"ground_state": lambda t, s, a, n, h: ground_state(t, s, a, n),
            "grounded_outcome without history": lambda t, s, a, n, h: grounded_outcome(t, s, a, n),
            "grounded_outcome with history": grounded_outcome}
    print(f"{len(steps)} recorded steps, best of {args.repeats} passes")
    for name, fn in rows.items():
        print(f"{name}: {per_step_us(fn, steps, args.repeats):.1f} us per step")


if __name__ == "__main__":
    main()
