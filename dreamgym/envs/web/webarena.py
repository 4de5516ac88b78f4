"""WebArena-Lite: the paper's web benchmark (165 tasks on self-hosted shopping, admin, forum, GitLab and map
sites) as an environment family, through BrowserGym's observation and actions in a real browser.

Owns: the family surface (see `dreamgym.envs.family`): `make_env`, `tasks`, `POLICIES`, `admissible_from_state`,
`parse_goal`, `explain`, `noop_state`.
Must not know: models, torch, trainers.

The sites are not part of DreamGym: `make_env` works without them, and opening a task raises
`SitesNotConfigured` naming the `WA_*` variables to set (docs/web.md). No scripted policy solves these tasks; the
family's policies are the random one (offline exploration data) and `answer-na`, which answers "N/A" at once
(the right answer on WebArena's unachievable tasks, a floor on the rest).
"""

from __future__ import annotations

import random
from typing import Any

from dreamgym.envs.web.axtree import admissible_from_state as _admissible
from dreamgym.envs.web.browser import DEFAULT_BROWSERS, BrowserPool, shared_pool
from dreamgym.envs.web.env import WebEnv
from dreamgym.envs.web.evaluators import Judge, strict_judge
from dreamgym.envs.web.explain import explain
from dreamgym.envs.web.explain import noop_state as _noop_state
from dreamgym.envs.web.actions import WEBARENA_SUBSETS
from dreamgym.envs.web.webarena_tasks import WebArenaLiteSource, load_configs
from dreamgym.envs.web.webarena_tasks import tasks as _tasks
from dreamgym.types import Task

__all__ = ["make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain", "noop_state"]

MAX_STEPS = 30
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""


def make_env(split: str = "all", *, browsers: int = DEFAULT_BROWSERS, pool: BrowserPool | None = None,
             max_steps: int = MAX_STEPS, judge: Judge = strict_judge, environ: dict[str, str] | None = None) -> WebEnv:
    """A `WebEnv` on a split's WebArena-Lite tasks; `judge` scores fuzzy matches (default: strict containment),
    `environ` replaces `os.environ` for the `WA_*` site variables."""
    return WebEnv(WebArenaLiteSource(judge, environ), _tasks(split), pool=pool or shared_pool(browsers),
                  max_steps=max_steps)


def tasks(split: str = "all", **_: Any) -> list[Task]:
    """"all" (the 165 tasks), "train" (even intent templates) or "test" (odd ones)."""
    return _tasks(split)


def admissible_from_state(state: str) -> list[str]:
    """Clicks, fills and choices the page offers, plus the answer template `send_msg_to_user(...)` is not listed:
    an answer is free text."""
    return _admissible(state)


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """The config of a WebArena-Lite intent ({"task_id", "sites", "eval_types"}), None for any other text."""
    text = " ".join(instruction.split())
    for c in load_configs():
        if " ".join(c["intent"].split()) == text:
            return {"task_id": c["task_id"], "sites": list(c["sites"]), "eval_types": list(c["eval"]["eval_types"])}
    return None


def noop_state(state: str, action: str) -> str:
    return _noop_state(state, action, WEBARENA_SUBSETS)


class RandomPolicy:
    """A random admissible action; gives up with "N/A" when the page offers none."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = info.get("admissible_actions") or []
        return self.rng.choice(adm) if adm else "send_msg_to_user('N/A')"


class AnswerNAPolicy(RandomPolicy):
    def act(self, obs: str, info: dict[str, Any]) -> str:
        return "send_msg_to_user('N/A')"


POLICIES = {"random": RandomPolicy, "answer-na": AnswerNAPolicy}
