"""Write a fixed set of WebShop train goals as a trajectory file, for `dream.task_pool=`, `real_task_pool=` and
`dreamgym eval --tasks-from` (docs/log/23-webshop-fixed16.md). A goal qualifies when the `shopper` won it in `--won-in` (so it is
winnable), did not win it in `--not-won-in` (the start's SFT data holds no demonstration of it) and `--played-in`
played it (the dream's replay buffer holds real steps of it). The file holds the `--won-in` episode of each chosen
goal; only its task matters to the readers.

    python experiments/fixed_goals.py --won-in runs/ws/shopper3k.jsonl --not-won-in runs/ws/shopper2k.jsonl \
        --played-in runs/ws/offline3k.jsonl --n 64 --seed 29 --out runs/ws/fixed64.jsonl
"""
from __future__ import annotations

import argparse
import random

from dreamgym.data import load_trajectories, played_tasks, write_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--won-in", required=True)
    ap.add_argument("--not-won-in", required=True)
    ap.add_argument("--played-in", required=True)
    ap.add_argument("--n", type=int, required=True, help="how many goals")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    won = {}
    for traj in load_trajectories(args.won_in):
        if traj.won:
            won.setdefault(traj.task.id, traj)
    demonstrated = {t.task.id for t in load_trajectories(args.not_won_in) if t.won}
    played = {t.id for t in played_tasks(args.played_in)}
    candidates = sorted(i for i in won if i not in demonstrated and i in played)
    if len(candidates) < args.n:
        raise SystemExit(f"only {len(candidates)} goals qualify, --n {args.n} asked")
    chosen = random.Random(args.seed).sample(candidates, args.n)
    write_jsonl(args.out, [won[i] for i in chosen])
    print(f"{len(candidates)} goals qualify; wrote {args.n} to {args.out}")


if __name__ == "__main__":
    main()
