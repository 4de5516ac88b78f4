"""The report over seeds from finished one-seed recipe folders: the same tables, intervals and paired tests
`dreamgym quickstart --seeds` writes (`dreamgym.commands.seeds.write_seeds_report`), for seeds run by separate
commands (other days, other machines, another run folder). Each folder is a `seed-<s>/` of a recipe run (its
summary.json and every row's `<row>/result.json` with the evaluation's episodes); nothing is re-run or re-sampled.

    python experiments/seeds_report.py --out runs/qs-five --title "audit guard 0.5" \
        runs/qs-guard/seed-0 runs/qs-guard/seed-1 runs/qs-guard/seed-2 runs/qs-fresh/seed-3 runs/qs-fresh/seed-4

Every folder must hold the same rows, and no two the same seed (the seed is read from the folder's name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dreamgym.commands.seeds import write_seeds_report


def seed_run(folder: Path) -> tuple[int, dict[str, Any]]:
    """(seed, the run as `write_seeds_report` takes it) read from a `seed-<s>` folder."""
    prefix, _, seed = folder.name.partition("-")
    if prefix != "seed" or not seed.isdigit():
        raise SystemExit(f"{folder}: not a seed-<s> folder of a recipe run")
    summary = json.loads((folder / "summary.json").read_text())
    episodes = {row: json.loads((folder / row.lower().replace(" ", "-") / "result.json").read_text())["episodes"]
                for row in summary["results"]}
    return int(seed), {"results": summary["results"], "episodes": episodes, "machine": summary.get("machine", {})}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="seed-<s> folders of finished recipe runs")
    p.add_argument("--out", type=Path, required=True, help="where report.md and summary.json go")
    p.add_argument("--title", default="", help="what the runs share, appended to the report's title")
    p.add_argument("--env", default="dial")
    args = p.parse_args()
    per_seed: dict[int, dict[str, Any]] = {}
    for folder in args.folders:
        seed, run = seed_run(folder)
        if seed in per_seed:
            raise SystemExit(f"{folder}: seed {seed} given twice")
        per_seed[seed] = run
    args.out.mkdir(parents=True, exist_ok=True)
    title = f"DreamGym quickstart — {args.env}, seeds {', '.join(map(str, sorted(per_seed)))}"
    print(write_seeds_report(args.out, f"{title}, {args.title}" if args.title else title, args.env, per_seed))


if __name__ == "__main__":
    main()
