"""How far MiniWoB++'s reward rule on states (`miniwob.grounded_outcome`) reaches on recorded real episodes, per task:
steps, steps it decides (not None), how many of those equal the recorded (reward, terminated), how many equal the
reward the family gives now for the page's raw reward (`miniwob_tasks.family_reward` of the step's
`miniwob_raw_reward`: a collection made before partial credit was kept recorded any positive raw reward as 1), and
the recorded wins it decides. The rule reads each step with the episode's earlier steps, as a dream gives them
(`--no-history`: without them, as before a password was read from the episode's fills). `dreamgym check-family
--data` counts the same disagreements, without the per-task rows. A second table replays `miniwob.ground_state`
(what an action alone fixes in the next state) over the same steps, per kind of action: the steps it writes (not
None) and how many of those equal the page's recorded next state. No browser is started.

    python experiments/miniwob_rule_agreement.py runs/mw-big/offline.jsonl [--show 3] [--no-history]
"""

from __future__ import annotations

import argparse
import collections
import math

from dreamgym.data import load_trajectories
from dreamgym.envs.web.axtree import elements, parse_fill, parse_select
from dreamgym.envs.web.miniwob import ground_state, grounded_outcome
from dreamgym.envs.web.miniwob_outcomes import plain_click
from dreamgym.envs.web.miniwob_tasks import TRAIN_TASKS, family_reward

COLUMNS = ("steps", "decided", "agree", "agree_now", "wins", "wins_decided")


def agreement(path: str, show: int = 0, history: bool = True) -> dict[str, collections.Counter[str]]:
    """Per task, the `COLUMNS` counts; prints the first `show` disagreements with the recorded reward and end.
    `history`: the rule reads each step with the episode's earlier (state, action) pairs."""
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for traj in load_trajectories(path):
        row = rows[str(traj.task.goal["subdomain"])]
        for i, st in enumerate(traj.steps):
            won = st.terminated and st.reward >= 1.0
            row["steps"] += 1
            row["wins"] += won
            before = traj.history(i) if history else []
            got = grounded_outcome(traj.task, st.state, st.action, st.next_state, before)
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


def grounding(path: str) -> dict[str, collections.Counter[str]]:
    """Per kind of action (a fill, a select_option, a plain click on a checkbox or a radio button, any other): steps, those `ground_state` writes, and
    those whose written state equals the recorded next state."""
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for traj in load_trajectories(path):
        for st in traj.steps:
            bid = plain_click(st.action)
            role = next((e.role for e in elements(st.state) if bid is not None and e.bid == bid), "")
            boxes = ("checkbox", "radio")
            row = rows["fill" if parse_fill(st.action) else "select_option" if parse_select(st.action)
                       else f"{role} click" if role in boxes else "other"]
            got = ground_state(traj.task, st.state, st.action, st.next_state)
            row["steps"] += 1
            row["written"] += got is not None
            row["as_the_page"] += got == st.next_state
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a `dreamgym collect` output of MiniWoB++ episodes")
    ap.add_argument("--show", type=int, default=0, help="print this many disagreements")
    ap.add_argument("--no-history", action="store_true", help="the rule reads each step without the episode's earlier ones")
    args = ap.parse_args()
    rows = agreement(args.data, args.show, history=not args.no_history)
    print("| task | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    total: collections.Counter[str] = collections.Counter()
    for task in sorted(rows):
        if task in TRAIN_TASKS:
            total.update(rows[task])
        print(f"| {task}{'' if task in TRAIN_TASKS else ' (not a train task)'} | "
              + " | ".join(str(rows[task][c]) for c in COLUMNS) + " |")
    print("| train tasks | " + " | ".join(str(total[c]) for c in COLUMNS) + " |")
    print("\n| action | steps | written by ground_state | as the page showed it |\n|---|---|---|---|")
    for kind, row in sorted(grounding(args.data).items()):
        print(f"| {kind} | {row['steps']} | {row['written']} | {row['as_the_page']} |")


if __name__ == "__main__":
    main()
