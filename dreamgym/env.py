"""The environment contract every DreamGym environment implements, and `check_env` that validates it.

Owns: `TextEnv` (a gymnasium.Env with `str` observations and actions), `TextSpace`, the `info` keys,
the behaviour after an episode ends, and `check_env`.
Must not know: any concrete environment, models, torch, trainers.

Contract (what trainers may rely on, real or synthetic alike):
- `reset(*, seed=None, options=None) -> (obs, info)`; `options={"task": Task}` picks the task, otherwise the
  seed picks one from the environment's own pool. The same seed and the same actions give the same
  observations. A reset without a seed draws one from the environment's generator `self.np_random`, which the
  last seeded reset seeded (Gymnasium's convention), so `reset(seed=s)` followed by `reset()` calls repeats too:
  `_reset` always receives an int seed, and a subclass that takes all its randomness from it (a
  `random.Random(seed)`, say) keeps the rule with nothing more to do.
- `step(action) -> (obs, reward, terminated, truncated, info)`. An action the environment cannot carry out is
  answered with an observation (a notice), never an exception.
- A step after the episode ended returns the last observation with a notice, reward 0.0 and the same
  terminated/truncated flags, and `info["episode_over"] = True`; `reset` starts a new episode.
- `info` always has: `won` (bool), `task` (a `Task`), `admissible_actions` (list[str], or None where the
  environment cannot list them), `raw_obs` (str) and `abstract_state` (str, the compact state the
  experience model reads and writes).
- `info` may have `invalid_action` (bool): True when the step did nothing because the environment could not
  carry out the action ("Nothing happens."); the rollout engine reports the share as `noop_step_rate`.
- `close()` may be called any number of times.
"""

from __future__ import annotations

import random
from typing import Any

import gymnasium

from dreamgym.types import Task

INFO_KEYS = ("won", "task", "admissible_actions", "raw_obs", "abstract_state")
EPISODE_OVER_NOTICE = "The episode is over. Call reset() to start a new one."


class TextSpace(gymnasium.spaces.Space[str]):
    """Any Python string up to `max_length` characters (gymnasium's Text space only allows a fixed charset)."""

    def __init__(self, max_length: int = 1_000_000, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(1, 12))
        return "".join(chr(int(c)) for c in self.np_random.integers(97, 123, size=n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class TextEnv(gymnasium.Env[str, str]):
    """Base class: text in, text out. Subclasses implement `_reset` and `_step`; the base class enforces
    the after-termination behaviour and fills the required `info` keys so every environment agrees."""

    metadata = {"render_modes": []}
    env_family: str = "text"
    thread_safe: bool = True
    """False when two instances must not run `reset`/`step` at the same time in one process (their engine keeps
    process-global state). The rollout engine then steps such environments one at a time, so a step's
    timeout measures the step and not the wait for another instance."""

    def __init__(self) -> None:
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._done = False
        self._terminated = False
        self._truncated = False
        self._last_obs = ""
        self._last_info: dict[str, Any] = {}
        self._closed = False

    # Subclasses implement these two. `_reset` gets the caller's seed, or one drawn from `self.np_random`.
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            # Gymnasium's seeding: the episode's seed comes from the environment's generator, seeded by the last
            # `reset(seed=...)`. A seeded reset draws nothing from it, so the task a seed picks stays the one
            # `_reset` derives from that seed (collection and evaluation pass their tasks and seeds explicitly).
            seed = int(self.np_random.integers(2**31))
        obs, info = self._reset(seed, dict(options or {}))
        self._done = self._terminated = self._truncated = False
        self._last_obs, self._last_info = obs, self._complete_info(info, obs)
        return obs, self._last_info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            action = str(action)
        if self._done:
            info = dict(self._last_info, episode_over=True)
            return (f"{self._last_obs}\n{EPISODE_OVER_NOTICE}", 0.0, self._terminated, self._truncated, info)
        return self._record(*self._step(action))

    def _record(self, obs: str, reward: float, terminated: bool, truncated: bool,
                info: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Bookkeeping shared by `step` and `step_batch`: end flags, last observation, completed info."""
        self._terminated, self._truncated = bool(terminated), bool(truncated)
        self._done = self._terminated or self._truncated
        self._last_obs, self._last_info = obs, self._complete_info(info, obs)
        return obs, float(reward), self._terminated, self._truncated, self._last_info

    # Batched stepping. Environments whose steps are cheap to batch (the synthetic environment: one model
    # call for the whole batch) set `batched_step = True` and override `_step_batch`; the rollout engine
    # then calls `step_batch` once per turn instead of stepping each env in a thread.
    batched_step: bool = False

    @classmethod
    def _step_batch(cls, envs: list[TextEnv], actions: list[str]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
        return [e._step(a) for e, a in zip(envs, actions)]

    @classmethod
    def step_batch(cls, envs: list[TextEnv], actions: list[str]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
        """Step many environments of this class at once; same results as calling `step` on each."""
        if len(envs) != len(actions):
            raise ValueError(f"step_batch: {len(envs)} envs but {len(actions)} actions")
        actions = [a if isinstance(a, str) else str(a) for a in actions]
        results: list[Any] = [None] * len(envs)
        live = []
        for i, e in enumerate(envs):
            if e._done:
                results[i] = e.step(actions[i])  # the after-termination answer
            else:
                live.append(i)
        if live:
            raw = cls._step_batch([envs[i] for i in live], [actions[i] for i in live])
            for i, out in zip(live, raw):
                results[i] = envs[i]._record(*out)
        return results

    def close(self) -> None:
        self._closed = True

    def _complete_info(self, info: dict[str, Any], obs: str) -> dict[str, Any]:
        info = dict(info)
        info.setdefault("won", False)
        info.setdefault("admissible_actions", None)
        info.setdefault("raw_obs", obs)
        info.setdefault("abstract_state", obs)
        info["won"] = bool(info["won"])
        return info


class CheckEnvError(AssertionError):
    """Raised by `check_env` with a message naming the rule the environment broke."""


def _rollout(env: TextEnv, seed: int, n_steps: int, options: dict[str, Any] | None) -> list[tuple]:
    """Play a seeded sequence of admissible (or fallback) actions; returns what the env said at each step."""
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed, options=options)
    trace: list[tuple] = [("reset", obs, info.get("abstract_state"))]
    for _ in range(n_steps):
        acts = info.get("admissible_actions") or ["look"]
        action = sorted(acts)[rng.randrange(len(acts))]
        obs, reward, term, trunc, info = env.step(action)
        trace.append((action, obs, round(float(reward), 6), term, trunc, info.get("abstract_state")))
        if term or trunc:
            break
    return trace


def check_env(env: TextEnv, seed: int = 0, n_steps: int = 8, options: dict[str, Any] | None = None) -> None:
    """Validate a `TextEnv` against the contract; raises `CheckEnvError` naming the first broken rule.

    Checks: reset/step tuple shapes and types, required info keys, seed determinism (same seed and actions
    give the same observations; `reset(seed=s)` then `reset()` repeats), invalid actions answered with an observation, behaviour after termination,
    and that `close()` is idempotent.
    """

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise CheckEnvError(f"{type(env).__name__}: {msg}")

    need(isinstance(env, gymnasium.Env), "must subclass gymnasium.Env")
    out = env.reset(seed=seed, options=options)
    need(isinstance(out, tuple) and len(out) == 2, "reset() must return (obs, info)")
    obs, info = out
    need(isinstance(obs, str), f"reset() observation must be str, got {type(obs).__name__}")
    need(isinstance(info, dict), "reset() info must be a dict")
    for key in INFO_KEYS:
        need(key in info, f"reset() info lacks required key {key!r}")
    need(isinstance(info["task"], Task), "info['task'] must be a dreamgym.types.Task")
    need(info["admissible_actions"] is None or all(isinstance(a, str) for a in info["admissible_actions"]),
         "info['admissible_actions'] must be None or a list of str")
    need(env.observation_space.contains(obs), "observation not in observation_space")

    # Invalid actions: answered with an observation, not an exception.
    for bad in ("xyzzy plugh", "click[", "", "]]][[[" * 10, "ünïcødé ☃ action"):
        try:
            res = env.step(bad)
        except Exception as e:  # noqa: BLE001 - the point is to catch anything
            raise CheckEnvError(f"{type(env).__name__}: step({bad!r}) raised {type(e).__name__}: {e}") from e
        need(isinstance(res, tuple) and len(res) == 5, "step() must return a 5-tuple")
        o, r, te, tr, inf = res
        need(isinstance(o, str) and o != "", f"step({bad!r}) must answer with a non-empty str observation")
        need(isinstance(r, float), f"reward must be float, got {type(r).__name__}")
        need(isinstance(te, bool) and isinstance(tr, bool), "terminated/truncated must be bool")
        need(isinstance(inf, dict) and all(k in inf for k in INFO_KEYS), "step() info lacks required keys")
        if te or tr:
            break

    # Determinism: same seed + same actions -> same observations.
    a = _rollout(env, seed, n_steps, options)
    b = _rollout(env, seed, n_steps, options)
    need(a == b, "same seed and actions gave different observations (not deterministic)")
    # Gymnasium's seeding (its check_env asks the same): resets without a seed continue from the last seeded one.
    again = [[env.reset(seed=seed, options=options)[0], env.reset(options=options)[0], env.reset(options=options)[0]]
             for _ in range(2)]
    need(again[0] == again[1], "reset(seed=s) then reset() gave different observations: take a reset's randomness "
                               "from the seed `_reset` gets or from self.np_random, never from an unseeded source")

    # Play to the end, then step once more.
    obs, info = env.reset(seed=seed, options=options)
    rng = random.Random(seed + 1)
    term = trunc = False
    for _ in range(1000):
        acts = info.get("admissible_actions") or ["look"]
        obs, r, term, trunc, info = env.step(acts[rng.randrange(len(acts))])
        if term or trunc:
            break
    need(term or trunc, "episode never ended within 1000 steps (no step limit?)")
    need(isinstance(info["won"], bool), "info['won'] must be bool")
    try:
        o, r, te, tr, inf = env.step("look")
    except Exception as e:  # noqa: BLE001
        raise CheckEnvError(f"{type(env).__name__}: step after termination raised {e!r}") from e
    need(isinstance(o, str) and r == 0.0 and (te or tr) and inf.get("episode_over") is True,
         "step after the episode ended must return the last obs, reward 0.0, the end flags and episode_over")
    obs, info = env.reset(seed=seed + 2, options=options)
    need(isinstance(obs, str), "reset() after an ended episode must work")

    try:
        env.close()
        env.close()
    except Exception as e:  # noqa: BLE001
        raise CheckEnvError(f"{type(env).__name__}: close() is not idempotent: {e!r}") from e
