"""How often do the k retrieved examples already hold the answer? Retrieval coverage per embedder key.

For each held-out real transition, retrieve k examples from a buffer of offline real transitions (the way the
experience model does: real only, other trajectories, twins kept) and count the examples whose next state is
exactly the true next state, or whose first line (the page or location heading) is the true one. The model
can only copy what retrieval shows it, so this bounds what better training alone can buy.

`--observation` compares what a `em.write_observation=true` model writes (the family's observation of the
next state) instead of the whole next state, and adds the share of queries with an example from the query's own
task (another play of the same game: what the dream retrieves on a game the offline data played), e.g. on data
collected with `dreamgym collect --episodes-per-task 3`, holding out each task's last play:

    python experiments/retrieval_coverage.py --env alfworld --data runs/alf/rep3.jsonl --heldout-last-play \
        --observation --embedder hashing --embedder hashing+action --k 2

    python experiments/retrieval_coverage.py --env webshop --data runs/ws/offline20k.jsonl \
        --heldout runs/ws/ws_heldout.jsonl --embedder hashing --embedder hashing+action --k 2

Prints one row per embedder, overall and by the action's verb (`fidelity.action_kind`).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from dreamgym.data import load_trajectories
from dreamgym.experience import RESET_ACTION, ExperienceModelConfig, buffer_for, em_transitions
from dreamgym.experience.format import written_state
from dreamgym.experience.fidelity import action_kind
from dreamgym.types import Transition


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--data", required=True, help="offline real trajectories (the buffer)")
    p.add_argument("--heldout", default="", help="held-out real trajectories (the queries)")
    p.add_argument("--heldout-last-play", action="store_true",
                   help="no --heldout: each task's last trajectory in --data is the query, the rest the buffer")
    p.add_argument("--observation", action="store_true",
                   help="compare written observations (em.write_observation) and count same-task examples")
    p.add_argument("--embedder", action="append", required=True, help="embedder spec (repeatable)")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--history", type=int, default=3)
    p.add_argument("--max-queries", type=int, default=150)
    a = p.parse_args()

    if a.heldout_last_play:
        trajs = load_trajectories(a.data)
        last = {t.task.id: t.id for t in trajs}
        buffer_trajs = [t for t in trajs if last[t.task.id] != t.id]
        heldout = [t for t in trajs if last[t.task.id] == t.id]
    elif a.heldout:
        buffer_trajs, heldout = load_trajectories(a.data), load_trajectories(a.heldout)
    else:
        p.error("give --heldout or --heldout-last-play")
    cfg = ExperienceModelConfig(write_observation=a.observation)

    def outcome(t: Transition) -> str:
        return written_state(t, cfg) if a.observation else t.next_state

    seed_trs = em_transitions(buffer_trajs, history=a.history)
    queries = [t for t in em_transitions(heldout, history=a.history)
               if t.action != RESET_ACTION]  # the steps eval-em scores (initial states are not retrieved for)
    random.Random(0).shuffle(queries)
    queries = queries[: a.max_queries]
    print(f"{len(seed_trs)} buffer transitions, {len(queries)} held-out queries, k = {a.k}")
    for spec in a.embedder:
        t0 = time.perf_counter()
        buf = buffer_for(seed_trs, spec)  # the seed buffer a checkpoint with this embedder would use
        hits = buf.retrieve(queries, k=a.k, env=a.env, real_only=True, exclude_twins=False)
        exact: dict[str, list[bool]] = defaultdict(list)
        head: dict[str, list[bool]] = defaultdict(list)
        same_task: list[bool] = []
        for q, ex in zip(queries, hits):
            want = outcome(q)
            h = want.split("\n", 1)[0]
            same_task.append(any(e.task.id == q.task.id for e in ex))
            for kind in ("all", action_kind(q.action)):
                exact[kind].append(any(outcome(e) == want for e in ex))
                head[kind].append(any(outcome(e).split("\n", 1)[0] == h for e in ex))
        parts = ", ".join(f"{kind} {sum(v) / len(v):.2f}/{sum(head[kind]) / len(head[kind]):.2f} (n={len(v)})"
                          for kind, v in sorted(exact.items(), key=lambda kv: -len(kv[1])))
        print(f"{spec:>20}: exact next state / same heading among the examples: {parts} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)
        if a.observation:
            print(f"{'':>20}  queries with an example from their own task: {sum(same_task) / len(same_task):.2f}")


if __name__ == "__main__":
    main()
