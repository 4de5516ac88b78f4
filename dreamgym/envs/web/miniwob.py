"""MiniWoB++: the web environment family that runs everywhere (local task pages, Debian's Chromium).

Owns: the family surface (see `dreamgym.envs.family`): `make_env`, `tasks`, `POLICIES`, `admissible_from_state`,
`parse_goal`, `explain`, `noop_state`, `grounded_outcome`, `ground_state`, `task_variants`, `show_goal`, `task_kind`. No
`corpus_text`: the tiny
preset's tokenizer is trained on every family's corpus, and one that needs a browser would make that shared tokenizer
differ between machines with and without Chromium (its byte-level BPE reads web states without it).
Must not know: models, torch, trainers.

Built from the web modules: `miniwob_tasks` (pages, split, reward), `env` (`WebEnv`), `axtree` (the state and its
actions), `miniwob_policies` (oracle / noisy / random), `miniwob_outcomes` (the reward rule on states), `explain`
(reasoning traces), `miniwob_variants` (page-grounded task variants), `browser` (the pool).
`make_env` takes `browsers` (the size of the process-wide pool its environments share, default 2), `pool` (a
`BrowserPool` of your own), `max_steps` (10) and `n_seeds` (the size of the split's pool, see `tasks`). The split
chooses the tasks: the 18 of the default set, the extended set (`train:extended`: 8 more tasks the oracle solves),
or any the `miniwob` package ships (`train:all`, `test:click-checkboxes-large,enter-date`; see `miniwob_tasks`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from dreamgym.envs.web.axtree import (FILL_ROLES, admissible_from_state, checked, elements, parse_fill, parse_select,
                                      shows_error, with_checked, with_focus, with_names, with_selected,
                                      with_typed_value, with_values)
from dreamgym.envs.web.miniwob_policies import OraclePolicy
from dreamgym.envs.web.browser import DEFAULT_BROWSERS, BrowserPool, shared_pool
from dreamgym.envs.web.env import WebEnv
from dreamgym.envs.web.explain import explain
from dreamgym.envs.web.explain import noop_state as _noop_state
from dreamgym.envs.web.miniwob_outcomes import outcome as _outcome
from dreamgym.envs.web.miniwob_outcomes import plain_click
from dreamgym.envs.web.miniwob_policies import POLICIES
from dreamgym.envs.web.miniwob_tasks import MiniWoBSource
from dreamgym.envs.web.miniwob_tasks import tasks as _tasks
from dreamgym.envs.web.miniwob_variants import variants as _variants
from dreamgym.envs.web.miniwob_variants import with_goal
from dreamgym.types import Step, Task

EXPERT_POLICY = "expert"
"""The scripted policy whose episodes are SFT demonstrations (`EnvFamily.EXPERT_POLICY`)."""
EXPLORE_POLICIES = {"noisy": 0.7, "random": 0.3}
"""The exploring scripted policies and their weights, DPO's demonstrations (`EnvFamily.EXPLORE_POLICIES`)."""

__all__ = ["EXPERT_POLICY", "EXPLORE_POLICIES",
           "make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain", "noop_state",
           "grounded_outcome", "ground_state", "task_variants", "show_goal", "task_kind", "GOAL_FORMS",
           "grounded_episode"]

GOAL_FORMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"Click the button\.", ("click-test",)),
    (r"Click button (ONE|TWO)\.", ("click-test-2", "click-test-transfer")),
    (r'Click on the "(.+)" button\.', ("click-button", "unicode-test")),
    (r'Click on the link "(.+)"\.', ("click-link",)),
    (r'Close the dialog box by clicking the "x"\.', ("click-dialog",)),
    (r'Click the button in the dialog box labeled "(.+)"\.', ("click-dialog-2",)),
    # Before the checkboxes' form, which their instructions would match too.
    (r"Select (.+) from the list and click Submit\.", ("choose-list",)),
    (r"Select (.+) from the scroll list and click Submit\.", ("click-scroll-list",)),
    (r"Select (.+) and click Submit\.",
     ("click-checkboxes", "click-checkboxes-large", "click-checkboxes-soft", "click-checkboxes-transfer",
      "click-option")),
    (r'Enter "(.+)" into the text field and press Submit\.', ("enter-text", "enter-text-dynamic")),
    (r'Enter the password "(.+)" into both text fields and press submit\.', ("enter-password",)),
    (r'Enter the username "(.+)" and the password "(.+)" into the text fields and press login\.',
     ("login-user", "login-user-popup")),
    (r"Focus into the textbox\.", ("focus-text",)),
    (r"Focus into the (\w+) input textbox\.", ("focus-text-2",)),
    (r"Click on Tab #(\d+)\.", ("click-tab",)),
    (r"Click button ONE, then click button TWO\.", ("click-button-sequence",)),
    (r'Type "(.+)" in all (upper|lower) case letters in the text input and press Submit\.', ("enter-text-2",)),
    (r"Expand the section below and click submit\.", ("click-collapsible", "click-collapsible-nodelay")),
    (r'Switch between the tabs to find and click on the link "(.+)"\.',
     ("click-tab-2", "click-tab-2-easy", "click-tab-2-hard", "click-tab-2-medium")),
    (r'Expand the sections below, to find and click on the link "(.+)"\.',
     ("click-collapsible-2", "click-collapsible-2-nodelay")),
)
"""Instruction forms the family knows (the first that matches counts), each with every task the `miniwob` package
ships whose instructions take that form: an instruction alone cannot tell `click-checkboxes` from
`click-checkboxes-large`, so `parse_goal` names them all, never one of them for another
(`tests/envs/web/test_web_miniwob.py` checks it on every shipped task)."""

MAX_STEPS = 10
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""


def make_env(split: str = "train", *, browsers: int = DEFAULT_BROWSERS, pool: BrowserPool | None = None,
             max_steps: int = MAX_STEPS, n_seeds: int | None = None) -> WebEnv:
    """A `WebEnv` on a split's MiniWoB++ tasks, in a browser of `pool` (default: the shared pool of `browsers`)."""
    return WebEnv(MiniWoBSource(), _tasks(split, n_seeds), pool=pool or shared_pool(browsers), max_steps=max_steps)


def tasks(split: str = "train", n_seeds: int | None = None, **_: Any) -> list[Task]:
    """The tasks of a split: "train" (the train tasks at seeds 0..19) or "test" (every task at 5 held-out seeds,
    three tasks never trained on); "train:extended" / "test:extended" the same with the 8 `EXTRA_TRAIN_TASKS`
    added; "train:all" / "test:all" the same seeds of every task the `miniwob` package ships, "train:NAME,NAME" of
    the tasks named (an unknown name raises `UnknownTaskError` listing the shipped
    ones); `n_seeds` changes the seeds per task."""
    return _tasks(split, n_seeds)


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """{"tasks", "values"} of a MiniWoB++ instruction of a known form (`GOAL_FORMS`): every task whose instructions
    take that form, and the form's values (the quoted text, the tab number, ...); None for any other text."""
    text = " ".join(instruction.split())
    for pattern, names in GOAL_FORMS:
        m = re.fullmatch(pattern, text)
        if m:
            return {"tasks": list(names), "values": list(m.groups())}
    return None


def noop_state(state: str, action: str) -> str:
    """The same page with the error line BrowserGym gives for an action it cannot carry out."""
    return _noop_state(state, action, MiniWoBSource.subsets)


def grounded_outcome(task: Task, state: str, action: str, next_state: str,
                     history: Sequence[tuple[str, str]] = ()) -> tuple[float, bool] | None:
    """The task page's own reward and end for `action` on `state` (`miniwob_outcomes`): on the 15 train tasks, a
    click that ends the episode is scored as the page scores it (the goal's button, link or tab; the form the
    Submit sends, a password field's text read from the fills of `history`), other steps go on; None where the
    page shown and the history do not decide (an element the tree does not place, any other task). `next_state`
    is not read: in a dream the model wrote it."""
    return _outcome(task, parse_goal(task.instruction), state, action, history)


def ground_state(task: Task, state: str, action: str, next_state: str) -> str | None:
    """`next_state` with what the page fixes written in as it shows it, None where the action fixes nothing and the
    rest needs no change: every element `state` shows keeps its role and name (a page never renames one in place;
    `with_names`), every text field the action does not fill keeps the text `state` shows (only a fill changes one;
    `with_values`), the focus is where the action puts it (`_focus`), and what the
    action alone fixes: the field a `fill` typed into showing the typed text (bullets where the answer shows the
    field masked), the select list a `select_option` chose from showing that option, the checkbox a plain click hit
    showing the other checked state than it had in `state`, the radio button it hit checked and the others the
    page shows unchecked (the tree names no group; every train page has one). The action's part is left out for
    an element the answer (or, for a click, `state`) does not show or shows disabled, and where the answer's
    `[error]` line says the action failed. A tiny experience model writes names from its training data in the typed
    text's place and over elements' names, and the reward rule then scores the form it sees
    (docs/results/miniwob.md, "A start fitted to a replay criterion" and "The chain rebuilt")."""
    fill = parse_fill(action)
    named = with_values(with_names(next_state, state), state, keep=fill[0] if fill else None)
    fixed = _action_fixes(state, action, named)
    focused = _focus(state, action, named if fixed is None else fixed)
    if fixed is not None:
        return focused
    return None if focused == next_state else focused


# Where a page puts the focus (the 6,816 steps of the 3,220-episode collection that stay on their page without an
# error): a fill focuses its field and a click its checkbox, radio button or link whenever the page takes the action
# (a disabled field refuses a fill); after those and a click on a button or a text field no other element is
# focused. A click elsewhere (a tab, a label, a generic element) may focus an element inside it, and a clicked
# button or text field is focused only mostly.
_FOCUSES = frozenset({"checkbox", "radio", "link"})
_UNFOCUSES = _FOCUSES | {"button", "textbox"}


def _focus(state: str, action: str, answer: str) -> str:
    """`answer` with the focus where the action puts it (see `_FOCUSES`), unchanged where the answer's `[error]`
    line says the action failed or the action's element is not in `state`."""
    if shows_error(answer):
        return answer
    fill = parse_fill(action)
    bid = fill[0] if fill is not None else plain_click(action)
    target = next((e for e in elements(state) if bid is not None and e.bid == bid), None)
    if bid is None or target is None or "disabled=True" in target.attrs:  # a disabled element takes no action
        return answer
    if fill is not None:
        return with_focus(answer, bid, target.role in FILL_ROLES)
    if target.role not in _UNFOCUSES:
        return answer
    return with_focus(answer, bid, target.role in _FOCUSES)


def _action_fixes(state: str, action: str, answer: str) -> str | None:
    """`answer` with what `action` alone fixes written in (see `ground_state`), None where it fixes nothing."""
    if shows_error(answer):
        return None
    fill = parse_fill(action)
    if fill is not None:
        return with_typed_value(answer, *fill)
    select = parse_select(action)
    if select is not None:
        return with_selected(answer, *select)
    bid = plain_click(action)
    if bid is None:
        return None
    box = next((e for e in elements(state) if e.bid == bid and e.role in ("checkbox", "radio")), None)
    was = None if box is None or "disabled=True" in box.attrs else checked(box)
    if box is None or was is None:
        return None
    if box.role == "checkbox":
        return with_checked(answer, bid, not was)
    # A radio button a click hits is checked, and the page's other radio buttons are not.
    out: str | None = answer
    for e in elements(answer):
        if out is not None and e.role == "radio" and e.bid and e.bid != bid and checked(e):
            out = with_checked(out, e.bid, False)
    return None if out is None else with_checked(out, bid, True)


def task_variants(task: Task, state: str, n: int, rng: random.Random) -> list[str]:
    """At most `n` instructions that ask the page `state` of `task` for another of its elements, or to type another
    text of the same shape (`miniwob_variants.WRITERS`: 15 of the 23 pages of `train:extended`), drawn with `rng`; []
    for other pages and for an instruction `parse_goal` does not read."""
    goal = parse_goal(task.instruction)
    if goal is None:
        return []
    return _variants(str(task.goal.get("subdomain", "")), [str(v) for v in goal["values"]], state, n, rng)


def show_goal(task: Task, state: str) -> str:
    """The page `state` with `task`'s instruction on its `[goal]` line, as MiniWoB++ shows a task's goal (the reward
    rule reads the goal there)."""
    return with_goal(state, task.instruction)


def grounded_episode(task: Task, start: str, actions: Sequence[str] | None = None,
                     max_steps: int = MAX_STEPS) -> tuple[list[Step], tuple[float, bool] | None]:
    """An episode of `task` from the page `start` played without a browser: the oracle's actions (or `actions`, until
    they run out), each next state the page as the family grounds it (`ground_state`, a password field showing
    bullets), until the family's rule (`grounded_outcome`) ends it. Returns the steps and the rule's final (reward,
    terminated), None when it did not end. What a task variant's answers are (`experiments/variant_demos.py`)."""
    oracle = OraclePolicy(0)
    oracle.reset(task, start, {"abstract_state": start})
    state, steps = start, []
    history: list[tuple[str, str]] = []
    for i in range(max_steps if actions is None else min(max_steps, len(actions))):
        action = actions[i] if actions is not None else oracle.act(state, {"abstract_state": state})
        outcome = grounded_outcome(task, state, action, state, history)
        if outcome is not None and outcome[1]:
            steps.append(Step(state, action, outcome[0], True, False, state))
            return steps, outcome
        after = ground_state(task, state, action, _masked(task, state, action)) or state
        steps.append(Step(state, action, 0.0, False, False, after))
        history.append((state, action))
        state = after
    return steps, None


def _masked(task: Task, state: str, action: str) -> str:
    """`state` with the password field `action` fills showing a bullet, as the page masks it (the grounding then
    writes one bullet per typed character); `state` for any other action."""
    fill = parse_fill(action)
    boxes = [e.bid for e in elements(state) if e.bid and e.role == "textbox"]
    sub = task.goal.get("subdomain")
    if fill is None or not (sub == "enter-password" or (sub in ("login-user", "login-user-popup")
                                                       and fill[0] == boxes[-1])):
        return state
    return with_typed_value(state, fill[0], "\u2022") or state


def task_kind(task: Task) -> str:
    """A task's page (`click-button`): its instances differ only in the seed."""
    return str(task.goal["subdomain"])
