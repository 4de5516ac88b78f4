"""What ALFRED knows about its household: object and receptacle types, which receptacle holds what, which
objects can be cleaned/heated/cooled/toggled, the six task types and their goal templates.

Owns: one read-only view of the tables the `alfworld` package ships (`alfworld.gen.constants`,
`alfworld.gen.goal_library`), in the lower-case spelling the engine prints ("sinkbasin", "alarmclock"), and
the import check that says exactly what to install when `alfworld` is missing.
Must not know: the engine, game files, environments, models, torch.
"""

from __future__ import annotations

import functools
import importlib
import re
from types import ModuleType
from typing import Any

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

INSTALL_HINT = ("the ALFWorld environment needs the `alfworld` package and its engine: "
                "pip install alfworld==0.4.2 (it brings textworld==1.7.0 and fast-downward-textworld; "
                "put the virtualenv's bin first on PATH while it builds fast-downward from source)")


class ALFWorldMissing(ImportError):
    """Raised when `alfworld`/`textworld`/`fast_downward` cannot be imported; the message says what to install."""


def require(module: str) -> ModuleType:
    """Import one of the engine's modules or raise `ALFWorldMissing` naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ALFWorldMissing(f"cannot import {module!r} ({e}); {INSTALL_HINT}") from e


@functools.lru_cache(maxsize=1)
def tables() -> dict[str, Any]:
    """All the lookup tables, built once from `alfworld.gen.constants` and `goal_library`."""
    C = require("alfworld.gen.constants")
    G = require("alfworld.gen.goal_library")
    movable = set(C.MOVABLE_RECEPTACLES)
    # Static receptacles are the ones the agent goes to; movable ones (mug, bowl, ...) are plain objects here,
    # as in ALFWorld's six task types (the movable-receptacle tasks are excluded there too).
    static = sorted(set(C.VAL_RECEPTACLE_OBJECTS) - movable)
    holds = {rt: frozenset(o for o in objs if not o.endswith("Sliced"))
             for rt, objs in C.VAL_RECEPTACLE_OBJECTS.items() if rt in static}
    pickupable = sorted({o for objs in holds.values() for o in objs})
    camel = {t.lower(): t for t in set(C.OBJECTS) | set(static) | {"SinkBasin", "BathtubBasin"}}
    actions = C.VAL_ACTION_OBJECTS
    return {
        "static_receptacles": static,
        "movable_receptacles": sorted(movable),
        "holds": holds,  # receptacle type -> object types it can contain (the engine's canContain facts)
        "pickupable": pickupable,
        "openable": sorted(C.OPENABLE_CLASS_SET & set(static)),
        "cleanable": sorted(set(actions["Cleanable"]) & set(pickupable)),
        "heatable": sorted(set(actions["Heatable"]) & set(pickupable)),
        "coolable": sorted(set(actions["Coolable"]) & set(pickupable)),
        "toggleable": sorted(actions["Toggleable"]),
        "camel": camel,
        "scene_type": {k: list(v) for k, v in C.SCENE_TYPE.items()},
        "goals_valid": {k: sorted(v) for k, v in C.GOALS_VALID.items()},
        "train_scenes": list(C.TRAIN_SCENE_NUMBERS),
        "test_scenes": list(C.TEST_SCENE_NUMBERS),
        "templates": {t: list(G.gdict[t]["templates"]) for t in TASK_TYPES},
        "goal_pddl": {t: G.gdict[t]["pddl"] for t in TASK_TYPES},
    }


# Lower-case views (the engine prints "sinkbasin 1", "alarmclock 2").
@functools.cache
def lower_set(key: str) -> frozenset[str]:
    return frozenset(x.lower() for x in tables()[key])


@functools.lru_cache(maxsize=1)
def can_contain() -> dict[str, frozenset[str]]:
    """receptacle type (lower) -> object types (lower) the engine lets you put in it."""
    return {rt.lower(): frozenset(o.lower() for o in objs) for rt, objs in tables()["holds"].items()}


def camel(lower_type: str) -> str | None:
    """'sinkbasin' -> 'SinkBasin'; None for an unknown type."""
    return tables()["camel"].get(lower_type.lower())


_NAME_RE = re.compile(r"^([a-z]+) (\d+)$")


def type_of(name: str) -> str:
    """'cabinet 3' -> 'cabinet' (the engine's names are '<type> <number>')."""
    m = _NAME_RE.match(name.strip())
    return m.group(1) if m else name.strip().split(" ")[0]


@functools.cache
def scene_type(floorplan: int) -> str:
    for kind, numbers in tables()["scene_type"].items():
        if floorplan in numbers:
            return kind
    raise ValueError(f"FloorPlan{floorplan} is not an ALFRED scene")
