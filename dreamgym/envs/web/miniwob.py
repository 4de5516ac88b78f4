"""MiniWoB++: the web environment family that runs everywhere (local task pages, Debian's Chromium).

Owns: the family surface (see `dreamgym.envs.family`): `make_env`, `tasks`, `POLICIES`, `admissible_from_state`,
`parse_goal`, `explain`, `noop_state`. No `corpus_text`: the tiny preset's tokenizer is trained on every family's
corpus, and one that needs a browser would make that shared tokenizer differ between machines with and without
Chromium (its byte-level BPE reads web states without it).
Must not know: models, torch, trainers.

Built from the web modules: `miniwob_tasks` (pages, split, reward), `env` (`WebEnv`), `axtree` (the state and its
actions), `miniwob_policies` (oracle / noisy / random), `explain` (reasoning traces), `browser` (the pool).
`make_env` takes `browsers` (the size of the process-wide pool its environments share, default 2), `pool` (a
`BrowserPool` of your own), `max_steps` (10) and `n_seeds` (the size of the split's pool, see `tasks`).
"""

from __future__ import annotations

import re
from typing import Any

from dreamgym.envs.web.axtree import admissible_from_state
from dreamgym.envs.web.browser import DEFAULT_BROWSERS, BrowserPool, shared_pool
from dreamgym.envs.web.env import WebEnv
from dreamgym.envs.web.explain import explain
from dreamgym.envs.web.explain import noop_state as _noop_state
from dreamgym.envs.web.miniwob_policies import POLICIES
from dreamgym.envs.web.miniwob_tasks import MiniWoBSource
from dreamgym.envs.web.miniwob_tasks import tasks as _tasks
from dreamgym.types import Task

__all__ = ["make_env", "tasks", "POLICIES", "admissible_from_state", "parse_goal", "explain", "noop_state",
           "GOAL_PATTERNS"]

GOAL_PATTERNS: dict[str, str] = {
    "click-test": r"Click the button\.",
    "click-test-2": r"Click button (ONE|TWO)\.",
    "click-button": r'Click on the "(.+)" button\.',
    "click-link": r'Click on the link "(.+)"\.',
    "click-dialog": r'Close the dialog box by clicking the "x"\.',
    "click-dialog-2": r'Click the button in the dialog box labeled "(.+)"\.',
    "click-checkboxes": r"Select (.+) and click Submit\.",
    "click-option": r"Select (\S+) and click Submit\.",
    "enter-text": r'Enter "(.+)" into the text field and press Submit\.',
    "enter-password": r'Enter the password "(.+)" into both text fields and press submit\.',
    "login-user": r'Enter the username "(.+)" and the password "(.+)" into the text fields and press login\.',
    "focus-text": r"Focus into the textbox\.",
    "focus-text-2": r"Focus into the (\w+) input textbox\.",
    "choose-list": r"Select (.+) from the list and click Submit\.",
    "click-tab": r"Click on Tab #(\d+)\.",
    "click-button-sequence": r"Click button ONE, then click button TWO\.",
    "enter-text-2": r'Type "(.+)" in all (upper|lower) case letters in the text input and press Submit\.',
    "click-collapsible": r"Expand the section below and click submit\.",
}
"""Each task's instruction, as a pattern; `parse_goal` returns the task and the pattern's groups."""


def make_env(split: str = "train", *, browsers: int = DEFAULT_BROWSERS, pool: BrowserPool | None = None,
             max_steps: int = 10, n_seeds: int | None = None) -> WebEnv:
    """A `WebEnv` on a split's MiniWoB++ tasks, in a browser of `pool` (default: the shared pool of `browsers`)."""
    return WebEnv(MiniWoBSource(), _tasks(split, n_seeds), pool=pool or shared_pool(browsers), max_steps=max_steps)


def tasks(split: str = "train", n_seeds: int | None = None, **_: Any) -> list[Task]:
    """The tasks of a split: "train" (the train tasks at seeds 0..19) or "test" (every task at 5 held-out seeds,
    three tasks never trained on); `n_seeds` changes the seeds per task."""
    return _tasks(split, n_seeds)


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """{"subdomain", "values"} of a MiniWoB++ instruction of a task the family plays; None for anything else."""
    text = " ".join(instruction.split())
    for sub, pattern in GOAL_PATTERNS.items():
        m = re.fullmatch(pattern, text)
        if m:
            return {"subdomain": sub, "values": list(m.groups())}
    return None


def noop_state(state: str, action: str) -> str:
    """The same page with the error line BrowserGym gives for an action it cannot carry out."""
    return _noop_state(state, action, MiniWoBSource.subsets)


