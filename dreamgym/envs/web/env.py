"""`WebEnv`: a DreamGym text environment over a real browser page, for any web benchmark given as a `WebTaskSource`.

Owns: an episode's browser context (a fresh one per episode, in a browser of a `BrowserPool`), the step loop
(parse the action, carry it out, let the page settle, ask the task for reward and end, observe), the step limit,
and turning a crashed or hung browser into a `BrowserFailure` that ends the episode with its reason.
Must not know: which benchmark the tasks come from (the `WebTaskSource` knows), models, trainers.

Observation and abstract state are the same text (`dreamgym.envs.web.axtree`); `info["raw_obs"]` is the page's
HTML. An action that is no offered call, or that fails on the page (no such element, a timeout), is answered with
the page as it is plus an `[error]` line and `invalid_action=True`, as BrowserGym reports `last_action_error`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from dreamgym.env import TextEnv
from dreamgym.envs.web.actions import InvalidAction, Outcome, execute, parse_action
from dreamgym.envs.web.axtree import admissible_from_state, extract_tree, format_state
from dreamgym.envs.web.browser import BrowserFailure, BrowserPool, BrowserWorker
from dreamgym.types import Task


class WebTaskSource(Protocol):
    """A web benchmark as `WebEnv` uses it."""

    name: str
    """The family name (`Task.env` of its tasks)."""
    subsets: tuple[str, ...]
    """BrowserGym action subsets the tasks take (`dreamgym.envs.web.actions`)."""
    viewport: dict[str, int]
    settle_s: float
    """Seconds to let the page's scripts run after an action before it is judged and observed."""
    visible_only: bool
    """Leave out of the tree what is not in view (BrowserGym's visibility mark)."""

    def setup(self, page: Any, task: Task) -> str:
        """Open `task` on a fresh `page`; returns the goal as the page states it."""

    def validate(self, page: Any, task: Task, outcome: Outcome) -> tuple[float, bool, dict[str, Any]]:
        """(reward, episode over, info) after an action with `outcome`."""


@dataclass
class _Episode:
    context: Any
    page: Any
    generation: int
    goal: str
    steps: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class WebEnv(TextEnv):
    """A web task in a real browser: text states (the pruned accessibility tree), BrowserGym's action strings."""

    env_family = "web"

    def __init__(self, source: WebTaskSource, tasks: list[Task], *, pool: BrowserPool, max_steps: int = 10):
        super().__init__()
        if not tasks:
            raise ValueError(f"{source.name}: no tasks to play")
        self.source = source
        self.env_family = source.name
        self.tasks = tasks
        self.max_steps = max_steps
        self.worker: BrowserWorker = pool.worker()
        self.task: Task = tasks[0]
        self._ep: _Episode | None = None

    # ------------------------------------------------------------------------------------------ contract

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.get("task")
        if task is None:
            task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
        self.task = task
        old, self._ep = self._ep, None
        self._ep = self._call(lambda browser: self._open(browser, task, old), "reset")
        return self._observe_result(self._call(lambda _: self._observe(""), "reset"), reward_info={})

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ep = self._ep
        if ep is None:
            raise BrowserFailure("no open episode (its browser failed): call reset()")
        ep.steps += 1
        try:
            code = parse_action(action, self.source.subsets)
        except InvalidAction as e:
            why = f"invalid action: {e}"
            state, info = self._call(lambda _: self._observe(why), "step")
            obs, info = self._observe_result((state, info), reward_info={})
            info["invalid_action"] = True
            return obs, 0.0, False, ep.steps >= self.max_steps, info

        def act(_: Any) -> tuple[float, bool, dict[str, Any], str, dict[str, Any], Outcome]:
            outcome = execute(code, ep.page)
            time.sleep(self.source.settle_s)
            reward, done, extra = self.source.validate(ep.page, self.task, outcome)
            state, info = self._observe(outcome.error)
            return reward, done, extra, state, info, outcome

        reward, done, extra, state, info, outcome = self._call(act, "step")
        obs, info = self._observe_result((state, info), reward_info=extra)
        info["invalid_action"] = bool(outcome.error)
        info["won"] = bool(done and reward >= 1.0)
        return obs, float(reward), bool(done), not done and ep.steps >= self.max_steps, info

    def close(self) -> None:
        ep, self._ep = self._ep, None
        if ep is not None and not self._closed and ep.generation == self.worker.generation:
            try:
                self.worker.call(lambda _: ep.context.close(), timeout_s=10.0)
            except Exception:  # noqa: BLE001 - closing is best effort; a dead browser took the context with it
                pass
        super().close()

    # ------------------------------------------------------------------------------------------ browser side

    def _call(self, fn: Any, stage: str) -> Any:
        ep = self._ep
        if ep is not None and ep.generation != self.worker.generation:
            self._ep = None
            raise BrowserFailure(f"{stage}: the browser restarted since this episode began; the episode is lost")
        try:
            return self.worker.call(fn)
        except BrowserFailure as e:
            self._ep = None
            raise BrowserFailure(f"{stage} of {self.task.id}: {e.reason}") from e

    def _open(self, browser: Any, task: Task, old: _Episode | None) -> _Episode:
        if old is not None and old.generation == self.worker.generation:
            try:
                old.context.close()
            except Exception:  # noqa: BLE001 - a context that is already gone needs no closing
                pass
        context = browser.new_context(viewport=self.source.viewport)
        context.set_default_timeout(self.worker.config.action_timeout_ms)
        page = context.new_page()
        try:
            goal = self.source.setup(page, task)
        except Exception:
            context.close()
            raise
        return _Episode(context, page, self.worker.generation, goal)

    def _observe(self, error: str) -> tuple[str, dict[str, Any]]:
        ep = self._ep
        assert ep is not None
        tree = extract_tree(ep.page, visible_only=self.source.visible_only)
        state = format_state(ep.goal, ep.page.title(), tree, error)
        return state, {"raw_obs": ep.page.content(), "url": ep.page.url}

    def _observe_result(self, observed: tuple[str, dict[str, Any]],
                        reward_info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        state, info = observed
        return state, {"task": self.task, "abstract_state": state, "admissible_actions": admissible_from_state(state),
                       "won": False, **info, **reward_info}
