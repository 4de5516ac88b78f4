"""Which parts of an ALFWorld abstract state does an experience model get right? Teacher-forced, per state field.

Token F1 over a whole state (what `dreamgym eval-em` reports) hides which lines are wrong; for a dream the lines
that decide outcomes are the task, the inventory and the known contents. This predicts the next state of sampled
real steps with each given checkpoint (its own prompt format, retrieval from its own training data, greedy) and
prints, per checkpoint, the share of steps on which each parsed field (`envs/alfworld/state.parse_state`) equals
the real one, overall and by command verb.

    python experiments/alf_state_fields.py --em runs/alf-em11 runs/alf-em15 --data runs/alf/heldout40.jsonl --steps 120
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import random
import time

import torch

from dreamgym.data import load_trajectories
from dreamgym.envs.alfworld.state import parse_state
from dreamgym.experience import ExperienceModel, checkpoint_buffer, em_transitions
from dreamgym.experience.fidelity import token_f1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--em", nargs="+", required=True, help="experience-model checkpoints")
    ap.add_argument("--data", default="runs/alf/heldout40.jsonl", help="real ALFWorld trajectories to query")
    ap.add_argument("--steps", type=int, default=120, help="steps sampled (the [reset] answers excluded)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    queries = em_transitions(load_trajectories(args.data), initial_states=False)
    random.Random(args.seed).shuffle(queries)
    queries = queries[:args.steps]
    for path in args.em:
        buf = checkpoint_buffer(path)  # retrieval as in the checkpoint's training
        em = ExperienceModel.load(path, buffer=buf, batch_size=16)
        t0 = time.time()
        preds = em.predict(queries)
        secs = time.time() - t0
        by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for q, p in zip(queries, preds):
            real, pred = parse_state(q.next_state), parse_state(p.next_state)
            for verb in ("all", q.action.split()[0]):
                c = by[verb]
                c["n"] += 1
                c["whole"] += real == pred
                c["f1"] += token_f1(p.next_state, q.next_state)
                c["failed"] += p.failed
                for f in dataclasses.fields(real):
                    c[f.name] += getattr(real, f.name) == getattr(pred, f.name)
        fields = ["task", "observation", "location", "inventory", "opened", "altered", "known", "whole"]
        print(f"\n{path}: {len(queries)} steps, {secs:.0f} s ({secs / len(queries):.2f} s per step, batched), "
              f"failures {by['all']['failed']}")
        print(f"  {'verb':10s} {'n':>4s} " + " ".join(f"{f:>11s}" for f in fields) + f" {'token F1':>9s}")
        for verb, c in sorted(by.items(), key=lambda kv: -kv[1]["n"]):
            print(f"  {verb:10s} {c['n']:4d} " + " ".join(f"{c[f] / c['n']:11.3f}" for f in fields)
                  + f" {c['f1'] / c['n']:9.3f}")


if __name__ == "__main__":
    main()
