"""How often do the k retrieved examples already hold the answer? Retrieval coverage per embedder key.

For each held-out real transition, retrieve k examples from a buffer of offline real transitions (the way the
experience model does: real only, other trajectories, twins kept) and count the examples whose next state is
exactly the true next state, or whose first line (the page or location heading) is the true one. The model
can only copy what retrieval shows it, so this bounds what better training alone can buy.

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
from dreamgym.experience_model import RESET_ACTION, buffer_for, em_transitions
from dreamgym.fidelity import action_kind


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--data", required=True, help="offline real trajectories (the buffer)")
    p.add_argument("--heldout", required=True, help="held-out real trajectories (the queries)")
    p.add_argument("--embedder", action="append", required=True, help="embedder spec (repeatable)")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--history", type=int, default=3)
    p.add_argument("--max-queries", type=int, default=150)
    a = p.parse_args()

    seed_trs = em_transitions(load_trajectories(a.data), history=a.history)
    queries = [t for t in em_transitions(load_trajectories(a.heldout), history=a.history)
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
        for q, ex in zip(queries, hits):
            h = q.next_state.split("\n", 1)[0]
            for kind in ("all", action_kind(q.action)):
                exact[kind].append(any(e.next_state == q.next_state for e in ex))
                head[kind].append(any(e.next_state.split("\n", 1)[0] == h for e in ex))
        parts = ", ".join(f"{kind} {sum(v) / len(v):.2f}/{sum(head[kind]) / len(head[kind]):.2f} (n={len(v)})"
                          for kind, v in sorted(exact.items(), key=lambda kv: -len(kv[1])))
        print(f"{spec:>20}: exact next state / same heading among the examples: {parts} "
              f"[{time.perf_counter() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
