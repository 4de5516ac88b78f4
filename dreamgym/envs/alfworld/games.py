"""ALFWorld game generation: solvable games for the six task types, from the floor plans and goal templates
that the `alfworld` package ships, confirmed by the engine's planner, cached on disk, made in parallel.

Owns: the game specification (floor plan, receptacles, object placement, goal), the PDDL problem and game
file (`game.tw-pddl`: JSON `{pddl_domain, grammar, pddl_problem, solvable, walkthrough}`), the splits
(train / valid_seen / valid_unseen and their sizes) and their tasks (`tasks`; "test" is both valid splits),
the solvability check (the planner's plan replayed in the engine until `won`), the cache layout and manifests,
and `dreamgym alfworld generate`; a split's tasks come from the official files instead when `ALFWORLD_DATA` is
set (`dreamgym.envs.alfworld.official` reads them).
Must not know: the TextEnv contract, abstract states, policies, models, torch.

How a game is made (deterministic in (split, index, seed)):
1. The task type is `TASK_TYPES[index % 6]` (balanced); the floor plan is drawn from the split's scenes that
   ALFRED allows for that type (`GOALS_VALID`: heat/cool in kitchens, lamps in living rooms and bedrooms...).
   train and valid_seen draw from ALFRED's 96 training floor plans (valid_seen with a different seed
   namespace: seen rooms, new arrangements); valid_unseen draws from the 24 held-out test floor plans.
2. Receptacles come from the floor plan's layout file (their real ALFRED ids, e.g. `Cabinet|+00.68|+00.50|-02.20`),
   plus the static receptacles the scene lists without a precomputed pose (coffee machine, stove burners,
   toaster, towel holders...). Each receptacle gets its own location.
3. Every pickupable object type the scene contains gets 1-3 instances, each put in a receptacle that ALFRED
   says can hold it (closed cabinets and drawers included). The goal object is never placed where the goal
   wants it, so no game is won at the start. Desk and floor lamps stand on tables, desks or dressers.
4. The goal is ALFRED's PDDL goal for the type (`goal_library`), the instruction one of its templates
   ("put a clean mug in coffeemachine"), written into the grammar as the original generator does.
5. The engine's planner (fast-downward, through TextWorld) plans from the start state on the goal's objects
   and every receptacle (as ALFRED's own generator does), then the full game is loaded in the engine and the
   plan replayed until `won`; the checked plan is stored in the file as its walkthrough. Games that fail any
   step are dropped with the reason counted in the manifest (and marked UNSOLVABLE beside the file).

Deliberate simplifications (documented, not hidden): receptacles never share a location (ALFRED sometimes
lets one pose reach two drawers), no slicing or movable-receptacle tasks (ALFWorld excludes them too), and
object positions are synthesised near their receptacle (the names the agent sees do not depend on them).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import multiprocessing
import os
import random
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from dreamgym.envs.alfworld.engine import make_engine
from dreamgym.envs.alfworld.knowledge import TASK_TYPES, require, scene_type, tables
from dreamgym.envs.alfworld.official import official_root, official_rows
from dreamgym.utils.paths import atomic_write_text, cache_dir
from dreamgym.types import Task

log = logging.getLogger(__name__)

GEN_VERSION = "v1"  # bump when the generator changes what a (split, index, seed) produces
SPLITS = ("train", "valid_seen", "valid_unseen")
SPLIT_SIZES = {"valid_seen": 140, "valid_unseen": 134}
DEFAULT_TRAIN_GAMES = 3553  # ALFWorld's train size; override with DREAMGYM_ALFWORLD_TRAIN_GAMES or n=
DEFAULT_WORKERS = 2
MAX_INSTANCES = 3
LAMP_FURNITURE = ("Desk", "SideTable", "Dresser", "CoffeeTable", "Shelf", "TVStand")
# Receptacles the scene lists without a pose in the layout file, and how many of each a room has.
EXTRA_COUNTS = {"StoveBurner": 4}
# A goal receptacle that would make the state change pointless ("put a hot apple in microwave").
EXCLUDED_TARGETS = {
    "pick_clean_then_place_in_recep": {"SinkBasin", "BathtubBasin"},
    "pick_heat_then_place_in_recep": {"Microwave"},
    "pick_cool_then_place_in_recep": {"Fridge"},
}
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
UNSOLVABLE_MARK = "UNSOLVABLE"


def default_train_size() -> int:
    return int(os.environ.get("DREAMGYM_ALFWORLD_TRAIN_GAMES", DEFAULT_TRAIN_GAMES))


def split_size(split: str) -> int:
    return default_train_size() if split == "train" else SPLIT_SIZES[split]


# ----------------------------------------------------------------------------------------------------------
# Floor plans


def _alfworld_file(*parts: str) -> Path:
    require("alfworld")
    return Path(str(resources.files("alfworld").joinpath(*parts)))


@functools.lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    return (_alfworld_file("data", "alfred.pddl").read_text(), _alfworld_file("data", "alfred.twl2").read_text())


def _coords(rng: random.Random) -> tuple[float, float, float]:
    return (rng.uniform(-3, 3), rng.uniform(0, 2), rng.uniform(-3, 3))


def _alfred_id(kind: str, xyz: Iterable[float], suffix: str = "") -> str:
    return kind + "".join(f"|{v:+06.2f}" for v in xyz) + suffix


def _parse_xyz(alfred_id: str) -> tuple[float, float, float]:
    parts = alfred_id.split("|")[1:4]
    return tuple(float(p) for p in parts)  # type: ignore[return-value]


@functools.cache
def floorplan(number: int) -> dict[str, Any]:
    """The receptacles (ALFRED id, type) and object types of one floor plan, from the shipped layout files."""
    base = _alfworld_file("gen", "layouts")
    posed = json.loads((base / f"FloorPlan{number}-openable.json").read_text())
    scene_objects = set(json.loads((base / f"FloorPlan{number}-objects.json").read_text()))
    static = set(tables()["static_receptacles"])
    receptacles: list[tuple[str, str]] = []
    for rid in sorted(posed):
        kind = rid.split("|")[0]
        if kind in ("Sink", "Bathtub"):  # ALFRED's basin receptacles hang off the sink/bathtub object
            receptacles.append((f"{rid}|{kind}Basin", f"{kind}Basin"))
        elif kind in static:
            receptacles.append((rid, kind))
    have = {t for _, t in receptacles}
    rng = random.Random(f"floorplan:{number}")
    for kind in sorted(scene_objects):
        kind = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}.get(kind, kind)
        if kind in static and kind not in have:
            for _ in range(EXTRA_COUNTS.get(kind, 1)):
                xyz = _coords(rng)
                rid = _alfred_id(kind, xyz) if not kind.endswith("Basin") else \
                    _alfred_id(kind[: -len("Basin")], xyz, f"|{kind}")
                receptacles.append((rid, kind))
            have.add(kind)
    holds = tables()["holds"]
    rtypes = {t for _, t in receptacles}
    objects = sorted(t for t in scene_objects if t in set(tables()["pickupable"])
                     and any(t in holds[r] for r in rtypes))
    lamps = sorted(t for t in scene_objects if t in tables()["toggleable"])
    if not any(t in LAMP_FURNITURE for t in rtypes):
        lamps = []
    return {"number": number, "scene_type": scene_type(number), "receptacles": receptacles,
            "objects": objects, "lamps": lamps}


def split_floorplans(split: str) -> list[int]:
    if split in ("train", "valid_seen", "custom"):
        return list(tables()["train_scenes"])
    if split == "valid_unseen":
        return list(tables()["test_scenes"])
    raise ValueError(f"unknown ALFWorld split {split!r}; known: {', '.join(SPLITS)}")


# ----------------------------------------------------------------------------------------------------------
# Game specification


@dataclass
class GameSpec:
    """Everything that determines one game; `problem()` turns it into the PDDL problem."""

    split: str
    index: int
    seed: int
    floorplan: int
    task_type: str
    object_type: str
    receptacle_type: str | None
    toggle_type: str | None
    instruction: str
    receptacles: list[tuple[str, str]] = field(default_factory=list)  # (ALFRED id, type)
    objects: list[tuple[str, str, str]] = field(default_factory=list)  # (ALFRED id, type, receptacle id)

    @property
    def game_id(self) -> str:
        return f"{self.split}-{self.index:05d}-{self.task_type}-FloorPlan{self.floorplan}"

    def goal(self) -> dict[str, Any]:
        return {"task_type": self.task_type, "object": self.object_type.lower(),
                "receptacle": self.receptacle_type.lower() if self.receptacle_type else None,
                "toggle": self.toggle_type.lower() if self.toggle_type else None,
                "object_type": self.object_type, "receptacle_type": self.receptacle_type,
                "toggle_type": self.toggle_type, "floorplan": self.floorplan, "split": self.split,
                "index": self.index, "seed": self.seed, "game_id": self.game_id,
                "game_file": str(game_path(self.split, self.seed, self.game_id)), "generator": GEN_VERSION}

    def problem(self) -> str:
        """The PDDL problem in ALFRED's mangled spelling (`|` -> `_bar_`, `+` -> `_plus_`, ...)."""
        t = tables()
        holds = t["holds"]
        otypes = sorted({o for _, o, _ in self.objects})
        rtypes = sorted({r for _, r in self.receptacles})
        lines = [f"(define (problem plan_{self.split}_{self.index})", "(:domain alfred)", "(:objects",
                 "agent1 # agent"]
        lines += [f"{o}Type # otype" for o in otypes] + [f"{r}Type # rtype" for r in rtypes]
        lines += [f"{oid} # object" for oid, _, _ in self.objects]
        lines += [f"{rid} # receptacle" for rid, _ in self.receptacles]
        lines += [f"loc|{i} # location" for i in range(len(self.receptacles))] + ["loc|start # location", ")"]
        lines += ["(:init", "(atLocation agent1 loc|start)"]
        for i, (rid, rt) in enumerate(self.receptacles):
            lines += [f"(receptacleType {rid} {rt}Type)", f"(receptacleAtLocation {rid} loc|{i})"]
            if rt in t["openable"]:
                lines.append(f"(openable {rid})")
        props = (("cleanable", t["cleanable"]), ("heatable", t["heatable"]), ("coolable", t["coolable"]))
        for oid, ot, rid in self.objects:
            lines += [f"(objectType {oid} {ot}Type)", f"(inReceptacle {oid} {rid})"]
            if ot in t["toggleable"]:
                lines.append(f"(toggleable {oid})")  # lamps stay where they are: not pickupable
                continue
            lines.append(f"(pickupable {oid})")
            if ot in t["movable_receptacles"]:
                lines.append(f"(isReceptacleObject {oid})")
            lines += [f"({name} {oid})" for name, kinds in props if ot in kinds]
        lines += [f"(canContain {rt}Type {ot}Type)" for rt in rtypes for ot in otypes if ot in holds.get(rt, ())]
        lines.append(")")
        goal = t["goal_pddl"][self.task_type].format(obj=self.object_type, recep=self.receptacle_type or "",
                                                     toggle=self.toggle_type or "")
        return _mangle("\n".join(lines) + "\n" + goal)

    def game_json(self, keep_types: set[str | None] | None = None) -> dict[str, Any]:
        """The game file's content; `keep_types` keeps only objects of those types (the planner's view)."""
        domain, grammar = domain_and_grammar()
        spec = self
        if keep_types is not None:
            spec = dataclasses.replace(self, objects=[o for o in self.objects if o[1] in keep_types])
        return {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", self.instruction),
                "pddl_problem": spec.problem(), "dreamgym": asdict(self)}


def _mangle(text: str) -> str:
    """ALFRED's PDDL spelling (PlannedGameState.fix_pddl_str_chars): '#' is the type separator."""
    for a, b in (("-", "_minus_"), ("#", "-"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        text = text.replace(a, b)
    return text


def _goal_candidates(task_type: str, plan: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """(object type, receptacle type, toggle type) goals that this floor plan can host."""
    t = tables()
    holds = t["holds"]
    rtypes = sorted({r for _, r in plan["receptacles"]})
    objs = plan["objects"]
    if task_type == "look_at_obj_in_light":
        return [(o, None, lamp) for lamp in plan["lamps"] for o in objs]
    need = {"pick_clean_then_place_in_recep": ("SinkBasin", t["cleanable"]),
            "pick_heat_then_place_in_recep": ("Microwave", t["heatable"]),
            "pick_cool_then_place_in_recep": ("Fridge", t["coolable"])}.get(task_type)
    if need is not None:
        if need[0] not in rtypes:
            return []
        objs = [o for o in objs if o in need[1]]
    excluded = EXCLUDED_TARGETS.get(task_type, set())
    out: list[tuple[str, str | None, str | None]] = []
    for o in objs:
        for r in rtypes:
            if r in excluded or o not in holds[r]:
                continue
            # The object must also fit somewhere else, so it can start away from the goal receptacle.
            if any(o in holds[r2] for r2 in rtypes if r2 != r):
                out.append((o, r, None))
    return out


def build_spec(split: str, index: int, seed: int = 0, attempts: int = 20, want: dict[str, Any] | None = None,
               instruction: str | None = None) -> GameSpec | None:
    """The deterministic specification of game `index` of `split`, or None when no floor plan fits.

    `want` ({task_type, object_type, receptacle_type, toggle_type}, any subset) restricts the goal, which is how
    a task that names only its goal (e.g. a curriculum variant) gets a game; `instruction` then keeps its text."""
    want = {k: v for k, v in (want or {}).items() if v}
    rng = random.Random(f"alfworld:{GEN_VERSION}:{seed}:{split}:{index}")
    task_type = want.get("task_type") or TASK_TYPES[index % len(TASK_TYPES)]
    allowed = set(tables()["goals_valid"][task_type])
    scenes = [n for n in split_floorplans(split) if scene_type(n) in allowed]

    def fits(c: tuple[str, str | None, str | None]) -> bool:
        return all(want.get(k) in (None, v) for k, v in zip(("object_type", "receptacle_type", "toggle_type"), c))

    if want:  # only floor plans that can host the wanted goal; do not waste attempts on the others
        scenes = [n for n in scenes if any(fits(c) for c in _goal_candidates(task_type, floorplan(n)))]
    for _ in range(attempts if scenes else 0):
        plan = floorplan(rng.choice(scenes))
        cands = [c for c in _goal_candidates(task_type, plan) if fits(c)]
        if not cands:
            continue
        # Pick the object type first so frequent receptacles (cabinets) do not dominate the goal objects.
        obj = rng.choice(sorted({c[0] for c in cands}))
        obj, recep, toggle = rng.choice([c for c in cands if c[0] == obj])
        template = rng.choice(tables()["templates"][task_type])
        text = instruction or template.format(obj=obj.lower(), recep=(recep or "").lower(),
                                              toggle=(toggle or "").lower())
        spec = GameSpec(split=split, index=index, seed=seed, floorplan=plan["number"], task_type=task_type,
                        object_type=obj, receptacle_type=recep, toggle_type=toggle, instruction=text.rstrip("."),
                        receptacles=list(plan["receptacles"]))
        _place_objects(spec, plan, rng)
        return spec
    return None


def spec_for_goal(goal: dict[str, Any], instruction: str, seed: int = 0) -> GameSpec | None:
    """A game for a task known only by its goal (`goal` keys task_type/object/receptacle/toggle, or parsed from
    the instruction); deterministic in the goal, drawn from the training floor plans (split name "custom")."""
    from dreamgym.envs.alfworld.goals import parse_goal

    g = goal if goal.get("task_type") else (parse_goal(instruction) or {})
    if g.get("task_type") not in TASK_TYPES:
        return None
    want = {"task_type": g["task_type"], "object_type": g.get("object_type") or _camel(g.get("object")),
            "receptacle_type": g.get("receptacle_type") or _camel(g.get("receptacle")),
            "toggle_type": g.get("toggle_type") or _camel(g.get("toggle"))}
    key = "|".join(str(want[k]) for k in sorted(want)) + "|" + instruction
    index = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 10**8
    return build_spec("custom", index, seed, want=want, instruction=instruction)


def _camel(lower: str | None) -> str | None:
    from dreamgym.envs.alfworld.knowledge import camel

    return camel(lower) if lower else None


def _place_objects(spec: GameSpec, plan: dict[str, Any], rng: random.Random) -> None:
    holds = tables()["holds"]
    used: set[str] = set()

    def new_id(kind: str, recep_id: str) -> str:
        base = _parse_xyz(recep_id)
        while True:
            xyz = (base[0] + rng.uniform(-0.4, 0.4), base[1] + rng.uniform(0.0, 0.3), base[2] + rng.uniform(-0.4, 0.4))
            oid = _alfred_id(kind, xyz)
            if oid not in used:
                used.add(oid)
                return oid

    for kind in plan["objects"]:
        spots = [rid for rid, rt in spec.receptacles if kind in holds[rt]]
        if kind == spec.object_type and spec.receptacle_type:
            spots = [rid for rid, rt in spec.receptacles if kind in holds[rt] and rt != spec.receptacle_type]
        if not spots:
            continue
        n = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
        if kind == spec.object_type and spec.task_type == "pick_two_obj_and_place":
            n = rng.choice((2, 3))
        for _ in range(min(n, MAX_INSTANCES)):
            rid = rng.choice(spots)
            spec.objects.append((new_id(kind, rid), kind, rid))
    furniture = [rid for rid, rt in spec.receptacles if rt in LAMP_FURNITURE]
    for lamp in plan["lamps"]:
        rid = rng.choice(furniture)
        spec.objects.append((new_id(lamp, rid), lamp, rid))


# ----------------------------------------------------------------------------------------------------------
# Files, engine check, cache


def games_root(seed: int = 0) -> Path:
    return _games_root(seed, os.environ.get("DREAMGYM_CACHE", ""))


@functools.lru_cache(maxsize=64)
def _games_root(seed: int, cache_env: str) -> Path:  # cache_dir creates directories: once per root is enough
    return cache_dir("alfworld", f"games-{GEN_VERSION}", f"seed{seed}")


def game_path(split: str, seed: int, game_id: str) -> Path:
    return games_root(seed) / split / game_id / "game.tw-pddl"


def manifest_path(split: str, seed: int = 0) -> Path:
    return games_root(seed) / f"{split}.manifest.json"


def check_game(engine: Any, spec: GameSpec, replay: bool = True) -> tuple[bool, str, list[str]]:
    """Plan with the engine's planner, then (with `replay`) play the plan in the full game until `won`.

    As ALFRED's own generator does (PlannedGameState.state_to_pddl), the planner sees only the objects the
    goal is about plus every receptacle: other objects cannot block a plan (receptacles have no capacity), and
    the full kitchen makes fast-downward's search ~20x slower. Object names do not change because all
    instances of the goal's types are kept. Returns (solvable, reason when not, walkthrough)."""
    planning = spec.game_json(keep_types={spec.object_type, spec.toggle_type})
    try:
        engine.load(planning)
        gs = engine.reset()
    except KeyError as e:
        if re.fullmatch(r"'val\d+'", str(e)):
            # fast-downward's translator already proves the goal unreachable and emits its placeholder
            # "unsolvable task", which TextWorld cannot read: that is the planner's "no plan".
            return False, "planner found no plan (goal unreachable)", []
        return False, f"engine failed to load the game: KeyError: {e}"[:300], []
    except Exception as e:  # noqa: BLE001 - a game that does not load is dropped with its reason
        return False, f"engine failed to load the game: {type(e).__name__}: {e}"[:300], []
    plan = list(gs.get("extra.walkthrough") or [])
    if not plan:
        return False, "planner found no plan", []
    if not replay:
        return True, "", plan
    full = dict(spec.game_json(), walkthrough=plan)  # a stored walkthrough stops the engine re-planning
    try:
        engine.load(full)
        gs = engine.reset()
        if gs.get("won"):
            return False, "goal already satisfied at the start", plan
        for i, action in enumerate(plan):
            if action not in gs["admissible_commands"]:
                return False, f"plan step {i} {action!r} is not admissible in the full game", plan
            gs, _, _ = engine.step(action)
        if not gs.get("won"):
            return False, "replaying the plan did not win", plan
    except Exception as e:  # noqa: BLE001
        return False, f"engine failed on the full game: {type(e).__name__}: {e}"[:300], plan
    return True, "", plan


def write_game(spec: GameSpec, solvable: bool | None = None, walkthrough: list[str] | None = None,
               reason: str = "") -> Path:
    data = spec.game_json()
    if solvable is not None:
        data["solvable"] = bool(solvable)
        data["unsolvable_reason"] = reason
    if walkthrough:
        data["walkthrough"] = list(walkthrough)  # the engine then skips re-planning at every reset
    path = game_path(spec.split, spec.seed, spec.game_id)
    atomic_write_text(path, json.dumps(data))
    mark = path.parent / UNSOLVABLE_MARK  # lets listings skip dropped games without parsing their files
    if solvable is False:
        atomic_write_text(mark, reason)
    elif mark.exists():
        mark.unlink()
    return path


def read_status(path: str | Path) -> dict[str, Any] | None:
    """`{"solvable": bool|None, "walkthrough": [...]}` of a game file, or None when the file is missing/unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return {"solvable": data.get("solvable"), "walkthrough": data.get("walkthrough") or [],
            "reason": data.get("unsolvable_reason", "")}


def materialize(split: str, index: int, seed: int, engine: Any, replay: bool = True) -> dict[str, Any]:
    """Build, write and check game `index` of `split` (idempotent: a checked game on disk is reused).
    Returns a manifest row: {index, game_id, status: 'ok'|'skipped', reason, instruction, goal}."""
    spec = build_spec(split, index, seed)
    if spec is None:
        return {"index": index, "status": "skipped", "reason": "no goal fits any floor plan tried"}
    return materialize_spec(spec, engine, replay)


def materialize_spec(spec: GameSpec, engine: Any, replay: bool = True) -> dict[str, Any]:
    path = game_path(spec.split, spec.seed, spec.game_id)
    status = read_status(path)
    if status is None or status["solvable"] is None:
        ok, reason, plan = check_game(engine, spec, replay=replay)
        write_game(spec, ok, plan if ok else None, reason)
    else:
        ok, reason = bool(status["solvable"]), status["reason"]
    row = {"index": spec.index, "game_id": spec.game_id, "status": "ok" if ok else "skipped", "reason": reason,
           "instruction": spec.instruction, "goal": spec.goal()}
    if not ok:
        log.warning("alfworld: dropped %s: %s", spec.game_id, reason)
    return row


_WORKER_ENGINE = None


def _worker(args: tuple[str, int, int, bool]) -> dict[str, Any]:
    global _WORKER_ENGINE
    if _WORKER_ENGINE is None:
        _WORKER_ENGINE = make_engine()
    split, index, seed, replay = args
    t0 = time.process_time()
    try:
        row = materialize(split, index, seed, _WORKER_ENGINE, replay)
    except Exception as e:  # noqa: BLE001 - one broken game never stops a generation run
        row = {"index": index, "status": "skipped", "reason": f"{type(e).__name__}: {e}"[:300]}
    row["cpu_s"] = time.process_time() - t0
    return row


def worker_pool(workers: int) -> Any:
    """A process pool for generation. Fork when this process has a single thread (cheap, and it works when the
    caller's main module is stdin or a notebook); spawn otherwise, since forking a threaded process can deadlock."""
    methods = multiprocessing.get_all_start_methods()
    method = "fork" if "fork" in methods and threading.active_count() == 1 else "spawn"
    return multiprocessing.get_context(method).Pool(workers)


@dataclass
class GenerationReport:
    split: str
    seed: int
    requested: int
    made: int
    skipped: dict[str, int]
    seconds: float
    reused: bool
    cpu_seconds: float = 0.0  # summed over workers: the figure that does not depend on how busy the machine is

    def summary(self) -> str:
        why = "; ".join(f"{n}x {r}" for r, n in sorted(self.skipped.items(), key=lambda kv: -kv[1])) or "none"
        how = ("reused the cache" if self.reused else
               f"generated in {self.seconds:.1f}s wall, {self.cpu_seconds:.1f}s CPU over the workers")
        return f"alfworld {self.split}: {self.made}/{self.requested} games ({how}); dropped: {why}"


def _load_manifest(split: str, seed: int) -> dict[str, Any] | None:
    try:
        return json.loads(manifest_path(split, seed).read_text())
    except (OSError, ValueError):
        return None


def generate_split(split: str, n: int | None = None, seed: int = 0, workers: int = DEFAULT_WORKERS,
                   replay: bool = True, force: bool = False) -> GenerationReport:
    """Make `n` solvable games of `split` (default: the split's size), in parallel, reusing the cache.

    Indices run from 0 upward until `n` games pass the check; games dropped on the way are counted by reason in
    the report and the manifest (`<cache>/alfworld/games-v1/seed<seed>/<split>.manifest.json`)."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; known: {', '.join(SPLITS)}")
    n = split_size(split) if n is None else int(n)
    old = None if force else _load_manifest(split, seed)
    if old and old.get("complete") and len(old["games"]) >= n:
        ok = old["games"][:n]
        if all(Path(g["goal"]["game_file"]).exists() for g in ok):
            return GenerationReport(split, seed, n, n, dict(old.get("skipped", {})), 0.0, True)
    t0 = time.time()
    cpu = 0.0
    rows: dict[int, dict[str, Any]] = {}
    next_index = 0
    pool = None
    try:
        while sum(r["status"] == "ok" for r in rows.values()) < n:
            missing = n - sum(r["status"] == "ok" for r in rows.values())
            batch = [(split, i, seed, replay) for i in range(next_index, next_index + missing)]
            next_index += missing
            if next_index > 4 * n + 100:
                log.error("alfworld: giving up on %s after %d indices", split, next_index)
                break
            if workers > 1 and len(batch) > 4 and pool is None:
                pool = worker_pool(workers)
            if pool is not None:
                results = pool.imap_unordered(_worker, batch, chunksize=max(1, min(16, len(batch) // (4 * workers))))
            else:
                results = map(_worker, batch)
            for row in results:
                rows[row["index"]] = row
                cpu += row.pop("cpu_s", 0.0)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    ordered = [rows[i] for i in sorted(rows)]
    games = [r for r in ordered if r["status"] == "ok"][:n]
    skipped = Counter(r["reason"] for r in ordered if r["status"] != "ok")
    seconds = time.time() - t0
    manifest = {"split": split, "seed": seed, "generator": GEN_VERSION, "complete": True, "seconds": seconds,
                "cpu_seconds": cpu, "workers": workers, "skipped": dict(skipped), "games": games}
    atomic_write_text(manifest_path(split, seed), json.dumps(manifest))
    return GenerationReport(split, seed, n, len(games), dict(skipped), seconds, False, cpu)


def lazy_rows(split: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Manifest rows for `n` games built from their specifications only (no game files, no planner): the train
    split uses these so `tasks("train")` is quick; each game is written and checked the first time it is reset.
    The rows are cached on disk; games found unsolvable since are dropped on the way out."""
    path = games_root(seed) / f"{split}.lazy-{n}.json"
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        rows = _build_lazy_rows(split, n, seed)
        atomic_write_text(path, json.dumps(rows))
    return [r for r in rows if not (Path(r["goal"]["game_file"]).parent / UNSOLVABLE_MARK).exists()]


def _build_lazy_rows(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        spec = build_spec(split, i, seed)
        if spec is None:
            continue
        rows.append({"index": i, "game_id": spec.game_id, "status": "unchecked", "reason": "",
                     "instruction": spec.instruction, "goal": spec.goal()})
    return rows


@functools.lru_cache(maxsize=16)
def split_rows(split: str, n: int | None = None, seed: int = 0) -> tuple[dict[str, Any], ...]:
    """The games of a split as manifest rows. valid splits are generated (and checked) on first use; train
    reads a complete manifest when `dreamgym alfworld generate --split train` made one, else goes lazy."""
    n = split_size(split) if n is None else int(n)
    man = _load_manifest(split, seed)
    if man and man.get("complete") and len(man["games"]) >= n:
        return tuple(man["games"][:n])
    if split == "train":
        return tuple(lazy_rows(split, n, seed))
    report = generate_split(split, n, seed)
    log.info(report.summary())
    man = _load_manifest(split, seed) or {"games": []}
    return tuple(man["games"][:n])


def tasks(split: str = "train", n: int | None = None, seed: int = 0) -> list[Task]:
    """The tasks of a split; each `Task.goal` names its game file (`goal["game_file"]`) and its structured goal
    (task_type, object, receptacle, toggle). `n` limits the split (train: also how many games it has)."""
    if split == "test":
        out = tasks("valid_unseen", seed=seed) + tasks("valid_seen", seed=seed)
        return out[:n] if n is not None else out
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; known: {', '.join((*SPLITS, 'test'))}")
    if official_root() is not None:
        rows = official_rows(split)
        rows = rows[:n] if n is not None else rows
    else:
        rows = list(split_rows(split, n, seed))
    return [Task(id=f"alfworld-{r['game_id']}", env="alfworld", instruction=r["instruction"], goal=dict(r["goal"]),
                 split=split) for r in rows]


# ----------------------------------------------------------------------------------------------------------
# CLI: dreamgym alfworld generate


def cli_main(argv: list[str] | None = None) -> int:
    from dreamgym.config import CommandParser, at_least

    p = CommandParser(prog="dreamgym alfworld", description="ALFWorld tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate (or reuse) solvable games for the ALFWorld splits")
    g.add_argument("--split", action="append", choices=SPLITS,
                   help="split to generate (repeatable; default: valid_seen and valid_unseen, plus train with --train)")
    g.add_argument("--train", action="store_true", help="also generate the whole train split eagerly")
    g.add_argument("--n", type=at_least(1), default=None, help="games per split (default: the split's size)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--workers", type=at_least(1), default=DEFAULT_WORKERS)
    g.add_argument("--force", action="store_true", help="ignore the cached manifest and check every game again")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    splits = args.split or (["valid_seen", "valid_unseen"] + (["train"] if args.train else []))
    code = 0
    for split in splits:
        report = generate_split(split, args.n, seed=args.seed, workers=args.workers, force=args.force)
        split_rows.cache_clear()
        print(report.summary())
        print(f"  manifest: {manifest_path(split, args.seed)}")
        if report.made < report.requested:
            code = 1
    return code
