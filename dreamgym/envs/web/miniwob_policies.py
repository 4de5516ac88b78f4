"""Scripted MiniWoB++ policies that read the accessibility-tree state: the oracle, a noisy oracle, and random.

Owns: the oracle's rule for each task it plays (`ORACLE_TASKS`: which element the goal names, what to type, when
to submit), and the noisy and random variants built on it.
Must not know: browsers, pages, BrowserGym's code; it reads only the abstract state (`dreamgym.envs.web.axtree`).

The oracle decides each step from the current state (plus the actions it already took, for what the page does not
show: a button of a sequence already pressed, a password already typed), so it recovers when a noisy step changed
the page. Where its rule finds nothing to do on a page, it clicks the element whose name the goal quotes, else a
submit button. A task it has no rule for is refused when the episode starts (`NoOracleRule`, also for the noisy
oracle built on it), so a collection names those tasks among its failed episodes instead of recording an "oracle"
that guesses; the random policy plays every task.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from dreamgym.envs.web.axtree import Element, admissible_from_state, checked, field_value, goal_values, parse_state
from dreamgym.types import Task

ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4, "first": 0, "second": 1, "third": 2}
"""The position a goal's ordinal names ("Focus into the 2nd input textbox."), counted from 0."""
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


def _click(e: Element | None) -> str | None:
    return None if e is None else f"click({e.bid!r})"


class NoOracleRule(ValueError):
    """The oracle has no rule for a task (see `ORACLE_TASKS`)."""


class OraclePolicy:
    """Solves each task of `ORACLE_TASKS` from the state; refuses any other task at `reset`."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.subdomain = ""
        self.clicked: list[str] = []

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.subdomain = str((task.goal or {}).get("subdomain", ""))
        self.clicked = []
        if self.subdomain not in _RULES:
            raise NoOracleRule(f"the MiniWoB++ oracle has no rule for task {self.subdomain or task.id!r}; it plays "
                               f"{len(ORACLE_TASKS)} tasks ({', '.join(ORACLE_TASKS)}); the random policy plays all")

    def act(self, obs: str, info: dict[str, Any]) -> str:
        action = self.oracle_action(info["abstract_state"])
        self.clicked.append(action)
        return action

    def oracle_action(self, state: str) -> str:
        goal, _, els, _ = parse_state(state)
        rule = _RULES.get(self.subdomain)
        action = rule(goal, els, self.clicked) if rule is not None else None
        if action is None:
            quoted = goal_values(goal)
            action = _click(_clickable_with_text(els, quoted[0]) if quoted else None) or _click(_submit(els))
        if action is None:
            adm = admissible_from_state(state)
            action = adm[0] if adm else "noop()"
        return action


# A rule reads (goal, elements of the state, actions taken so far) and returns the next action, or None when it
# finds nothing to do on this page.
Rule = Callable[[str, list[Element], list[str]], str | None]


def _textboxes(els: list[Element]) -> list[Element]:
    return [e for e in els if e.bid and e.role in ("textbox", "searchbox")]


def _first_button(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    return _click(next((e for e in els if e.bid and e.role == "button"), None))


def _buttons(names_of: Callable[[str], list[str]]) -> Rule:
    """Each button `names_of(goal)` names, once, in order."""

    def rule(goal: str, els: list[Element], clicked: list[str]) -> str | None:
        for name in names_of(goal):
            target = _by_name(els, name, ("button",))
            if target is not None and _click(target) not in clicked:
                return _click(target)
        return None

    return rule


def _link_quoted(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    quoted = goal_values(goal)
    return _click(_clickable_with_text(els, quoted[0])) if quoted else None


def _dialog(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    quoted = goal_values(goal)
    label = quoted[0] if quoted else "x"
    return _click(_by_name(els, "Close" if label.lower() == "x" else label, ("button",)))


def _checkboxes(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    m = re.match(r"Select (.*) and click Submit", goal)
    wanted = set() if not m or m.group(1) == "nothing" else {w.strip() for w in m.group(1).split(",")}
    for e in els:
        if e.bid and e.role == "checkbox" and (e.name in wanted) != bool(checked(e)):
            return _click(e)
    return _click(_submit(els))


def _option(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    m = re.match(r"Select (.*) and click Submit", goal)
    target = _by_name(els, m.group(1), ("radio",)) if m else None
    if target is not None and not checked(target):
        return _click(target)
    return _click(_submit(els))


def _fill_then_submit(values_of: Callable[[str, list[str]], list[str]]) -> Rule:
    """Fill the text fields in order with `values_of(goal, quoted values)`, then submit."""

    def rule(goal: str, els: list[Element], clicked: list[str]) -> str | None:
        for box, value in zip(_textboxes(els), values_of(goal, goal_values(goal))):
            fill = f"fill({box.bid!r}, {value!r})"
            # A password field does not show its value in the tree: a fill already made counts as done.
            if field_value(box) != value and fill not in clicked:
                return fill
        return _click(_submit(els))

    return rule


def _after_popup(rule: Rule) -> Rule:
    """`rule` on a page where focusing a field may open a popup that disables the form ("Your session is expiring
    soon", OK / Cancel): while the form is disabled, the popup's Cancel keeps the session; once it is closed, `rule`
    sees only the actions since (the fill the popup interrupted did not take, and a password does not show)."""

    def wrapped(goal: str, els: list[Element], clicked: list[str]) -> str | None:
        if any(e.bid and "disabled=True" in e.attrs for e in els):
            cancel = _by_name(els, "Cancel", ("button",))
            if cancel is not None:
                return _click(cancel)
        shown = {_click(e) for e in els if e.bid}
        gone = [i for i, a in enumerate(clicked) if a.startswith("click(") and a not in shown]  # the popup's Cancel
        return rule(goal, els, clicked[gone[-1] + 1:] if gone else clicked)

    return wrapped


def _focus(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    m = re.search(r"the (\w+) input", goal)
    i = ORDINALS.get(m.group(1), 0) if m else 0
    boxes = _textboxes(els)
    return _click(boxes[i]) if i < len(boxes) else None


def _choose_list(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    m = re.match(r"Select (.*) from the list", goal)
    combo = next((e for e in els if e.bid and e.role == "combobox"), None)
    if m and combo is not None and field_value(combo) != m.group(1):
        return f"select_option({combo.bid!r}, {m.group(1)!r})"
    return _click(_submit(els))


def _tab(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    m = re.search(r"Tab #(\d+)", goal)
    return _click(_by_name(els, f"Tab #{m.group(1)}", ("link", "tab"))) if m else None


def _collapsible(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    tab = next((e for e in els if e.bid and e.role == "tab" and e.name.startswith("Section")), None)
    if tab is not None and "expanded=False" in tab.attrs:
        return _click(tab)
    return _click(_submit(els))


def _link_behind_tabs(goal: str, els: list[Element], clicked: list[str]) -> str | None:
    """The link the goal quotes, once the page shows it; until then the next tab (of a tab list, or a section's
    header) that is neither open nor clicked yet."""
    found = _link_quoted(goal, els, clicked)
    if found is not None:
        return found
    for e in els:
        if e.bid and e.role == "tab" and "expanded=True" not in e.attrs and _click(e) not in clicked:
            return _click(e)
    return None


_SAME = _fill_then_submit(lambda goal, quoted: quoted)
_NAMED = _buttons(lambda goal: re.findall(r"button (\w+)", goal))  # "Click button ONE, then click button TWO."
_QUOTED = _buttons(goal_values)  # 'Click on the "Yes" button.'
_RULES: dict[str, Rule] = {
    "click-test": _first_button,
    "click-test-2": _NAMED,
    "click-test-transfer": _NAMED,
    "click-button-sequence": _NAMED,
    "click-button": _QUOTED,
    "unicode-test": _QUOTED,
    "click-link": _link_quoted,
    "click-dialog": _dialog,
    "click-dialog-2": _dialog,
    "click-checkboxes": _checkboxes,
    "click-checkboxes-large": _checkboxes,
    "click-checkboxes-transfer": _checkboxes,
    "click-option": _option,
    "enter-text": _SAME,
    "enter-text-dynamic": _SAME,
    "login-user": _SAME,
    "login-user-popup": _after_popup(_SAME),
    "enter-text-2": _fill_then_submit(lambda goal, q: q[:1] and [q[0].upper() if "upper" in goal else q[0].lower()]),
    "enter-password": _fill_then_submit(lambda goal, q: q[:1] and [q[0], q[0]]),
    "focus-text": _focus,
    "focus-text-2": _focus,
    "choose-list": _choose_list,
    "click-tab": _tab,
    "click-collapsible": _collapsible,
    "click-collapsible-nodelay": _collapsible,
    "click-tab-2": _link_behind_tabs,
    "click-tab-2-easy": _link_behind_tabs,
    "click-tab-2-medium": _link_behind_tabs,
    "click-tab-2-hard": _link_behind_tabs,
    "click-collapsible-2": _link_behind_tabs,
    "click-collapsible-2-nodelay": _link_behind_tabs,
}
ORACLE_TASKS: tuple[str, ...] = tuple(sorted(_RULES))
"""The tasks the oracle has a rule for (the noisy oracle plays the same ones)."""


class NoisyPolicy(OraclePolicy):
    """The oracle with a 25% chance of a random admissible action (a wrong click, a wrong fill) instead."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or admissible_from_state(info["abstract_state"])
        if adm and self.rng.random() < 0.25:
            return self.rng.choice(adm)
        return super().act(obs, info)


class RandomPolicy(OraclePolicy):
    """A random admissible action each step, on any task."""

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.subdomain = str((task.goal or {}).get("subdomain", ""))
        self.clicked = []

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or admissible_from_state(info["abstract_state"])
        return self.rng.choice(adm) if adm else "noop()"


POLICIES = {"oracle": OraclePolicy, "expert": OraclePolicy, "noisy": NoisyPolicy, "random": RandomPolicy}
