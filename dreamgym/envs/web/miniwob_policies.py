"""Scripted MiniWoB++ policies that read the accessibility-tree state: the oracle, a noisy oracle, and random.

Owns: the oracle's rule for each task the family plays (which element the goal names, what to type, when to
submit), and the noisy and random variants built on it.
Must not know: browsers, pages, BrowserGym's code; it reads only the abstract state (`dreamgym.envs.web.axtree`).

The oracle decides each step from the current state (plus the actions it already took, for what the page does not
show: a button of a sequence already pressed, a password already typed), so it recovers when a noisy step changed
the page. A task it has no rule for (a curriculum variant on another page) gets a click on the element whose name
the goal quotes, else on a submit button.
"""

from __future__ import annotations

import random
import re
from typing import Any

from dreamgym.envs.web.axtree import Element, admissible_from_state, goal_values, parse_state
from dreamgym.types import Task

_ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4, "first": 0, "second": 1, "third": 2}
_SUBMIT_NAMES = ("submit", "login", "ok", "search")


def _by_name(els: list[Element], name: str, roles: tuple[str, ...] | None = None) -> Element | None:
    for e in els:
        if e.bid and e.name == name and (roles is None or e.role in roles):
            return e
    low = name.lower()
    for e in els:
        if e.bid and e.name.lower() == low and (roles is None or e.role in roles):
            return e
    return None


def _clickable_with_text(els: list[Element], text: str) -> Element | None:
    """A clickable element whose own name or first text child is `text` (a MiniWoB link is a span)."""
    for i, e in enumerate(els):
        if e.bid and e.clickable:
            if e.name == text:
                return e
            if i + 1 < len(els) and els[i + 1].bid is None and els[i + 1].depth > e.depth and els[i + 1].name == text:
                return e
    return None


def _submit(els: list[Element]) -> Element | None:
    for e in els:
        if e.bid and e.role == "button" and e.name.lower() in _SUBMIT_NAMES:
            return e
    return None


def _value(e: Element) -> str:
    m = re.search(r"value='((?:[^'\\]|\\.)*)'", e.attrs)
    return m.group(1) if m else ""


def _checked(e: Element) -> bool:
    return "checked='true'" in e.attrs


def _click(e: Element | None) -> str | None:
    return None if e is None else f"click({e.bid!r})"


class OraclePolicy:
    """Solves each task of `miniwob_tasks.TRAIN_TASKS` and `TEST_ONLY` from the state."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.subdomain = ""
        self.clicked: list[str] = []

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.subdomain = str((task.goal or {}).get("subdomain", ""))
        self.clicked = []

    def act(self, obs: str, info: dict[str, Any]) -> str:
        action = self.oracle_action(info["abstract_state"])
        self.clicked.append(action)
        return action

    def oracle_action(self, state: str) -> str:
        goal, _, els, _ = parse_state(state)
        action = _rule(self.subdomain, goal, els, self.clicked)
        if action is None:
            quoted = goal_values(goal)
            action = _click(_clickable_with_text(els, quoted[0]) if quoted else None) or _click(_submit(els))
        if action is None:
            adm = admissible_from_state(state)
            action = adm[0] if adm else "noop()"
        return action


def _rule(sub: str, goal: str, els: list[Element], clicked: list[str]) -> str | None:
    quoted = goal_values(goal)
    textboxes = [e for e in els if e.bid and e.role in ("textbox", "searchbox")]
    if sub == "click-test":
        return _click(next((e for e in els if e.bid and e.role == "button"), None))
    if sub in ("click-test-2", "click-button", "click-button-sequence"):
        names = re.findall(r"button (\w+)", goal) if sub != "click-button" else quoted
        for name in names:
            target = _by_name(els, name, ("button",))
            if target is not None and _click(target) not in clicked:
                return _click(target)
        return None
    if sub == "click-link":
        return _click(_clickable_with_text(els, quoted[0])) if quoted else None
    if sub in ("click-dialog", "click-dialog-2"):
        label = quoted[0] if quoted else "x"
        return _click(_by_name(els, "Close" if label.lower() == "x" else label, ("button",)))
    if sub == "click-checkboxes":
        m = re.match(r"Select (.*) and click Submit", goal)
        wanted = set() if not m or m.group(1) == "nothing" else {w.strip() for w in m.group(1).split(",")}
        for e in els:
            if e.bid and e.role == "checkbox" and (e.name in wanted) != _checked(e):
                return _click(e)
        return _click(_submit(els))
    if sub == "click-option":
        m = re.match(r"Select (.*) and click Submit", goal)
        target = _by_name(els, m.group(1), ("radio",)) if m else None
        if target is not None and not _checked(target):
            return _click(target)
        return _click(_submit(els))
    if sub in ("enter-text", "enter-text-2", "enter-password", "login-user"):
        values = quoted
        if sub == "enter-text-2" and values:
            values = [values[0].upper() if "upper" in goal else values[0].lower()]
        if sub == "enter-password" and values:
            values = [values[0], values[0]]
        for box, value in zip(textboxes, values):
            fill = f"fill({box.bid!r}, {value!r})"
            # A password field does not show its value in the tree: a fill already made counts as done.
            if _value(box) != value and fill not in clicked:
                return fill
        return _click(_submit(els))
    if sub in ("focus-text", "focus-text-2"):
        m = re.search(r"the (\w+) input", goal)
        i = _ORDINALS.get(m.group(1), 0) if m else 0
        return _click(textboxes[i]) if i < len(textboxes) else None
    if sub == "choose-list":
        m = re.match(r"Select (.*) from the list", goal)
        combo = next((e for e in els if e.bid and e.role == "combobox"), None)
        if m and combo is not None and _value(combo) != m.group(1):
            return f"select_option({combo.bid!r}, {m.group(1)!r})"
        return _click(_submit(els))
    if sub == "click-tab":
        m = re.search(r"Tab #(\d+)", goal)
        return _click(_by_name(els, f"Tab #{m.group(1)}", ("link", "tab"))) if m else None
    if sub == "click-collapsible":
        tab = next((e for e in els if e.bid and e.role == "tab" and e.name.startswith("Section")), None)
        if tab is not None and "expanded=False" in tab.attrs:
            return _click(tab)
        return _click(_submit(els))
    return None


class NoisyPolicy(OraclePolicy):
    """The oracle with a 25% chance of a random admissible action (a wrong click, a wrong fill) instead."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or admissible_from_state(info["abstract_state"])
        if adm and self.rng.random() < 0.25:
            return self.rng.choice(adm)
        return super().act(obs, info)


class RandomPolicy(OraclePolicy):
    """A random admissible action each step."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or admissible_from_state(info["abstract_state"])
        return self.rng.choice(adm) if adm else "noop()"


POLICIES = {"oracle": OraclePolicy, "expert": OraclePolicy, "noisy": NoisyPolicy, "random": RandomPolicy}
