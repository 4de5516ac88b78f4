"""ALFWorld goals: parsing instructions into structured goals, checking which goal conditions an abstract
state satisfies, and the environment-grounded reasoning trace (`explain`) for a transition.

Owns: the instruction grammar (ALFRED's goal templates, with a little leniency about articles, "the",
"in"/"on" and plurals), the validity rules for a goal (the object can be picked up and fits the receptacle,
the state change makes sense for it), and the wording of the reasoning trace.
Must not know: the engine, game files, policies, models, torch.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from dreamgym.envs.alfworld.knowledge import TASK_TYPES, camel, can_contain, lower_set, tables, type_of
from dreamgym.envs.alfworld.state import AbstractState, parse_state

NEEDED_PROP = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "hot",
               "pick_cool_then_place_in_recep": "cool"}
EXCLUDED_TARGETS = {"pick_clean_then_place_in_recep": {"sinkbasin", "bathtubbasin"},
                    "pick_heat_then_place_in_recep": {"microwave"},
                    "pick_cool_then_place_in_recep": {"fridge"}}


@functools.lru_cache(maxsize=1)
def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    """One regex per ALFRED template; more specific templates first ("put a clean X" before "put a X")."""
    out = []
    for task_type in TASK_TYPES:
        for template in tables()["templates"][task_type]:
            rx = re.escape(template.lower())
            rx = re.sub(r"\\ (a|some)\\ ", r" (?:a|an|some|the) ", rx)
            rx = rx.replace(r"\{obj\}", r"(?P<obj>[a-z]+)")
            rx = rx.replace(r"\ in\ \{recep\}", r" (?:in|on|in/on|into) (?:the )?(?P<recep>[a-z]+)")
            rx = rx.replace(r"\ on\ \{recep\}", r" (?:in|on|in/on|onto) (?:the )?(?P<recep>[a-z]+)")
            rx = rx.replace(r"\ the\ \{toggle\}", r" (?:the )?(?P<toggle>[a-z]+)")
            rx = rx.replace(r"\ at\ (?P<obj>", r" at (?:the |a |an )?(?P<obj>")
            out.append((task_type, re.compile(rf"^{rx}$")))
    out.sort(key=lambda p: p[0] == "pick_and_place_simple")  # the generic "put a X in Y" goes last
    return out


def _singular(word: str, known: frozenset[str]) -> str:
    if word in known:
        return word
    for cut in ("es", "s"):
        if word.endswith(cut) and word[: -len(cut)] in known:
            return word[: -len(cut)]
    return word


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """'put a clean mug in coffeemachine.' -> {task_type, object, receptacle, toggle, *_type}; None when the text
    is not an ALFWorld goal or names a goal no game can have (unknown object, a mug in a toaster...)."""
    if not isinstance(instruction, str):
        return None
    text = " ".join(instruction.lower().split()).strip().rstrip(".").strip()
    text = re.sub(r"^your task is to:\s*", "", text)
    pickupable = lower_set("pickupable")
    receps = frozenset(r.lower() for r in tables()["static_receptacles"])
    for task_type, rx in _patterns():
        m = rx.match(text)
        if not m:
            continue
        groups = m.groupdict()
        obj = _singular(groups["obj"], pickupable)
        if obj not in pickupable:
            return None
        goal: dict[str, Any] = {"task_type": task_type, "object": obj, "receptacle": None, "toggle": None}
        if task_type == "look_at_obj_in_light":
            toggle = groups.get("toggle")
            if toggle not in lower_set("toggleable"):
                return None
            goal["toggle"] = toggle
        else:
            recep = groups.get("recep")
            if recep is None or recep not in receps or obj not in can_contain().get(recep, ()):
                return None
            if recep in EXCLUDED_TARGETS.get(task_type, ()):
                return None
            prop = NEEDED_PROP.get(task_type)
            kinds = {"clean": "cleanable", "hot": "heatable", "cool": "coolable"}.get(prop or "")
            if kinds and obj not in lower_set(kinds):
                return None
            goal["receptacle"] = recep
        goal.update(object_type=camel(goal["object"]), receptacle_type=camel(goal["receptacle"] or ""),
                    toggle_type=camel(goal["toggle"] or ""))
        return goal
    return None


def goal_of(task: Any) -> dict[str, Any] | None:
    goal = getattr(task, "goal", None) or {}
    if goal.get("task_type") in TASK_TYPES and goal.get("object"):
        return goal
    return parse_goal(getattr(task, "instruction", "") or "")


def conditions(goal: dict[str, Any], s: AbstractState) -> list[tuple[str, bool]]:
    """The goal's conditions in the agent's knowledge, in the order they are achieved: [(text, holds), ...]."""
    obj, recep, task_type = goal["object"], goal.get("receptacle"), goal["task_type"]
    prop = NEEDED_PROP.get(task_type)

    def good(o: str) -> bool:
        return type_of(o) == obj and (prop is None or prop in s.altered.get(o, set()))

    held = s.inventory is not None and type_of(s.inventory) == obj
    if task_type == "look_at_obj_in_light":
        here = s.known.get(s.location or "", []) if s.location else []
        lamp_here_on = any(type_of(x) == goal["toggle"] and x in s.lamps_on for x in here)
        return [(f"a {obj} is in hand", held), (f"a {goal['toggle']} is on where the agent stands", lamp_here_on)]
    need = 2 if task_type == "pick_two_obj_and_place" else 1
    placed = max((sum(good(o) for o in objs) for r, objs in s.known.items() if type_of(r) == recep), default=0)
    out = [(f"a {obj} was found", held or placed > 0 or any(type_of(o) == obj for v in s.known.values() for o in v))]
    if prop:
        out.append((f"the {obj} is {prop}", (held and prop in s.altered.get(s.inventory or "", set())) or placed > 0))
    label = f"two {obj}s are" if need == 2 else f"a {prop + ' ' if prop else ''}{obj} is"
    out.append((f"{label} in a {recep}", placed >= need))
    return out


def goal_reached(task: Any, state: str) -> bool | None:
    """Whether an abstract state meets every condition of the task's goal, or None when the task has no
    well-formed goal (the caller then cannot decide from the state). Why: the synthetic environment grounds
    its success in the state the experience model wrote (`grounded_outcome`); the real game ends with a win
    exactly when these conditions first hold (checked on real episodes in the tests)."""
    goal = goal_of(task)
    if goal is None or not state.strip():
        return None
    return all(h for _, h in conditions(goal, parse_state(state)))


def grounded_outcome(task: Any, state: str, action: str, next_state: str,
                     history: Sequence[tuple[str, str]] = ()) -> tuple[float, bool] | None:
    """The family's success rule on abstract states (`dreamgym.envs`): reward 1 and the end of the episode exactly
    when `next_state` meets the goal, else reward 0 and the episode goes on; None without a well-formed goal."""
    reached = goal_reached(task, next_state)
    return None if reached is None else (float(reached), reached)


def _change(action: str, b: AbstractState, a: AbstractState, obs: str) -> str:
    verb = action.strip().lower()
    if obs.strip().startswith("Nothing happens"):
        return f"'{action}' is not an admissible command in this state, so nothing happens."
    if a.location != b.location and verb.startswith("go to"):
        seen = a.known.get(a.location or "")
        if a.is_openable(a.location) and a.location not in a.opened:
            what = f"the {a.location} is closed"
        else:
            what = (f"it holds {', '.join(seen) if seen else 'nothing'}" if seen is not None
                    else "its contents are unknown")
        return f"Going to {a.location} moves the agent there from {b.location or 'the middle of the room'}; {what}."
    if a.opened - b.opened:
        r = sorted(a.opened - b.opened)[0]
        seen = a.known.get(r, [])
        return f"Opening {r} reveals {', '.join(seen) if seen else 'nothing'} inside."
    if b.opened - a.opened:
        return f"Closing {sorted(b.opened - a.opened)[0]} hides its contents; nothing else changes."
    if a.inventory and a.inventory != b.inventory:
        return f"Taking {a.inventory} from {a.location} puts it in the agent's hands."
    if b.inventory and not a.inventory:
        return f"Moving {b.inventory} to {a.location} places it there and empties the agent's hands."
    for o, props in a.altered.items():
        new = props - b.altered.get(o, set())
        if new:
            return f"Using {a.location} makes {o} {', '.join(sorted(new))}."
    if a.lamps_on != b.lamps_on:
        on = a.lamps_on - b.lamps_on
        return f"Switching {sorted(on or (b.lamps_on - a.lamps_on))[0]} turns it {'on' if on else 'off'}."
    return f"'{action}' only observes; the agent's location, inventory and the objects do not change."


def explain(tr: Any) -> str:
    """Environment-grounded reasoning for a transition (1-3 sentences): what the action changed, which goal
    conditions hold afterwards, and why the reward is what it is."""
    b, a = parse_state(tr.state), parse_state(tr.next_state)
    obs = a.observation or ""
    first = _change(tr.action, b, a, obs)
    goal = goal_of(tr.task)
    if goal is None:
        return f"{first} The task is not a recognised ALFWorld goal, so the reward is {tr.reward:g}."
    conds = conditions(goal, a)
    listed = ", ".join(f"{text} ({'yes' if ok else 'no'})" for text, ok in conds)
    second = f"Goal conditions: {listed}."
    if tr.reward > 0:
        third = f"Every condition holds, so the task is complete and the reward is {tr.reward:g}."
    else:
        missing = [text for text, ok in conds if not ok]
        why = f"{missing[0]} is not yet true" if missing else "the engine has not registered the goal"
        third = f"The reward is {tr.reward:g} because {why}."
    return f"{first} {second} {third}"
