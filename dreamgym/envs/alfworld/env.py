"""`ALFWorldEnv`: a `TextEnv` over the real ALFWorld engine (TextWorld's PDDL environment, fast-downward,
ALFWorld's demangler), playing generated games or, when `ALFWORLD_DATA` is set, the official game files.

Owns: choosing the game for a task (writing and checking a lazily generated train game on first use),
the step limit, the reward (1.0 on the step that wins, else 0.0), command normalisation, and the info keys
(`admissible_actions` from the engine, `abstract_state` from `state.StateTracker`, `walkthrough` at reset).
Must not know: policies, the experience model, trainers, torch.

Notes
- The engine is driven directly (`PddlEnv` + `AlfredDemangler` + `AlfredInfos`, the wrappers ALFWorld passes to
  `textworld.gym.register_games`) rather than through a `textworld.gym` env id, because a gym id fixes the
  list of games at registration and cannot load the game a `Task` names.
- Commands are matched as the engine matches them after light normalisation: case and spacing are ignored, a
  trailing period is dropped, and the ALFWorld-prompt spelling "put X in/on Y" is accepted for the engine's
  "move X to Y". Anything else gets the engine's own "Nothing happens.".
- The observation drops TextWorld's "-= Welcome to TextWorld, ALFRED! =-" banner (`raw_obs` keeps it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.envs.alfworld import games
from dreamgym.envs.alfworld.engine import ENGINE_LOCK, make_engine
from dreamgym.envs.alfworld.state import StateTracker, normalize_command
from dreamgym.types import Task

log = logging.getLogger(__name__)

MAX_STEPS = 50
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""


class ALFWorldEnv(TextEnv):
    """ALFWorld on the real engine. `split` picks the task pool (see `dreamgym.envs.alfworld.tasks`);
    `reset(options={"task": task})` plays that task's game, `reset(seed=s)` draws one from the pool."""

    env_family = "alfworld"
    thread_safe = False  # the engine is not (engine.ENGINE_LOCK); the rollout engine steps these one at a time

    def __init__(self, split: str = "train", max_steps: int = MAX_STEPS, n: int | None = None,
                 seed: int = 0, tasks: list[Task] | None = None):
        super().__init__()
        self.split = split
        self.max_steps = int(max_steps)
        self.seed = seed
        self.tasks = list(tasks) if tasks is not None else games.tasks(split, n=n, seed=seed)
        if not self.tasks:
            raise ValueError(f"ALFWorld split {split!r} has no games")
        self._engine: Any = None
        self._loaded: str | None = None
        self._tracker = StateTracker()
        self.task: Task = self.tasks[0]
        self.t = 0
        self.skipped_games: dict[str, str] = {}  # game id -> why it could not be played

    # -- game selection ------------------------------------------------------------------------------------
    def _engine_(self) -> Any:
        if self._engine is None:
            self._engine = make_engine(walkthrough=True)
        return self._engine

    def _game_file(self, task: Task) -> str | None:
        """Path of the task's checked game (writing and checking it first when it is a lazy train game);
        None when the game cannot be played (the reason is logged and kept in `skipped_games`)."""
        goal = task.goal or {}
        path = goal.get("game_file")
        if goal.get("generator") == games.GEN_VERSION and "index" in goal:
            status = games.read_status(path) if path else None
            if status is None or status["solvable"] is None:
                row = games.materialize(goal["split"], int(goal["index"]), int(goal.get("seed", 0)), self._engine_())
                path = row.get("goal", {}).get("game_file", path)
                if row["status"] != "ok":
                    self.skipped_games[task.id] = row["reason"]
                    return None
            elif not status["solvable"]:
                self.skipped_games[task.id] = status["reason"] or "unsolvable"
                return None
            return path
        if not goal.get("game_file"):
            spec = games.spec_for_goal(goal or {}, task.instruction, seed=self.seed)
            if spec is None:
                self.skipped_games[task.id] = "no floor plan can host this goal"
                return None
            row = games.materialize_spec(spec, self._engine_())
            if row["status"] != "ok":
                self.skipped_games[task.id] = row["reason"]
                return None
            return row["goal"]["game_file"]
        if path is None or not Path(path).exists():
            self.skipped_games[task.id] = f"game file missing: {path}"
            return None
        return path

    def _pick(self, seed: int | None, options: dict[str, Any]) -> tuple[Task, str]:
        task = options.get("task")
        if task is not None and not isinstance(task, Task):
            task = Task.from_dict(task)
        if task is None:
            start = int(self.np_random.integers(len(self.tasks)))
            candidates = [self.tasks[(start + k) % len(self.tasks)] for k in range(len(self.tasks))]
        else:
            candidates = [task]
        for cand in candidates[:50]:
            path = self._game_file(cand)
            if path is not None:
                return cand, path
            log.warning("alfworld: skipping task %s: %s", cand.id, self.skipped_games.get(cand.id))
        raise RuntimeError(f"no playable ALFWorld game among the tasks tried; reasons: {self.skipped_games}")

    # -- TextEnv -------------------------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # The lock serialises engine calls across threads (the rollout engine steps envs in a thread pool); the
        # engine is CPU-bound Python, so holding it costs no parallelism the GIL would have allowed.
        with ENGINE_LOCK:
            self.task, path = self._pick(seed, options)
            engine = self._engine_()
            if self._loaded != path:
                engine.load(path)
                self._loaded = path
            gs = engine.reset()
        self.t = 0
        raw = gs.feedback
        obs = raw.replace(games.WELCOME, "").strip()
        # The state's search order (its "Unexplored" line) is drawn from the episode seed, so the G rollouts of a
        # GRPO group share it and different seeds of one game do not.
        order_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        state = self._tracker.reset(self.task.instruction, obs, seed=order_seed)
        info = self._info(gs, raw, state.render())
        info["walkthrough"] = list(gs.get("extra.walkthrough") or [])
        return obs, info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        command = normalize_command(action)
        with ENGINE_LOCK:
            gs, _, _ = self._engine_().step(command)
        obs = gs.feedback.strip() or "Nothing happens."
        state = self._tracker.update(command, obs)
        won = bool(gs.get("won"))
        truncated = not won and self.t >= self.max_steps
        info = self._info(gs, gs.feedback, state.render())
        info["invalid_action"] = obs == "Nothing happens."  # the engine's answer to a command it cannot carry out
        return obs, 1.0 if won else 0.0, won, truncated, info

    def _info(self, gs: Any, raw: str, state: str) -> dict[str, Any]:
        return {"won": bool(gs.get("won")), "task": self.task, "admissible_actions": list(gs["admissible_commands"]),
                "raw_obs": raw, "abstract_state": state, "gamefile": self._loaded}

    def close(self) -> None:
        if self._engine is not None:
            try:
                with ENGINE_LOCK:
                    self._engine.close()
            except Exception:  # noqa: BLE001 - closing twice or a half-started engine is fine
                pass
            self._engine = None
            self._loaded = None
        super().close()
