"""How far MiniWoB++'s reward rule on states (`miniwob.grounded_outcome`) reaches on recorded real episodes, per task:
steps, steps it decides (not None), how many of those equal the recorded (reward, terminated), how many equal the
reward the family gives now for the page's raw reward (`miniwob_tasks.family_reward` of the step's
`miniwob_raw_reward`: a collection made before partial credit was kept recorded any positive raw reward as 1), and
the recorded wins it decides. `dreamgym check-family --data` counts the same disagreements, without the per-task
rows. No browser is started.

    python experiments/miniwob_rule_agreement.py runs/mw-big/offline.jsonl [--show 3]
"""

from __future__ import annotations

import argparse
import collections
import math

from dreamgym.data import load_trajectories
from dreamgym.envs.web.miniwob import grounded_outcome
from dreamgym.envs.web.miniwob_tasks import TRAIN_TASKS, family_reward

COLUMNS = ("steps", "decided", "agree", "agree_now", "wins", "wins_decided")


def agreement(path: str, show: int = 0) -> dict[str, collections.Counter[str]]:
    """Per task, the `COLUMNS` counts; prints the first `show` disagreements with the recorded reward and end."""
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for traj in load_trajectories(path):
        row = rows[str(traj.task.goal["subdomain"])]
        for i, st in enumerate(traj.steps):
            won = st.terminated and st.reward >= 1.0
            row["steps"] += 1
            row["wins"] += won
            got = grounded_outcome(traj.task, st.state, st.action, st.next_state)
            if got is None:
                continue
            raw = st.info.get("miniwob_raw_reward")
            now = family_reward(float(raw)) if raw is not None else st.reward
            same = math.isclose(got[0], st.reward, abs_tol=1e-9) and got[1] == st.terminated
            row["decided"] += 1
            row["wins_decided"] += won
            row["agree"] += same
            row["agree_now"] += math.isclose(got[0], now, abs_tol=1e-9) and got[1] == st.terminated
            if not same and show > 0:
                show -= 1
                print(f"{traj.task.id} step {i + 1} {st.action}: rule {got}, recorded ({st.reward:g}, "
                      f"{st.terminated}), raw reward {raw}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a `dreamgym collect` output of MiniWoB++ episodes")
    ap.add_argument("--show", type=int, default=0, help="print this many disagreements")
    args = ap.parse_args()
    rows = agreement(args.data, args.show)
    print("| task | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    total: collections.Counter[str] = collections.Counter()
    for task in sorted(rows):
        if task in TRAIN_TASKS:
            total.update(rows[task])
        print(f"| {task}{'' if task in TRAIN_TASKS else ' (not a train task)'} | "
              + " | ".join(str(rows[task][c]) for c in COLUMNS) + " |")
    print("| train tasks | " + " | ".join(str(total[c]) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
