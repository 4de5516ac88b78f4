"""The official ALFWorld game files (`ALFWORLD_DATA`, as `alfworld-download` fetches them), read as the rows of
a split, in the format of the generated games' manifests (`dreamgym.envs.alfworld.games`).

Owns: where the official files are (`official_root`: `$ALFWORLD_DATA/json_2.1.1`, or None when the variable is
unset or is the `alfworld` package's own empty default), which of them a split has (the solvable games of the six
task types; movable and sliced tasks excluded as ALFWorld does) and the instruction and goal of each.
Must not know: how games are generated, checked or cached; the TextEnv contract, states, policies, models.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from dreamgym.envs.alfworld.knowledge import TASK_TYPES

log = logging.getLogger(__name__)

OFFICIAL_SPLIT_DIRS = {"train": "train", "valid_seen": "valid_seen", "valid_unseen": "valid_unseen"}


def official_root() -> Path | None:
    """`$ALFWORLD_DATA/json_2.1.1` when ALFWORLD_DATA is set; raises with a clear message when it is unusable."""
    root = os.environ.get("ALFWORLD_DATA")
    if not root:
        return None
    base = Path(root).expanduser() / "json_2.1.1"
    # Importing `alfworld` sets ALFWORLD_DATA to ~/.cache/alfworld when it is unset: that default without data in
    # it means "no official data", not a misconfiguration.
    if not base.is_dir() and Path(root).expanduser() == Path("~/.cache/alfworld").expanduser():
        return None
    if not base.is_dir():
        raise FileNotFoundError(
            f"ALFWORLD_DATA={root!r} but {base} does not exist. Run `alfworld-download` (from the alfworld package) "
            f"with ALFWORLD_DATA pointing at the download directory, or unset ALFWORLD_DATA to use generated games.")
    return base


def official_rows(split: str) -> list[dict[str, Any]]:
    """Manifest rows for the official game files of a split (solvable ones, movable/sliced tasks excluded as
    ALFWorld does)."""
    base = official_root()
    assert base is not None
    d = base / OFFICIAL_SPLIT_DIRS[split]
    if not d.is_dir():
        raise FileNotFoundError(f"ALFWorld official split directory missing: {d}")
    rows: list[dict[str, Any]] = []
    for game in sorted(d.rglob("game.tw-pddl")):
        if "movable" in str(game) or "Sliced" in str(game):
            continue
        traj = game.parent / "traj_data.json"
        try:
            data = json.loads(game.read_text())
            meta = json.loads(traj.read_text()) if traj.exists() else {}
        except (OSError, ValueError) as e:
            log.warning("alfworld: skipping unreadable official game %s: %s", game, e)
            continue
        if not data.get("solvable", False) or meta.get("task_type") not in TASK_TYPES:
            continue
        instruction = _instruction_from_grammar(data.get("grammar", ""))
        params = meta.get("pddl_params", {})
        game_id = str(game.parent.relative_to(d))
        rows.append({"index": len(rows), "game_id": game_id, "status": "ok", "reason": "", "instruction": instruction,
                     "goal": {"task_type": meta["task_type"], "object": params.get("object_target", "").lower(),
                              "receptacle": params.get("parent_target", "").lower() or None,
                              "toggle": params.get("toggle_target", "").lower() or None, "split": split,
                              "game_id": game_id, "game_file": str(game), "generator": "official"}})
    return rows


def _instruction_from_grammar(grammar: str) -> str:
    marker = "Your task is to: "
    i = grammar.find(marker)
    if i < 0:
        return ""
    return grammar[i + len(marker):].split('"', 1)[0].strip().rstrip(".")
