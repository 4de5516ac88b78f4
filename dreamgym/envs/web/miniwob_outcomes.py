"""MiniWoB++'s own reward rule on abstract states: the reward and end one action gives on a train task's page, read
from the task's goal and the page the action was taken on, or None where that page does not decide it.

Owns: `outcome`, the body of the family's `grounded_outcome` (see `dreamgym.envs.family.FamilyHooks`): for each task
of `TRAIN_TASKS` (`PAGES`), which elements' clicks end the episode and with what reward, as the task page's own
handler decides (read from its HTML in the `miniwob` package: the button or link the goal names, the Submit that
scores the form), which actions leave the episode going on, and where the state cannot tell.
Must not know: browsers, instruction forms (the family surface parses the goal, `miniwob.parse_goal`), scripted
policies' choices, models, the dream.

The next state is never read: in a dream the experience model wrote it, and a page that shows a finished episode
proves nothing (the rule exists because the model credits wins the page does not give). Where the page the action
was taken on does not decide, the answer is None (the model's answer stands):
- an action other than a plain `click('id')`, a `fill`, a `select_option` or a `noop` (a right click, a key press);
- a click on an element the state does not show (a page has elements its tree does not print);
- a click on an element that holds one whose click ends the episode (a dialog, a tab list): Playwright clicks its
  centre, which the tree does not place;
- click-test-2's button ONE: TWO, placed at random after it, can cover it (the click then times out, nothing ends);
- enter-password and login-user, submitted with passwords of the right length that no `fill` of the episode's
  history typed (a password field shows bullets; the text is read from the history's last successful `fill` of the
  field, and an action that may have changed it since, a key press or a clear, leaves it undecided);
- focus-text and focus-text-2: a `fill` or `select_option` (Playwright may focus the field first; unverified);
- a state whose goal line is not the task's instruction, or whose page already shows the next episode's START, or
  a box the score reads named otherwise than its label (pages an experience model wrote, never a real one).
A reward is the family's (`miniwob_tasks.family_reward`: MiniWoB's raw reward, a failure's -1 as 0), click-checkboxes'
partial credit included.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dreamgym.envs.web.actions import MINIWOB_SUBSETS, InvalidAction, parse_action
from dreamgym.envs.web.axtree import Element, checked, field_value, parse_fill, parse_state, shows_error
from dreamgym.envs.web.explain import action_target
from dreamgym.envs.web.miniwob_policies import ORDINALS
from dreamgym.envs.web.miniwob_tasks import family_reward
from dreamgym.types import Task

Outcome = tuple[float, bool]
GOES_ON: Outcome = (0.0, False)
WON: Outcome = (family_reward(1.0), True)
LOST: Outcome = (family_reward(-1.0), True)

_PLAIN_CLICK_RE = re.compile(r"""^\s*click\(\s*(['"])([a-zA-Z]*\d+)\1\s*\)\s*$""")
_FOCUSED_RE = re.compile(r"\bfocused\b")
_BULLET = "\u2022"  # what a password field shows for each character
# Actions that leave a field's text as it was (they move the focus or the pointer at most).
_KEEPS_TEXT = frozenset({"click", "dblclick", "hover", "focus", "noop", "select_option"})


def plain_click(action: str) -> str | None:
    """The element id of a plain `click('id')` (a left click without modifiers), None for any other action."""
    m = _PLAIN_CLICK_RE.match(action)
    return m.group(2) if m else None


def _won(yes: bool) -> Outcome:
    return WON if yes else LOST


def _textboxes(els: list[Element]) -> list[Element]:
    return [e for e in els if e.bid and e.role == "textbox"]


def _below(els: list[Element], e: Element) -> list[Element]:
    """The elements `e` holds (the indented lines under it)."""
    i = els.index(e)
    out = []
    for d in els[i + 1:]:
        if d.depth <= e.depth:
            break
        out.append(d)
    return out


def only_text(els: list[Element], e: Element) -> str | None:
    """The text of an element whose one child is a text line (a MiniWoB link is a `<span>` around one word)."""
    held = _below(els, e)
    return held[0].name if len(held) == 1 and held[0].role == "StaticText" and held[0].bid is None else None


def _label(els: list[Element], b: Element) -> str | None:
    """The text of the label a checkbox or radio button sits in, as MiniWoB builds them (`LabelText` holding the box
    and then its text); None for a box not laid out so."""
    i = els.index(b)
    text = els[i + 1] if i + 1 < len(els) else None
    if i == 0 or els[i - 1].role != "LabelText" or text is None or text.role != "StaticText" or text.bid is not None:
        return None
    return text.name


def _wrong_length(field: Element, password: str) -> bool | None:
    """Whether a password field cannot hold `password`: its bullets (one a character) are not as many as the
    password's characters (they are ASCII: one bullet each). None when the field shows other text than bullets."""
    shown = field_value(field)
    if set(shown) - {_BULLET}:
        return None
    return len(shown) != len(password)


def typed_text(history: Sequence[tuple[str, str]], state: str) -> dict[str, str]:
    """The text each field holds by the episode's own fills, by element id: `history` is the episode's earlier
    (state, action) pairs, oldest first, and `state` the page after the last of them. A field's text is its last
    `fill`'s, where that fill took (the page after it shows no `[error]` line) and no later action may have changed
    it (`_KEEPS_TEXT`); a field left otherwise is not in the result. Only this tells a password field's characters:
    the page shows bullets."""
    typed: dict[str, str] = {}
    for i, (_, action) in enumerate(history):
        after = history[i + 1][0] if i + 1 < len(history) else state
        fill = parse_fill(action)
        verb, bid = action_target(action)
        if fill is not None:
            if shows_error(after):
                typed.pop(fill[0], None)  # a refused fill may still have cleared the field
            else:
                typed[fill[0]] = fill[1]
        elif verb not in _KEEPS_TEXT:
            if bid is None:  # a key press on whatever has the focus: any field may have changed
                typed.clear()
            else:
                typed.pop(bid, None)
    return typed


def _password_won(field: Element, password: str, typed: Mapping[str, str]) -> bool | None:
    """Whether a password field holds `password`: the text the episode typed into it, where the field shows as many
    bullets as that text has characters (a state that disagrees with its history decides nothing); None when
    the history does not tell."""
    text = typed.get(field.bid or "")
    shown = field_value(field)
    if text is None or set(shown) - {_BULLET} or len(shown) != len(text):
        return None
    return text == password


# A judge reads the goal's values (`parse_goal`'s), the page's elements, the clicked element, one whose click ends
# the episode (`Page.ends`), and the text the episode typed into each field (`typed_text`), and gives the page's
# outcome, or None when the state does not decide it.
Judge = Callable[[list[str], list[Element], Element, Mapping[str, str]], Outcome | None]


@dataclass(frozen=True)
class Page:
    """What a task's page does with a click, read from its HTML."""

    ends: Callable[[Element], bool]
    """The elements whose click handler ends the episode."""
    judge: Judge
    """The outcome of clicking one of them."""
    inert: frozenset[str] = frozenset()
    """Roles of the page's other elements: a click on one that holds no element of `ends` ends nothing (it may
    check a box, open a list, focus a field)."""
    focus_scored: bool = False
    """The page scores focusing a field: only a click is judged."""


def _click_test_2(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    # Both buttons are placed absolutely at random, TWO after ONE, so TWO is painted over ONE where they overlap: a
    # click on TWO always lands, one on ONE times out when TWO covers its centre (seen on real pages).
    return _won(values[0] == "TWO") if e.name == "TWO" else None


def _click_link(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    text = only_text(els, e)
    return None if text is None else _won(text == values[0])


def _click_dialog_2(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    label = {"Close": "x", "Cancel": "Cancel", "OK": "OK"}.get(e.name)  # the title bar's "x" is named Close
    return None if label is None else _won(label == values[0])


def _click_checkboxes(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    if e.name != "Submit":
        return None
    boxes = [b for b in els if b.bid and b.role == "checkbox"]
    names = [b.name for b in boxes]
    states = [checked(b) for b in boxes]
    wanted = [] if values[0] == "nothing" else values[0].split(", ")  # the page joins the names with ", "
    if (not boxes or None in states or len(set(names)) < len(names) or not set(wanted) <= set(names)
            or (values[0] == "nothing" and "nothing" in names)):
        return None  # a box whose state is not shown, or a goal that does not name the boxes one by one
    if any(_label(els, b) != b.name for b in boxes):
        return None  # a box named otherwise than its label reads: a dreamt page (the audit found such), not a real one
    # The page's score: +1 for each box as asked, -1 for each other, over the number of boxes (partial credit).
    score = sum(1.0 if state == (name in wanted) else -1.0 for name, state in zip(names, states))
    return family_reward(score / len(boxes)), True


def _click_option(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    # The page reads only the goal's button (by position); the goal names it, and its label reads the same.
    radios = [b for b in els if b.bid and b.role == "radio"]
    named = [b for b in radios if b.name == values[0] or _label(els, b) == values[0]]
    state = checked(named[0]) if len(named) == 1 and named[0].name == _label(els, named[0]) else None
    return None if e.name != "Submit" or state is None else _won(state)


def _enter_text(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    boxes = _textboxes(els)
    return None if e.name != "Submit" or len(boxes) != 1 else _won(field_value(boxes[0]) == values[0])


def _enter_password(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    boxes = _textboxes(els)
    if e.name != "Submit" or len(boxes) != 2:
        return None
    if any(_wrong_length(b, values[0]) for b in boxes):
        return LOST
    # As many characters as the password's: which ones, only the episode's fills tell (the page shows bullets).
    right = [_password_won(b, values[0], typed) for b in boxes]
    return None if None in right else _won(all(right))


def _login_user(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    boxes = _textboxes(els)
    if e.name != "Login" or len(boxes) != 2 or len(values) != 2:
        return None
    if field_value(boxes[0]) != values[0] or _wrong_length(boxes[1], values[1]):
        return LOST
    right = _password_won(boxes[1], values[1], typed)
    return None if right is None else _won(right)


def _focus(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    # The page scores the field's focus event and blurs it at once: a field shown focused fires no new one.
    boxes = _textboxes(els)
    if _FOCUSED_RE.search(e.attrs):
        return None
    if not values:  # focus-text: its one field
        return WON if len(boxes) == 1 else None
    k = ORDINALS.get(values[0])
    return None if k is None or len(boxes) != 3 else _won(boxes[k].bid == e.bid)


def _choose_list(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    lists = [b for b in els if b.bid and b.role == "combobox"]
    chosen = field_value(lists[0]) if len(lists) == 1 else ""
    return None if e.name != "Submit" or not chosen else _won(chosen == values[0])


def _click_tab(values: list[str], els: list[Element], e: Element, typed: Mapping[str, str]) -> Outcome | None:
    m = re.fullmatch(r"Tab #(\d+)", e.name)
    return None if m is None else _won(m.group(1) == values[0])


def _is(*roles: str) -> Callable[[Element], bool]:
    return lambda e: e.role in roles


PAGES: dict[str, Page] = {
    "click-test": Page(_is("button"), lambda values, els, e, typed: WON),
    "click-test-2": Page(_is("button"), _click_test_2),
    # Every button ends it: a win when its text is the one the goal quotes (buttons of the same text all win).
    "click-button": Page(_is("button"), lambda values, els, e, typed: _won(e.name == values[0]),
                         frozenset({"textbox"})),
    # A link is a clickable span around a word; every one ends it, a win when its word is the goal's.
    "click-link": Page(lambda e: e.role == "generic" and e.clickable, _click_link),
    # The dialog's one button, its title bar's "x" (named Close), wins.
    "click-dialog": Page(_is("button"), lambda values, els, e, typed: WON if e.name == "Close" else None,
                         frozenset({"paragraph"})),
    "click-dialog-2": Page(_is("button"), _click_dialog_2, frozenset({"paragraph"})),
    "click-checkboxes": Page(_is("button"), _click_checkboxes, frozenset({"checkbox", "LabelText"})),
    "click-option": Page(_is("button"), _click_option, frozenset({"radio", "LabelText"})),
    "enter-text": Page(_is("button"), _enter_text, frozenset({"textbox"})),
    "enter-password": Page(_is("button"), _enter_password, frozenset({"textbox", "paragraph", "LabelText"})),
    "login-user": Page(_is("button"), _login_user, frozenset({"textbox", "paragraph", "LabelText"})),
    "focus-text": Page(_is("textbox"), _focus, focus_scored=True),
    "focus-text-2": Page(_is("textbox"), _focus, focus_scored=True),
    "choose-list": Page(_is("button"), _choose_list, frozenset({"combobox"})),
    # The handler is on each tab's link; the tab (a list item) is filled by its link, so a click on it lands there
    # (every such click of the recorded episodes ended as its link's would).
    "click-tab": Page(lambda e: e.role in ("tab", "link") and e.name.startswith("Tab #"), _click_tab,
                      frozenset({"tabpanel", "paragraph"})),
}
"""The pages the rule judges, by task name: the 15 train tasks (`miniwob_tasks.TRAIN_TASKS`)."""


def _shows_start(els: list[Element]) -> bool:
    """Whether the page shows the START button MiniWoB puts up once an episode has ended."""
    return any(e.bid and e.role == "generic" and only_text(els, e) == "START" for e in els)


def outcome(task: Task, goal: dict[str, Any] | None, state: str, action: str,
            history: Sequence[tuple[str, str]] = ()) -> Outcome | None:
    """(reward, terminated) of `action` taken on the page `state` of `task`, whose instruction `parse_goal` read as
    `goal`, after the episode's earlier (state, action) pairs `history`, oldest first (read only for the text a
    password field holds); None where the page does not decide it (see the module's docstring)."""
    sub = str((task.goal or {}).get("subdomain", ""))
    page = PAGES.get(sub)
    if page is None or goal is None or sub not in goal["tasks"]:
        return None
    values = [str(v) for v in goal["values"]]
    goal_line, _, els, _ = parse_state(state)
    if goal_line != " ".join(task.instruction.split()) or _shows_start(els):
        return None
    try:
        parse_action(action, MINIWOB_SUBSETS)
    except InvalidAction:
        return GOES_ON  # BrowserGym refuses it before it touches the page
    verb, _ = action_target(action)
    if verb == "noop":
        return GOES_ON
    if verb in ("fill", "select_option") and not page.focus_scored:
        return GOES_ON  # typing and choosing fire no handler of these pages (they listen to clicks)
    bid = plain_click(action)
    target = next((e for e in els if bid is not None and e.bid == bid), None)
    if target is None:
        return None
    if page.ends(target):
        return page.judge(values, els, target, typed_text(history, state))
    if any(page.ends(d) for d in _below(els, target)):
        return None  # the click lands at its centre, maybe on one that ends the episode
    return GOES_ON if target.role in page.inert else None
