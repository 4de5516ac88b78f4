"""Demonstrations of MiniWoB++ page-grounded variants: the oracle answering other questions on the pages of a
trajectory file, played without a browser through the family's own grounding and reward rule.

    python experiments/variant_demos.py runs/mw/offline.jsonl --variants 4 --out runs/mw-variant-demos.jsonl

For each won episode of the file, up to `--variants` questions its start page can answer (the family's
`task_variants`), each started on the page with its goal shown (`show_goal`) and played by the oracle: each next state
is the page as the family grounds it (`miniwob.grounded_episode`: the option chosen, the box checked, the text typed,
bullets in a password field) and the episode ends where the family's rule ends it. A variant the rule does not
score a win is dropped and counted. The output holds the file's own episodes first, then the variants' (source
"synthetic", policy "oracle-variant", each task a generated child of its page's task), so `dreamgym train --algo sft
data=OUT` fits a start on both. Why: a diagnostic for the measured reason the MiniWoB++ policy does not move (it
answers each train page's own question and misreads the goal on new pages): does a start that met other questions on
the same pages read the goal on held-out pages? docs/results/miniwob.md, "Questions the pages never asked".
"""

from __future__ import annotations

import argparse
import collections
import random
import sys

from dreamgym.data import load_trajectories, write_jsonl
from dreamgym.envs import family
from dreamgym.envs.web.miniwob import grounded_episode
from dreamgym.types import Task, Trajectory

MINIWOB = family("miniwob")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="a MiniWoB++ trajectory file (.jsonl or .parquet)")
    ap.add_argument("--variants", type=int, default=4, help="most variants per won episode's page")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the output trajectory file (.jsonl)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    own = load_trajectories(args.data)
    out = list(own)
    counts: collections.Counter[tuple[str, bool]] = collections.Counter()
    for tr in own:
        if not tr.won or not tr.initial_state:
            continue
        for k, text in enumerate(MINIWOB.hooks.task_variants(tr.task, tr.initial_state, args.variants, rng)):
            goal = dict(tr.task.goal)
            goal.update(MINIWOB.parse_goal(text) or {})
            task = Task(id=f"{tr.task.id}~v{k}", env="miniwob", instruction=text, goal=goal, split="generated",
                        parent_id=tr.task.id)
            start = MINIWOB.hooks.show_goal(task, tr.initial_state)
            steps, outcome = grounded_episode(task, start)
            won = outcome is not None and outcome[0] >= 1.0
            counts[(str(tr.task.goal.get("subdomain")), won)] += 1
            if won:
                out.append(Trajectory(task, steps, source="synthetic", seed=tr.seed, policy="oracle-variant",
                                      initial_state=start, won=True, id=f"{tr.id}~v{k}"))
    n = write_jsonl(args.out, out)
    for sub in sorted({s for s, _ in counts}):
        print(f"{sub}: {counts[(sub, True)]} variants won, {counts[(sub, False)]} dropped")
    print(f"{n} trajectories ({len(own)} of {args.data}, {n - len(own)} variants) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
