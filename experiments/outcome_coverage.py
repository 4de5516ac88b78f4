"""How much of a dream could follow the real environment without the model writing a word?

With `copy_hidden_outcomes` and `derive_determined_outcomes` the experience model answers a step from a recorded
real step under the same `hidden_outcome_key`, or from the state itself (`determined_outcome`); only the rest
goes to the model. This plays scripted policies in the real environment on the tasks of an offline data file
and counts, per policy, the share of steps each source would answer, and checks every copied or derived answer
against the page or observation the real environment gave (the family's `model_observation` of the real next
state; a copy that differs would be a wrong key). No model is loaded.

    python experiments/outcome_coverage.py --env webshop --data runs/ws/offline3k.jsonl \
        --policies shopper,noisy,random --episodes 200 --seed 7
"""

from __future__ import annotations

import argparse
import collections
import random

from dreamgym.data import load_trajectories
from dreamgym.envs import family


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", required=True)
    ap.add_argument("--data", required=True, help="offline real trajectories (JSONL or Parquet)")
    ap.add_argument("--policies", default="shopper,noisy,random")
    ap.add_argument("--episodes", type=int, default=200, help="episodes per policy, on tasks drawn from the data")
    ap.add_argument("--seed", type=int, default=7, help="policy and task-draw seed (not the data's)")
    args = ap.parse_args()

    fam = family(args.env)
    trajs = load_trajectories(args.data)
    table: dict[str, str] = {}
    for tr in trajs:
        state = tr.initial_state
        for st in tr.steps:
            key = fam.hooks.hidden_outcome_key(tr.task, state, st.action)
            if key is not None:
                table.setdefault(key, fam.hooks.model_observation(st.next_state))
            state = st.next_state
    tasks = list({t.task.id: t.task for t in trajs}.values())
    print(f"{len(trajs)} data episodes, {sum(len(t.steps) for t in trajs)} steps, {len(table)} keys, "
          f"{len(tasks)} tasks")
    rng = random.Random(args.seed)
    env = fam.make_env("train")
    for name in args.policies.split(","):
        counts: collections.Counter = collections.Counter()
        for i in range(args.episodes):
            task = rng.choice(tasks)
            pol = fam.POLICIES[name](args.seed * 1000 + i)
            obs, info = env.reset(seed=args.seed * 1000 + i, options={"task": task})
            pol.reset(task, obs, info)
            while True:
                state, action = info["abstract_state"], pol.act(obs, info)
                obs, _, term, trunc, info = env.step(action)
                real = fam.hooks.model_observation(info["abstract_state"])
                key = fam.hooks.hidden_outcome_key(task, state, action)
                derived = fam.hooks.determined_outcome(task, state, action)
                if key is not None and key in table:
                    counts["copied"] += 1
                    counts["copy_wrong"] += table[key] != real
                elif derived is not None:
                    counts["derived"] += 1
                    counts["derive_wrong"] += fam.hooks.model_observation(fam.hooks.state_after(state, derived)) != real
                elif key is not None:
                    counts["hidden_unrecorded"] += 1
                elif term:
                    counts["model_final"] += 1  # an ending step: reward and end come from `grounded_outcome`
                else:
                    counts["model"] += 1
                counts["steps"] += 1
                if term or trunc:
                    break
        n = counts["steps"]
        print(f"{name}: {n} steps; copied {counts['copied'] / n:.3f} (wrong {counts['copy_wrong']}), derived "
              f"{counts['derived'] / n:.3f} (wrong {counts['derive_wrong']}), hidden but unrecorded "
              f"{counts['hidden_unrecorded'] / n:.3f}, left to the model {counts['model'] / n:.3f} "
              f"(+ {counts['model_final'] / n:.3f} on ending steps)")
    env.close()


if __name__ == "__main__":
    main()
