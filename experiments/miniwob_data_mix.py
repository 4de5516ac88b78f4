"""What a MiniWoB++ offline collection holds: episodes, steps and wins per task and per policy, and every scheduled
episode accounted for.

Reads a `dreamgym collect` output (JSONL or Parquet) and its `<out>.summary.json`, and prints Markdown: one row per
task (episodes and steps per policy, the oracle's wins), one row per policy (episodes, steps, wins, success), then the
accounting: episodes scheduled (`requested`), written to the file, and failed (with each failure's stage and task as
the summary records them), so an episode that was refused or failed is counted, never silently missing. It also
names any `TEST_ONLY` task found in a train-split file (the held-out tasks must stay unseen). No browser is started.

    python experiments/miniwob_data_mix.py /work/runs/mw-big/offline.jsonl [--json mix.json]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

from dreamgym.data import load_trajectories
from dreamgym.envs.web.miniwob_tasks import TEST_ONLY


def mix(path: str) -> dict[str, Any]:
    """The per-task and per-policy counts of the trajectories in `path`, and its summary's accounting."""
    episodes: collections.Counter[tuple[str, str]] = collections.Counter()
    steps: collections.Counter[tuple[str, str]] = collections.Counter()
    wins: collections.Counter[tuple[str, str]] = collections.Counter()
    splits: collections.Counter[str] = collections.Counter()
    ids: collections.Counter[str] = collections.Counter()
    for t in load_trajectories(path):
        key = (str(t.task.goal["subdomain"]), t.policy)
        episodes[key] += 1
        steps[key] += len(t.steps)
        wins[key] += int(t.won)
        splits[t.task.split] += 1
        ids[t.id] += 1
    summary_path = Path(str(path) + ".summary.json")
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    tasks = sorted({k[0] for k in episodes})
    policies = sorted({k[1] for k in episodes})
    out: dict[str, Any] = {
        "file": str(path),
        "episodes": sum(episodes.values()), "steps": sum(steps.values()), "wins": sum(wins.values()),
        "duplicate_ids": sorted(i for i, n in ids.items() if n > 1),
        "splits": dict(splits),
        "test_only_in_train": sorted({k[0] for k in episodes if k[0] in TEST_ONLY}) if set(splits) == {"train"} else [],
        "per_task": {task: {p: {"episodes": episodes[task, p], "steps": steps[task, p], "wins": wins[task, p]}
                            for p in policies} for task in tasks},
        "per_policy": {p: {"episodes": sum(episodes[t, p] for t in tasks), "steps": sum(steps[t, p] for t in tasks),
                           "wins": sum(wins[t, p] for t in tasks)} for p in policies},
    }
    if summary is not None:
        failures = summary.get("failures", [])
        out["accounting"] = {
            "requested": summary["requested"], "skipped_existing": summary["skipped_existing"],
            "written": out["episodes"], "failed": summary["failed"],
            # requested = written + failed when nothing was lost between the collector and the file
            "unaccounted": summary["requested"] - out["episodes"] - summary["failed"],
            "failure_stages": dict(collections.Counter(str(f["reason"]).split(":")[0] for f in failures)),
            "failures": failures,
            "wall_time_s": summary["wall_time_s"],
        }
    return out


def markdown(m: dict[str, Any]) -> str:
    policies = list(m["per_policy"])
    head = "| task | " + " | ".join(f"{p} episodes / steps" for p in policies) + " | all episodes / steps | oracle won |"
    lines = [head, "|---|" + "---:|" * (len(policies) + 2)]
    for task, row in m["per_task"].items():
        n, s = sum(r["episodes"] for r in row.values()), sum(r["steps"] for r in row.values())
        o = row.get("oracle", {"episodes": 0, "wins": 0})
        lines.append(f"| {task} | " + " | ".join(f"{row[p]['episodes']} / {row[p]['steps']}" for p in policies)
                     + f" | {n} / {s} | {o['wins']}/{o['episodes']} |")
    lines += ["", "| policy | episodes | steps | mean steps | won | success |", "|---|---:|---:|---:|---:|---:|"]
    for p, r in m["per_policy"].items():
        lines.append(f"| {p} | {r['episodes']} | {r['steps']} | {r['steps'] / max(r['episodes'], 1):.2f} | "
                     f"{r['wins']} | {r['wins'] / max(r['episodes'], 1):.1%} |")
    lines.append(f"| all | {m['episodes']} | {m['steps']} | {m['steps'] / max(m['episodes'], 1):.2f} | {m['wins']} | "
                 f"{m['wins'] / max(m['episodes'], 1):.1%} |")
    lines += ["", f"splits: {m['splits']}; duplicate ids: {len(m['duplicate_ids'])}; "
              f"test-only tasks in a train file: {m['test_only_in_train'] or 'none'}"]
    a = m.get("accounting")
    if a is None:
        lines.append("no summary file beside the data: failed episodes cannot be counted")
    else:
        lines.append(f"requested {a['requested']} = written {a['written']} + failed {a['failed']} "
                     f"(+ {a['unaccounted']} unaccounted; {a['skipped_existing']} were already present at start); "
                     f"failure stages: {a['failure_stages'] or 'none'}; collector wall time {a['wall_time_s']:.0f} s")
        for f in a["failures"]:
            lines.append(f"  failed: episode {f['episode']} ({f['policy']}, {f['task']}): {f['reason']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="a collection's output (JSONL or Parquet), its .summary.json beside it")
    ap.add_argument("--json", default=None, help="also write the counts here")
    a = ap.parse_args()
    m = mix(a.data)
    print(markdown(m))
    if a.json:
        Path(a.json).write_text(json.dumps(m, indent=2))


if __name__ == "__main__":
    main()
