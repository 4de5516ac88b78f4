"""Page-grounded task variants for MiniWoB++: the same page asking for another of its own elements.

Owns: `variants`, the body of the family's `task_variants` hook (see `dreamgym.envs.family.FamilyHooks`): for each
task page whose goal names an element of the page or a text to type (`WRITERS`), instructions of the same form that
name another element the page shows (another link, button, option, tab, box set, ordinal) or another text of the
same shape; and `with_goal`, the body of `show_goal`: a page with another instruction on its goal line.
Must not know: browsers, models, the curriculum that asks for variants, how the dream plays them.

Why: a policy fitted on a few pages per task learns which element each page's answer is, not how to find the element
an instruction names (on the held-out pages of the same tasks it picks a wrong option; docs/results/miniwob.md). A
variant keeps the page and changes what it asks, so the dream can pose many questions on the pages it has. A variant
is feasible by construction (the element it names is on the page; a typed text has the shape the page's own
goals have) and the family's reward rule (`miniwob_outcomes`) judges it from the goal it shows, as it judges the
page's own. Pages whose handler ignores the goal's text (click-test, click-test-2, click-dialog, focus-text) and
pages whose named element is hidden until the agent acts (the click-tab-2 family) get no variants.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from dreamgym.envs.web.axtree import Element, parse_state
from dreamgym.envs.web.miniwob_outcomes import only_text
from dreamgym.envs.web.miniwob_policies import ORDINALS

_ORDINAL_NAMES = ("1st", "2nd", "3rd")


def with_goal(state: str, instruction: str) -> str:
    """`state` with `instruction` on its `[goal]` line (whitespace collapsed, as a real page's state writes it); a
    state without one gets it as its first line."""
    goal = f"[goal] {' '.join(instruction.split())}"
    lines = state.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("[goal] "):
            lines[i] = goal
            return "\n".join(lines)
    return "\n".join([goal, *lines])


def _reshaped(text: str, rng: random.Random) -> str:
    """Another text with `text`'s shape: each character replaced by one of its class (upper, lower, digit; others
    kept), the way the pages draw the strings they ask to type."""
    out = []
    for c in text:
        if c.isascii() and c.isupper():
            out.append(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        elif c.isascii() and c.islower():
            out.append(rng.choice("abcdefghijklmnopqrstuvwxyz"))
        elif c.isascii() and c.isdigit():
            out.append(rng.choice("0123456789"))
        else:
            out.append(c)
    return "".join(out)


def _named(els: list[Element], role: str) -> list[str]:
    return list(dict.fromkeys(e.name for e in els if e.bid and e.role == role and e.name))


def _link_texts(els: list[Element]) -> list[str]:
    return list(dict.fromkeys(t for e in els if e.bid and e.role == "generic" and e.clickable
                              for t in [only_text(els, e)] if t))


# A writer: (goal values, page elements, rng) -> every instruction it could pose (the page's own among them).
Writer = Callable[[list[str], list[Element], random.Random], list[str]]


def _button(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f'Click on the "{n}" button.' for n in _named(els, "button")]


def _link(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f'Click on the link "{t}".' for t in _link_texts(els)]


def _dialog_2(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    labels = {"Close": "x", "Cancel": "Cancel", "OK": "OK"}  # the title bar's "x" is the button named Close
    return [f'Click the button in the dialog box labeled "{labels[n]}".' for n in _named(els, "button") if n in labels]


def _option(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f"Select {n} and click Submit." for n in _named(els, "radio")]


def _checkboxes(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    names = _named(els, "checkbox")
    if not names or "nothing" in names:
        return []
    own = set() if values[0] == "nothing" else set(values[0].split(", "))
    out = []
    for _ in range(4 * len(names)):  # random subsets, each size as likely; the page joins the names with ", "
        subset = rng.sample(names, rng.randint(0, len(names)))
        if set(subset) != own:  # the page's own set in another order asks the same
            out.append(f"Select {', '.join(subset)} and click Submit." if subset
                       else "Select nothing and click Submit.")
    return out


def _choose_list(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    # The option shown chosen at the start is left out: a page never asks for the option it starts on.
    names = [e.name for e in els if e.role == "option" and e.name and "selected=True" not in e.attrs]
    return [f"Select {n} from the list and click Submit." for n in dict.fromkeys(names)]


def _tab(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    tabs = [n[len("Tab #"):] for n in _named(els, "tab") if n.startswith("Tab #")]
    return [f"Click on Tab #{k}." for k in tabs]


def _enter_text(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f'Enter "{_reshaped(values[0], rng)}" into the text field and press Submit.' for _ in range(8)]


def _password(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f'Enter the password "{_reshaped(values[0], rng)}" into both text fields and press submit.'
            for _ in range(8)]


def _login(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    return [f'Enter the username "{_reshaped(values[0], rng)}" and the password "{_reshaped(values[1], rng)}" into '
            "the text fields and press login." for _ in range(8)]


def _focus_2(values: list[str], els: list[Element], rng: random.Random) -> list[str]:
    boxes = [e for e in els if e.bid and e.role == "textbox"]
    return [f"Focus into the {o} input textbox." for o in _ORDINAL_NAMES if ORDINALS[o] < len(boxes)]


WRITERS: dict[str, Writer] = {
    "click-button": _button, "unicode-test": _button, "click-link": _link, "click-dialog-2": _dialog_2,
    "click-option": _option, "click-checkboxes": _checkboxes, "click-checkboxes-transfer": _checkboxes,
    "choose-list": _choose_list, "click-tab": _tab, "enter-text": _enter_text, "enter-text-dynamic": _enter_text,
    "enter-password": _password, "login-user": _login, "login-user-popup": _login, "focus-text-2": _focus_2,
}
"""The pages that get variants, by task name, each with the writer of its instruction form (`miniwob.GOAL_FORMS`)."""


def variants(subdomain: str, values: list[str], state: str, n: int, rng: random.Random) -> list[str]:
    """At most `n` distinct instructions for the page `state` of task `subdomain` (whose goal's values, as
    `parse_goal` reads them, are `values`), each naming something else than the page's own goal, drawn with `rng`;
    [] for a page without a writer or with nothing else to ask."""
    writer = WRITERS.get(subdomain)
    if writer is None or not state:
        return []
    own, _, els, _ = parse_state(state)
    pool = [t for t in dict.fromkeys(writer(values, els, rng)) if t != own]
    return rng.sample(pool, min(n, len(pool)))
