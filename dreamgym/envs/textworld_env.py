"""TextWorld: a `TextEnv` adapter for any TextWorld game (`tw-make` / `textworld.generator`, `.z8`), and the
environment family surface for a pool of generated games.

Owns: generating and caching the family's games (seeded `make_game` + `compile_game`, in parallel), the
adapter (`TextWorldEnv`: cleaned observations, outcome reward, step limit, admissible commands and the engine's
winning policy in `info`), the abstract state (objective, observation, room, inventory, admissible commands),
policies, goal parsing, `explain` and `corpus_text`.
Must not know: ALFWorld, models, torch, trainers.

Games in the pool: `GAME_OPTIONS` (3 rooms, 6 objects, quests of 3 actions, house theme); train uses seeds
0..n-1 (default 20 games), test seeds 1000..1000+n-1 (default 10). Any other `.z8` game runs through
`TextWorldEnv(game_files=[...])`. Because TextWorld objectives are free text, the abstract state lists the
admissible commands itself and `admissible_from_state` reads them back.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import json
import logging
import multiprocessing
import os
import random
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.utils.paths import atomic_write_text, cache_dir
from dreamgym.types import Task, Transition

log = logging.getLogger(__name__)

GEN_VERSION = "v1"
GAME_OPTIONS = {"nb_rooms": 3, "nb_objects": 6, "quest_length": 3}
SPLIT_SEEDS = {"train": (0, 20), "test": (1000, 10)}  # (first seed, default number of games)
MAX_STEPS = 50
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""
INSTALL_HINT = ("the TextWorld environment needs `textworld` "
                "(pip install textworld==1.7.0; it ships Inform7 and jericho)")
TW_VERBS = ("go", "take", "open", "close", "put", "insert", "drop", "eat", "unlock", "lock", "examine", "recover",
            "retrieve", "pick", "grab", "make", "ensure", "place", "move", "get", "try", "check", "set", "attempt")


def _textworld() -> Any:
    try:
        import textworld  # noqa: PLC0415 - optional dependency, imported when used
        import textworld.generator  # noqa: F401, PLC0415
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    return textworld


# ----------------------------------------------------------------------------------------------------------
# Games


def games_dir() -> Path:
    opts = "-".join(f"{k}{v}" for k, v in sorted(GAME_OPTIONS.items()))
    return cache_dir("textworld", f"games-{GEN_VERSION}", opts)


def game_file(seed: int) -> Path:
    return games_dir() / f"tw-seed{seed}.z8"


def make_game(seed: int) -> dict[str, Any]:
    """Generate and compile the game for `seed` (reused when cached). Returns {seed, game_file, objective,
    walkthrough} or {seed, error} when TextWorld could not make it."""
    meta_path = games_dir() / f"tw-seed{seed}.meta.json"
    if meta_path.exists() and game_file(seed).exists():
        return json.loads(meta_path.read_text())
    tw = _textworld()
    try:
        opts = tw.GameOptions()
        opts.seeds = seed
        opts.nb_rooms = GAME_OPTIONS["nb_rooms"]
        opts.nb_objects = GAME_OPTIONS["nb_objects"]
        opts.quest_length = GAME_OPTIONS["quest_length"]
        opts.path = str(game_file(seed))
        opts.force_recompile = True
        game = tw.generator.make_game(opts)
        tw.generator.compile_game(game, opts)
    except Exception as e:  # noqa: BLE001 - a seed TextWorld cannot build is skipped with its reason
        return {"seed": seed, "error": f"{type(e).__name__}: {e}"[:300]}
    meta = {"seed": seed, "game_file": str(game_file(seed)), "objective": game.objective,
            "walkthrough": list(game.metadata.get("walkthrough") or [])}
    atomic_write_text(meta_path, json.dumps(meta))
    return meta


def make_games(seeds: list[int], workers: int = 2) -> list[dict[str, Any]]:
    """Generate (or reuse) several games, in parallel when more than one is missing."""
    missing = [s for s in seeds if not (games_dir() / f"tw-seed{s}.meta.json").exists()]
    if workers > 1 and len(missing) > 1:
        # Fork when single-threaded (cheap, works from stdin/notebooks). Otherwise (forking threads can hang) each
        # game is made by a fresh interpreter that imports this module only: multiprocessing's spawn re-ran the
        # user's whole script in every child unless it was guarded by `if __name__ == "__main__":`.
        if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
            with multiprocessing.get_context("fork").Pool(min(workers, len(missing))) as pool:
                pool.map(make_game, missing)
        else:
            with concurrent.futures.ThreadPoolExecutor(min(workers, len(missing))) as ex:
                list(ex.map(_make_game_in_child, missing))
    out = [make_game(s) for s in seeds]  # read back; a seed a child could not make is tried here, its error kept
    for m in out:
        if "error" in m:
            log.warning("textworld: skipped seed %s: %s", m["seed"], m["error"])
    return [m for m in out if "error" not in m]


def _make_game_in_child(seed: int) -> None:
    """`make_game(seed)` in a new Python process that imports this package (from where this process found it) and
    nothing of the caller's script; what it writes is read back from the cache."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    subprocess.run([sys.executable, "-c", "import sys; from dreamgym.envs.textworld_env import make_game; "
                    "make_game(int(sys.argv[1]))", str(seed)], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def tasks(split: str = "train", n: int | None = None) -> list[Task]:
    """The pool's tasks; `Task.goal["game_file"]` is the compiled game, `instruction` its objective."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown TextWorld split {split!r}; known: {', '.join(SPLIT_SEEDS)}")
    first, default_n = SPLIT_SEEDS[split]
    metas = make_games(list(range(first, first + (default_n if n is None else n))))
    return [Task(id=f"textworld-seed{m['seed']}", env="textworld", instruction=m["objective"],
                 goal={"game_file": m["game_file"], "seed": m["seed"], "walkthrough": m["walkthrough"]}, split=split)
            for m in metas]


_pool_tasks = tasks  # TextWorldEnv's `tasks` parameter shadows the function inside its __init__


# ----------------------------------------------------------------------------------------------------------
# Observations and abstract state

_ART = re.compile(r"^[\s$\\|/_<>]*$")


def clean_observation(text: str) -> str:
    """Drop TextWorld's ASCII-art banner and the trailing `>` prompt / status line; keep the prose."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith(">"):
            break  # the prompt line (and the status bar that follows it on the same line)
        if line.strip() and _ART.match(line) and sum(c in "$\\|/_" for c in line) > 5:
            continue
        lines.append(line.rstrip())
    out = "\n".join(lines).strip()
    return re.sub(r"\n{3,}", "\n\n", out) or "Nothing happens."


def abstract_state(objective: str, observation: str, room: str, inventory: str, actions: list[str]) -> str:
    return "\n".join([f"Objective: {' '.join(objective.split())}", f"Observation: {' '.join(observation.split())}",
                      f"Room: {room or 'unknown'}", f"Inventory: {' '.join(inventory.split()) or 'nothing'}",
                      f"Actions: {'; '.join(sorted(actions))}"])


def _line(state: str, key: str) -> str:
    m = re.search(rf"^{key}:[ \t]*(.*)$", state, flags=re.M)
    return m.group(1).strip() if m else ""


def admissible_from_state(state: str) -> list[str]:
    """The commands the state lists on its `Actions:` line (TextWorld's grammar is per game, so the state
    carries them)."""
    return sorted({a.strip() for a in _line(state, "Actions").split(";") if a.strip()})


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """A TextWorld objective -> {"objective", "steps"}: the imperative steps it asks for (None when there are
    none, e.g. garbage or an empty string)."""
    if not isinstance(instruction, str) or not instruction.strip():
        return None
    steps = []
    for sentence in re.split(r"(?<=[.!?])\s+", instruction.strip()):
        s = sentence.lower()
        for verb in TW_VERBS:
            m = re.search(rf"\b{verb}\b\s+([a-z][a-z' -]{{2,}})", s)
            # The first sentences of a TextWorld objective are a welcome ("...you've just entered TextWorld!").
            if m and "textworld" not in s and not s.startswith(("here is", "welcome", "who")):
                steps.append(f"{verb} {m.group(1).strip().rstrip('.!?')}")
                break
    return {"objective": " ".join(instruction.split()), "steps": steps} if steps else None


# ----------------------------------------------------------------------------------------------------------
# Environment


class TextWorldEnv(TextEnv):
    """Any TextWorld game as a `TextEnv`. Give `tasks` (from `tasks(split)`), or `game_files` (any `.z8`)."""

    env_family = "textworld"
    ENGINE_CACHE = 4  # engines kept loaded (loading a .z8 and its .json takes ~1 s)

    def __init__(self, split: str = "train", max_steps: int = MAX_STEPS, n: int | None = None,
                 tasks: list[Task] | None = None, game_files: list[str] | None = None):
        super().__init__()
        if tasks is None and game_files is not None:
            tasks = [Task(id=f"textworld-{Path(p).stem}", env="textworld", instruction="", goal={"game_file": str(p)},
                          split=split) for p in game_files]
        self.tasks = list(tasks) if tasks is not None else _pool_tasks(split, n)
        if not self.tasks:
            raise ValueError("TextWorldEnv needs at least one game")
        self.max_steps = int(max_steps)
        self._engines: dict[str, Any] = {}
        self.task = self.tasks[0]
        self.t = 0
        self.room = ""

    def _engine(self, path: str) -> Any:
        if path not in self._engines:
            tw = _textworld()
            # jericho warns that TextWorld's games are "unsupported" for its own action detection; TextWorld
            # computes the admissible commands itself, so the warning is noise here.
            warnings.filterwarnings("ignore", message=r".*(unsupported game|not fully supported).*")
            infos = tw.EnvInfos(admissible_commands=True, won=True, lost=True, policy_commands=True, objective=True,
                                inventory=True)
            if len(self._engines) >= self.ENGINE_CACHE:
                old = next(iter(self._engines))
                self._engines.pop(old).close()
            self._engines[path] = tw.start(path, request_infos=infos)
        return self._engines[path]

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.get("task")
        if task is None:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        elif not isinstance(task, Task):
            task = Task.from_dict(task)
        path = (task.goal or {}).get("game_file")
        if not path or not Path(path).exists():
            raise FileNotFoundError(f"TextWorld task {task.id!r} names no existing game file ({path!r})")
        self.engine = self._engine(path)
        gs = self.engine.reset()
        if not task.instruction:
            task = Task(id=task.id, env=task.env, instruction=gs.objective or "", goal=task.goal, split=task.split)
        self.task, self.t, self.room = task, 0, ""
        obs = clean_observation(gs.feedback)
        return obs, self._info(gs, obs)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        gs, _, _ = self.engine.step(" ".join(action.strip().split()))
        obs = clean_observation(gs.feedback)
        won, lost = bool(gs.won), bool(gs.lost)
        truncated = not (won or lost) and self.t >= self.max_steps
        return obs, 1.0 if won else 0.0, won or lost, truncated, self._info(gs, obs)

    def _info(self, gs: Any, obs: str) -> dict[str, Any]:
        m = re.search(r"-= (.+?) =-", gs.feedback or "")
        if m:
            self.room = m.group(1)
        adm = list(gs.admissible_commands or [])
        state = abstract_state(self.task.instruction, obs, self.room, gs.inventory or "", adm)
        return {"won": bool(gs.won), "task": self.task, "admissible_actions": adm, "raw_obs": gs.feedback,
                "abstract_state": state, "expert_plan": list(gs.policy_commands or [])}

    def close(self) -> None:
        for eng in self._engines.values():
            try:
                eng.close()
            except Exception:  # noqa: BLE001 - an engine that is already gone is closed
                pass
        self._engines.clear()
        super().close()


def make_env(split: str = "train", **kwargs: Any) -> TextWorldEnv:
    return TextWorldEnv(split=split, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# Policies


class ExpertPolicy:
    """Follows the engine's winning policy, recomputed by TextWorld from the current state at every step."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> str:
        plan = info.get("expert_plan") or []
        return plan[0] if plan else "look"


class NoisyPolicy(ExpertPolicy):
    """The expert with a 25% chance of a random admissible command; it recovers because the plan is recomputed."""

    def __init__(self, seed: int = 0, p: float = 0.25):
        super().__init__(seed)
        self.p = p

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or []
        if adm and self.rng.random() < self.p:
            return self.rng.choice(adm)
        return super().act(obs, info)


class RandomPolicy(ExpertPolicy):
    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.rng.choice(info.get("admissible_actions") or ["look"])


POLICIES = {"oracle": ExpertPolicy, "expert": ExpertPolicy, "noisy": NoisyPolicy, "random": RandomPolicy}
EXPERT_POLICY = "expert"
"""The scripted policy whose episodes are SFT demonstrations (`EnvFamily.EXPERT_POLICY`)."""
EXPLORE_POLICIES = {"noisy": 0.7, "random": 0.3}
"""The exploring scripted policies and their weights, DPO's demonstrations (`EnvFamily.EXPLORE_POLICIES`)."""


# ----------------------------------------------------------------------------------------------------------
# Reasoning trace and tokenizer corpus


def explain(tr: Transition) -> str:
    """What the command changed (room, inventory, or nothing), and why the reward is what it is."""
    room_b, room_a = _line(tr.state, "Room"), _line(tr.next_state, "Room")
    inv_b, inv_a = _line(tr.state, "Inventory"), _line(tr.next_state, "Inventory")
    obs = _line(tr.next_state, "Observation")
    if room_a != room_b:
        first = f"'{tr.action}' moves the agent from the {room_b} to the {room_a}."
    elif inv_a != inv_b:
        first = f"'{tr.action}' changes what the agent carries: {inv_a.rstrip('.')}."
    elif tr.action not in admissible_from_state(tr.state):
        first = f"'{tr.action}' is not one of the commands this state admits, so the game answers: {obs[:80]}"
    else:
        first = f"'{tr.action}' leaves the room and inventory as they were; the game answers: {obs[:80]}"
    goal = parse_goal(tr.task.instruction) or {"steps": []}
    todo = "; ".join(goal["steps"][:3]) or "the objective"
    if tr.reward > 0:
        return f"{first} This completes the objective ({todo}), so the episode ends with reward {tr.reward:g}."
    return f"{first} The objective ({todo}) is not complete yet, so the reward is {tr.reward:g}."


@functools.lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    """Expand TextWorld's house text grammar files with a small deterministic expander (TextWorld's own
    `Grammar.expand` needs a game's context and takes seconds), then add commands and engine sentences."""
    spec = importlib.util.find_spec("textworld")  # locate the data without importing TextWorld (slow import)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(INSTALL_HINT)
    base = Path(list(spec.submodule_search_locations)[0]) / "generator" / "data" / "text_grammars"
    rules: dict[str, list[str]] = {}
    for path in sorted(base.glob("house_*.twg")):
        for line in path.read_text().splitlines():
            if line and not line.startswith("#") and ":" in line:
                key, alts = line.split(":", 1)
                rules[key.strip()] = [x.strip() for x in alts.split(";") if x.strip()]
    rng = random.Random(0)
    nouns = sorted({w for k, v in rules.items() if k.endswith("_noun") for w in v
                    if "#" not in w and "(" not in w and w != "None"})
    rooms = sorted({w for k, v in rules.items() if k.endswith("(r)_noun") for w in v})

    def expand(text: str, depth: int = 0) -> str:
        text = re.sub(r"\[[^\]]*\]", "", text)  # Inform7 snippets
        for _ in range(20):
            m = re.search(r"#([^#]+)#", text)
            if not m:
                break
            alts = rules.get(m.group(1))
            rep = expand(rng.choice(alts), depth + 1) if alts and depth < 5 else ""
            text = text[:m.start()] + rep + text[m.end():]
        text = re.sub(r"\((r)\)", lambda _: rng.choice(rooms), text)
        text = re.sub(r"\((?:o|k|f|c|s|d|obj|o\|k\|f|o\|f|c\|s|c\|d|d\|c)\)", lambda _: rng.choice(nouns), text)
        return " ".join(text.replace(" | ", " ").split())

    lines: list[str] = []
    seen: set[str] = set()
    for key in sorted(rules):
        for alt in rules[key][:6]:
            text = expand(alt)
            if len(text) > 2 and "(" not in text and "{" not in text and text not in seen:
                seen.add(text)
                lines.append(text)
    for noun in nouns:
        room = rng.choice(rooms)
        lines += [f"take {noun}", f"open {noun}", f"examine {noun}", f"put {noun} on {rng.choice(nouns)}",
                  f"insert {noun} into {rng.choice(nouns)}", f"unlock {noun} with {rng.choice(nouns)}",
                  f"You pick up the {noun} from the ground.", f"-= {room.title()} =-",
                  f"You are carrying: a {noun}."]
    lines += [f"go {d}" for d in ("north", "south", "east", "west")]
    lines += ["You are carrying nothing.", "That's not a verb I recognise.", "You can't go that way.",
              "*** The End ***", "Your score has just gone up by one point.", "inventory", "look"]
    return tuple(lines)


def corpus_text() -> list[str]:
    """Lines expanded from TextWorld's house text grammar (deterministic, no games needed)."""
    return list(_corpus())
