"""The environment-family contract: what one family of environments offers the rest of DreamGym.

Owns: `EnvFamily` (the required surface, each member documented on its field), `OptionalHooks` (the optional
hooks, each documented on its method: signature and contract), `ScriptedPolicy`, and building an `EnvFamily`
from a family module (`EnvFamily.from_module`).
Must not know: any concrete family, how families are registered or found, models, torch, trainers.

The collector, the experience model, the synthetic environment, the curriculum and evaluation use a family only
through this surface. A family is usually a module (`dreamgym.envs.dial`) whose module-level names are the
members below; `EnvFamily.from_module` reads them. An `EnvFamily` behaves like that module for its users:
`fam.tasks(...)`, `fam.make_env(...)`, `getattr(fam, "noop_state", None)` and `hasattr(fam, "corpus_text")` all
work, and an optional hook the family lacks is no attribute at all (as on the module), not an attribute holding
None.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dreamgym.env import TextEnv
from dreamgym.types import Task, Transition


class ScriptedPolicy(Protocol):
    """A scripted policy of a family (`EnvFamily.POLICIES`), built as `cls(seed)`: deterministic for a seed."""

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        """Start an episode of `task` from the environment's reset `(obs, info)`."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        """The next action for the latest `(obs, info)` of the environment."""


class OptionalHooks(Protocol):
    """The optional hooks a family may define, with their contracts. Each one a family defines changes what the
    rest of DreamGym does for it (named in brackets); a family without it gets the generic behaviour."""

    def canonical_state(self, state: str) -> str:
        """`state` in the family's canonical layout, derived lines recomputed: a real state comes back unchanged.
        [The synthetic environment passes every state a model writes through it.]"""

    def model_state(self, state: str) -> str:
        """The part of `state` an experience model writes: the lines a reset fixes are left out, and
        `complete_state` carries them over. Defined together with `complete_state`.
        [`ExperienceModelConfig.compact_states`]"""

    def complete_state(self, written: str, previous: str) -> str:
        """The whole state rebuilt from a model's `written` part (see `model_state`) and `previous`, the state
        the action was taken in. Defined together with `model_state`."""

    def model_observation(self, state: str) -> str:
        """Only the observation of `state` (the feedback to the action), which is all an experience model writes;
        `state_after` derives the rest. Defined together with `state_after`.
        [`ExperienceModelConfig.write_observation`]"""

    def state_after(self, previous: str, written: str) -> str:
        """The whole next state from `previous` (the state the action was taken in) and the `written` observation
        (see `model_observation`), by the environment's own bookkeeping. Defined together with
        `model_observation`."""

    def noop_state(self, state: str, action: str) -> str:
        """The abstract state the real environment shows after `action`, which it cannot carry out (ALFWorld: the
        observation becomes "Nothing happens."; WebShop: the same page with the shop's notice).
        [The synthetic environment answers inadmissible actions with it; without it the state stays as it was.]"""

    def grounded_outcome(self, task: Task, state: str, action: str, next_state: str) -> tuple[float, bool] | None:
        """The family's own reward rule on a transition between abstract states: `(reward, terminated)`, or None
        when it cannot decide (ALFWorld: the goal conditions on `next_state`; WebShop: the purchase score of the
        catalog product bought from `state`). [The synthetic environment takes reward and end from it instead of
        the model's: `reward_from`.]"""

    def hidden_outcome_key(self, task: Task, state: str, action: str) -> str | None:
        """A key under which the outcome of `action` depends only on the task's hidden world (ALFWorld: the first
        look into a receptacle of that game; WebShop: a search, a product's page or tab on that catalog), so any
        recorded real step with the same key answers it; None when the outcome follows from the state.
        [`ExperienceModelConfig.copy_hidden_outcomes`]"""

    def determined_outcome(self, task: Task, state: str, action: str) -> str | None:
        """The environment's answer to `action` when `state` alone fixes it, in the form `state_after` folds into
        the state (ALFWorld: the engine's feedback to a take within reach, a revisit of a known receptacle, an
        admissible move, inventory; WebShop: the whole next page after Back to Search or an option); else None.
        [`ExperienceModelConfig.derive_determined_outcomes`]"""

    def outcome_contradiction(self, task: Task, state: str, action: str, next_state: str) -> str:
        """Why `next_state` cannot be the environment's answer to `action` in `state` (ALFWorld: feedback that
        restates another command), "" when it can. [`ExperienceModelConfig.reject_contradictions`: the experience
        model re-generates such outputs like malformed ones.]"""

    def corpus_text(self) -> list[str]:
        """Representative text of the family (instructions, states, actions, reasoning traces of training tasks,
        never test tasks), deterministic. [The tiny preset trains its tokenizer on it.]"""


OPTIONAL_HOOKS: tuple[str, ...] = tuple(n for n, v in vars(OptionalHooks).items()
                                        if callable(v) and not n.startswith("_"))
# Hooks that only work as a pair: the experience model uses both or neither.
HOOK_PAIRS: tuple[tuple[str, str], ...] = (("model_state", "complete_state"), ("model_observation", "state_after"))


@dataclass(frozen=True, eq=False)  # eq=False: identity, like the module it stands for (and hashable)
class EnvFamily:
    """One environment family: the required surface as fields, the optional hooks it has in `hooks` (and as
    attributes of the same name; see `OptionalHooks` for each hook's contract)."""

    name: str
    """The family's name: `Task.env` of its tasks, and what `dreamgym.envs.family(name)` finds it by."""
    make_env: Callable[..., TextEnv]
    """`make_env(split: str = "train", **kwargs) -> TextEnv`: a real environment on a split's tasks."""
    tasks: Callable[..., list[Task]]
    """`tasks(split: str, **kwargs) -> list[Task]`: the tasks of a split; every family has "train" and "test"
    (ALFWorld adds "valid_seen"/"valid_unseen"), and each task's `env` is the family's name."""
    POLICIES: Mapping[str, Callable[[int], ScriptedPolicy]]
    """Scripted policies by name ("oracle"/"expert", "noisy", "random", ...), each built as `cls(seed)`."""
    admissible_from_state: Callable[[str], list[str]]
    """`admissible_from_state(state: str) -> list[str]`: the actions an abstract state offers."""
    parse_goal: Callable[[str], dict[str, Any] | None]
    """`parse_goal(instruction: str) -> dict | None`: the structured goal, or None when not well-formed (the
    curriculum validates generated task variants with it)."""
    explain: Callable[[Transition], str]
    """`explain(transition: Transition) -> str`: the environment-grounded reasoning trace of a transition."""
    hooks: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """The optional hooks the family defines, by name (a subset of `OPTIONAL_HOOKS`)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.hooks) - set(OPTIONAL_HOOKS))
        if unknown:
            raise ValueError(f"environment family {self.name!r}: unknown hooks {unknown}; "
                             f"known: {', '.join(OPTIONAL_HOOKS)}")
        object.__setattr__(self, "hooks", types.MappingProxyType(dict(self.hooks)))

    @classmethod
    def from_module(cls, name: str, module: types.ModuleType) -> EnvFamily:
        """The family a module defines with its module-level names; raises TypeError naming what it lacks."""
        required = [f for f in cls.__dataclass_fields__ if f not in ("name", "hooks")]
        missing = [f for f in required if not hasattr(module, f)]
        if missing:
            raise TypeError(f"environment family {name!r} ({module.__name__}) lacks {', '.join(missing)}")
        hooks = {h: getattr(module, h) for h in OPTIONAL_HOOKS if getattr(module, h, None) is not None}
        return cls(name=name, hooks=hooks, **{f: getattr(module, f) for f in required})

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        # Reached only for names that are not fields. Read `hooks` from __dict__: during copy or unpickling it
        # is not set yet, and `self.hooks` would recurse into this method.
        hooks = self.__dict__.get("hooks", {})
        if attr in hooks:
            return hooks[attr]
        raise AttributeError(f"environment family {self.__dict__.get('name')!r} has no {attr!r}")

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self.hooks]

    def __repr__(self) -> str:
        return f"EnvFamily({self.name!r}, hooks={sorted(self.hooks)})"
