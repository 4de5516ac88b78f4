"""ALFWorld and TextWorld environment speed, policy success rates, and game generation time.

Prints, for each environment: reset time for a game not seen before in the process (engine load + reset),
reset time for the same game again, and steps per second (random admissible commands). Optional parts:

    --success   expert / noisy / random success rates on valid_seen and valid_unseen (all 274 games),
                and the overlap between `admissible_from_state` and the engine's admissible commands
    --generate  generate valid_seen + valid_unseen from scratch in a fresh cache (2 workers), then again
                to show the cache is reused; prints wall and CPU seconds
    --textworld-games N   TextWorld games to time (default 2)

    .venv/bin/python -u benchmarks/bench_alfworld.py [--games 6] [--success] [--generate]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time


def bench_speed(name: str, env, tasks, steps_per_game: int = 40) -> None:
    rng = random.Random(0)
    fresh, again, step_times = [], [], []
    for task in tasks:
        t = time.perf_counter()
        obs, info = env.reset(options={"task": task})
        fresh.append(time.perf_counter() - t)
        t = time.perf_counter()
        obs, info = env.reset(options={"task": task})
        again.append(time.perf_counter() - t)
        for _ in range(steps_per_game):
            action = rng.choice(info["admissible_actions"])
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(action)
            step_times.append(time.perf_counter() - t)
            if term or trunc:
                obs, info = env.reset(options={"task": task})
    print(f"{name:<10} reset (new game) {statistics.mean(fresh):6.3f}s  reset (same game) "
          f"{statistics.mean(again):6.3f}s  steps/s {len(step_times) / sum(step_times):6.1f}  "
          f"({len(tasks)} games, {len(step_times)} steps)")


def bench_success(A) -> None:
    policies = ("expert", "noisy", "random")
    for split in ("valid_seen", "valid_unseen"):
        tasks = A.tasks(split)
        env = A.make_env(split)
        wins = {p: 0 for p in policies}
        steps: dict[str, list[int]] = {p: [] for p in policies}
        overlap: list[float] = []
        t0 = time.perf_counter()
        for i, task in enumerate(tasks):
            for policy in policies:  # all policies on one game before the next: the engine keeps it loaded
                pol = A.POLICIES[policy](i)
                obs, info = env.reset(options={"task": task})
                pol.reset(task, obs, info)
                n = 0
                while True:
                    if policy != "expert":
                        ours = set(A.admissible_from_state(info["abstract_state"]))
                        eng = set(info["admissible_actions"])
                        overlap.append(len(ours & eng) / len(ours | eng))
                    obs, r, term, trunc, info = env.step(pol.act(obs, info))
                    n += 1
                    if term or trunc:
                        break
                wins[policy] += info["won"]
                steps[policy].append(n)
        for policy in policies:
            print(f"{split:<13} {policy:<7} success {wins[policy]}/{len(tasks)} = {wins[policy] / len(tasks):6.1%}  "
                  f"mean steps {statistics.mean(steps[policy]):5.1f}")
        print(f"{split:<13} admissible_from_state vs engine: mean Jaccard {statistics.mean(overlap):.4f}, "
              f"min {min(overlap):.2f}, exact on {sum(o == 1.0 for o in overlap)}/{len(overlap)} states "
              f"({time.perf_counter() - t0:.0f}s)")
        env.close()


def bench_generate() -> None:
    from dreamgym.envs.alfworld import games as G

    with tempfile.TemporaryDirectory() as cache:
        os.environ["DREAMGYM_CACHE"] = cache
        G.split_rows.cache_clear()
        total_wall = total_cpu = 0.0
        for split in ("valid_seen", "valid_unseen"):
            rep = G.generate_split(split, workers=2)
            total_wall += rep.seconds
            total_cpu += rep.cpu_seconds
            print(rep.summary())
        print(f"default splits from scratch: {total_wall:.1f}s wall, {total_cpu:.1f}s CPU (2 workers); "
              f"load average now {os.getloadavg()[0]:.1f}")
        t = time.perf_counter()
        for split in ("valid_seen", "valid_unseen"):
            rep = G.generate_split(split, workers=2)
            print(rep.summary())
        print(f"second run: {time.perf_counter() - t:.2f}s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=int, default=6, help="ALFWorld games to time (valid_seen)")
    p.add_argument("--textworld-games", type=int, default=2)
    p.add_argument("--success", action="store_true")
    p.add_argument("--generate", action="store_true")
    args = p.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.generate:
        bench_generate()
        return
    from dreamgym.envs import alfworld as A
    from dreamgym.envs import textworld_env as T

    tasks = A.tasks("valid_seen")[: args.games]
    env = A.make_env("valid_seen")
    bench_speed("ALFWorld", env, tasks)
    env.close()
    tw_tasks = T.tasks("train", n=args.textworld_games)
    env = T.make_env(tasks=tw_tasks)
    bench_speed("TextWorld", env, tw_tasks)
    env.close()
    if args.success:
        bench_success(A)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
