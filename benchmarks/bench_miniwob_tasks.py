"""MiniWoB++ success per task of the scripted policies, on any set of the tasks the `miniwob` package ships.

    python benchmarks/bench_miniwob_tasks.py [--tasks all] [--seeds 3] [--policies oracle,random] [--browsers 2]
                                             [--max-steps 10] [--json runs/mw/tasks.json]

Each task of `--tasks` (a choice as the split takes it: `all`, `default`, or comma-separated names) is played at
its first `--seeds` held-out test seeds (the `test:<tasks>` split) by each policy, one episode per (task, seed,
policy), with `dreamgym.commands.collect.run_episode`, as `dreamgym collect` plays them. `--browsers` environments play in
parallel, one browser each. A task the oracle has no rule for is not played by the oracle (nor the noisy oracle):
its row says "no rule", which is what a collection would report as a failed episode. An episode that fails (a page
that breaks, a browser that hangs) is counted apart with its reason. Prints a Markdown table (task, then wins/
episodes per policy) and the totals; `--json` keeps every episode's outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="all", help="all, default, or comma-separated task names (default: all)")
    ap.add_argument("--seeds", type=int, default=3, help="held-out seeds per task (default: 3)")
    ap.add_argument("--policies", default="oracle,random", help="comma-separated (default: oracle,random)")
    ap.add_argument("--browsers", type=int, default=2, help="environments playing in parallel (default: 2)")
    ap.add_argument("--max-steps", type=int, default=10, help="the environment's step limit (default: 10)")
    ap.add_argument("--json", default=None, help="write every episode's outcome here")
    args = ap.parse_args(argv)

    from dreamgym.commands.collect import EpisodeFailed, run_episode
    from dreamgym.envs import family
    from dreamgym.envs.web.browser import BrowserPool
    from dreamgym.envs.web.miniwob_policies import ORACLE_TASKS

    fam = family("miniwob")
    split = f"test:{args.tasks}"
    t0 = time.perf_counter()
    try:
        tasks = fam.tasks(split, n_seeds=args.seeds)
    except ValueError as e:
        print(f"bench_miniwob_tasks: {e}", file=sys.stderr)
        return 2
    print(f"{len(tasks)} tasks read in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    oracle_based = {"oracle", "expert", "noisy"}
    jobs = [(task, p) for task in tasks for p in policies
            if p not in oracle_based or task.goal["subdomain"] in ORACLE_TASKS]
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    with BrowserPool(args.browsers) as pool:
        # One environment (one browser) per player; a job takes a free one and gives it back.
        free: queue.Queue[Any] = queue.Queue()
        envs = [fam.make_env(split, pool=pool, n_seeds=args.seeds, max_steps=args.max_steps)
                for _ in range(args.browsers)]
        for env in envs:
            free.put(env)

        def play(job: tuple[Any, str]) -> None:
            task, pname = job
            row: dict[str, Any] = {"task": task.goal["subdomain"], "seed": task.goal["seed"], "policy": pname}
            env = free.get()
            try:
                traj = run_episode(env, fam.POLICIES[pname](task.goal["seed"]), task.goal["seed"], task=task,
                                   policy_name=pname)
                row.update(won=traj.won, steps=len(traj.steps))
            except EpisodeFailed as e:
                row.update(won=False, failed=str(e))
            finally:
                free.put(env)
            with lock:
                rows.append(row)
                print(f"[{len(rows)}/{len(jobs)}] {row['task']} {pname}: "
                      f"{'failed' if 'failed' in row else 'won' if row['won'] else 'lost'}", file=sys.stderr)

        with ThreadPoolExecutor(args.browsers) as ex:
            list(ex.map(play, jobs))
        for env in envs:
            env.close()
    wall = time.perf_counter() - t0

    per: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        per[r["task"]][r["policy"]].append(r)
    names = sorted({t.goal["subdomain"] for t in tasks})
    print(f"| task | {' | '.join(policies)} |\n|---|{'---|' * len(policies)}")
    totals = {p: [0, 0, 0] for p in policies}  # won, played, failed
    for name in names:
        cells = []
        for p in policies:
            eps = per[name][p]
            if not eps:
                cells.append("no rule")
                continue
            won, failed = sum(r["won"] for r in eps), sum("failed" in r for r in eps)
            totals[p][0] += won
            totals[p][1] += len(eps)
            totals[p][2] += failed
            cells.append(f"{won}/{len(eps)}" + (f" ({failed} failed)" if failed else ""))
        print(f"| {name} | {' | '.join(cells)} |")
    for p, (won, n, failed) in totals.items():
        print(f"{p}: {won}/{n} won ({failed} failed episodes) on {len({r['task'] for r in rows if r['policy'] == p})} "
              f"tasks")
    print(f"{len(rows)} episodes in {wall:.0f}s ({os.cpu_count()} CPUs, {args.browsers} browsers)")
    if args.json:
        from dreamgym.utils.paths import atomic_write_text

        atomic_write_text(args.json, json.dumps({"split": split, "seeds": args.seeds, "max_steps": args.max_steps,
                                                 "wall_time_s": wall, "episodes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
