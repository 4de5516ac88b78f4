"""How many of a dream's steps a recorded real step could have answered: the ceiling of an exact-replay shortcut.

A real environment that is a function of its task instance (MiniWoB++: the task and its seed fix the page) answers
the same action on the same state the same way, so a dream step whose (task id, state, action) appears in the
offline real data could take that step's next state, reward and end instead of the model's. This counts such steps
in a dream run's episode logs (`<run_dir>/dream_episodes/*.jsonl`), overall, at each step index and among the steps
the dream rewarded. The dream's states after its first step are the model's, so a run that did use the shortcut
would follow real pages further; the first step's figure (real initial states) is the one that carries over.
No model is loaded.

    python experiments/dream_replay_coverage.py --data runs/mw/offline.jsonl --dream runs/mw-dream
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from dreamgym.data import load_trajectories


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="offline real trajectories (JSONL or Parquet)")
    ap.add_argument("--dream", required=True, help="a dream run's folder (with dream_episodes/)")
    a = ap.parse_args()
    recorded = [(t.task.id, s.state, s.action) for t in load_trajectories(a.data) for s in t.steps]
    real = set(recorded)
    states = {(task, state) for task, state, _ in recorded}
    steps, hits, rewarded, rewarded_hits = 0, 0, 0, 0
    by_index: collections.Counter[tuple[int, bool]] = collections.Counter()
    first_state_known = episodes = 0
    for path in sorted((Path(a.dream) / "dream_episodes").glob("*.jsonl")):
        for t in load_trajectories(path):
            episodes += 1
            first_state_known += bool(t.steps) and (t.task.id, t.steps[0].state) in states
            for i, s in enumerate(t.steps):
                hit = (t.task.id, s.state, s.action) in real
                steps, hits = steps + 1, hits + hit
                by_index[(i, hit)] += 1
                if s.reward > 0:
                    rewarded, rewarded_hits = rewarded + 1, rewarded_hits + hit
    print(f"{len(real)} recorded real (task, state, action) keys; {episodes} dream episodes, {steps} steps")
    print(f"dream episodes whose first state is a recorded real state of that task: {first_state_known}/{episodes}")
    print(f"steps a recorded real step answers: {hits}/{steps} ({hits / max(steps, 1):.1%}); "
          f"of the rewarded steps: {rewarded_hits}/{rewarded}")
    for i in sorted({i for i, _ in by_index}):
        n = by_index[(i, True)] + by_index[(i, False)]
        print(f"  step {i + 1}: {by_index[(i, True)]}/{n}")


if __name__ == "__main__":
    main()
