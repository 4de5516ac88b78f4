"""ALFWorld demonstrations, step by step: which kinds of step a policy imitates, and data that weights the rare ones.

A `searcher-list` episode is mostly exploring ("go to" the last name of the state's "Unexplored" line) and
opening; the steps that win the game (take, move, heat/cool/clean, use, go to a receptacle already known to hold
the object) are about one in six and need an object name copied from the middle of the state. SFT on the plain
demonstrations learns the exploring copy and not those (docs/log/04-agents-webshop-alfworld.md), so:

    # teacher-forced exact match of the whole reply, per kind of step, on the last 30 won episodes of a file
    python experiments/alf_demo_steps.py score --policy runs/alf-sft8/final --data runs/alf/searcher-last-test40.jsonl
    # a training file: every won episode, plus a second copy of its non-exploring, non-opening steps
    python experiments/alf_demo_steps.py weight --data runs/alf/searcher-last.jsonl --out runs/alf/searcher-last-mix.jsonl
    # only the non-exploring steps and one exploring step in four (what runs/alf-sft7 was trained on)
    python experiments/alf_demo_steps.py weight --data runs/alf/searcher-last.jsonl --out runs/alf/searcher-last-manip.jsonl \
        --no-originals --explore-share 0.25 --with-open

Prompts have no history (`agent.history=0`), so a trajectory whose steps are a subset of an episode's is still a
valid set of SFT examples: each step's prompt is its own state.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import random

import torch

from dreamgym.agent import AgentConfig
from dreamgym.data import load_trajectories, write_jsonl
from dreamgym.envs.alfworld.state import parse_state
from dreamgym.rl.builders import build_backend
from dreamgym.trainers.common import TrainerConfig
from dreamgym.trainers.sft import turn_examples
from dreamgym.types import Step


def kind(step: Step) -> str:
    """'explore-last' / 'explore-other' (a go to an unexplored receptacle), 'go-known', or the command's verb."""
    action = step.action
    unexplored = parse_state(step.state).unexplored()
    if action.startswith("go to "):
        target = action[len("go to "):]
        if target in unexplored:
            return "explore-last" if target == unexplored[-1] else "explore-other"
        return "go-known"
    return action.split()[0] if action.split() else "empty"


def score(policy: str, data: str, n: int) -> None:
    backend = build_backend(TrainerConfig(), init=policy)
    agent = AgentConfig(history=0, show_admissible=False)
    stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
    for traj in [t for t in load_trajectories(data) if t.won][-n:]:
        for step, ex in zip(traj.steps, turn_examples(traj, backend, agent)):
            ids = torch.tensor([ex.prompt_ids + ex.target_ids])
            with torch.no_grad():
                logits = backend.model(ids).logits[0, len(ex.prompt_ids) - 1:-1].float()  # [T_target, vocab]
            target = torch.tensor(ex.target_ids)
            nll = -torch.log_softmax(logits, -1)[torch.arange(len(target)), target].mean().item()
            s = stats[kind(step)]
            s[0] += 1
            s[1] += bool((logits.argmax(-1) == target).all())
            s[2] += nll
    for k, (count, exact, nll) in sorted(stats.items()):
        print(f"{k:14} n={count:5d} exact={exact / count:.3f} nll={nll / count:.3f}")


def weight(data: str, out: str, originals: bool, explore_share: float, with_open: bool, seed: int) -> None:
    rng = random.Random(seed)

    def selected(step: Step) -> bool:
        k = kind(step)
        if k.startswith("explore"):
            return rng.random() < explore_share
        return with_open or k != "open"

    rows, extra = [], 0
    for traj in load_trajectories(data):
        if not traj.won:
            continue
        if originals:
            rows.append(traj)
        keep = [s for s in traj.steps if selected(s)]
        extra += len(keep)
        rows.append(dataclasses.replace(traj, id=traj.id + "-steps", steps=keep))
    write_jsonl(out, rows)
    print(f"{len(rows)} trajectories, {extra} selected steps -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("score")
    a.add_argument("--policy", required=True)
    a.add_argument("--data", required=True)
    a.add_argument("--episodes", type=int, default=30)
    b = sub.add_parser("weight")
    b.add_argument("--data", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--no-originals", action="store_true", help="write only the selected steps")
    b.add_argument("--explore-share", type=float, default=0.0, help="share of exploring steps kept as well")
    b.add_argument("--with-open", action="store_true", help="select opening steps as well")
    b.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.cmd == "score":
        score(args.policy, args.data, args.episodes)
    else:
        weight(args.data, args.out, not args.no_originals, args.explore_share, args.with_open, args.seed)


if __name__ == "__main__":
    main()
