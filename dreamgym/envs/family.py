"""The environment-family contract: what one family of environments offers the rest of DreamGym.

Owns: `is_admissible` (how an answer of `admissible_from_state` is read), `EnvFamily` (the required surface, each
member documented on its field, the step limit among them, and the roles of its scripted policies: which one is
the expert, which ones explore), `FamilyHooks` (the optional hooks, each a method documented with its contract whose
body is the generic behaviour a family without it gets), `ScriptedPolicy`, the step a dream takes from a model's answer
through the hooks (`dream_answer`), and building an `EnvFamily` from a family module (`EnvFamily.from_module`).
Must not know: any concrete family, how families are registered or found, models, torch, trainers.

The collector, the experience model, the synthetic environment, the curriculum and evaluation use a family only
through this surface. A family is usually a module (`dreamgym.envs.dial`) whose module-level names are the
members below; `EnvFamily.from_module` reads them, and its module-level functions named like a hook become the
methods of its `hooks` (`FamilyHooks.of`). Callers call a hook directly (`fam.hooks.noop_state(state, action)`):
a family that lacks it gets the default.
"""

from __future__ import annotations

import dataclasses
import random
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from dreamgym.env import TextEnv
from dreamgym.types import Task, Transition


_FORM = re.compile(r"^(\w+)\[(?:<[^>]*>|\.\.\.|…|\*)\]$")


def is_form(entry: str) -> bool:
    """Whether an `admissible_from_state` entry is a form (`search[<query>]`, `search[...]`) that admits any
    argument, rather than one action."""
    return bool(_FORM.match(" ".join(entry.strip().lower().split())))


def is_admissible(action: str, admissible: list[str] | None) -> bool:
    """True when `action` is one of `admissible` (an `admissible_from_state` answer), case and
    whitespace-insensitive. An entry written as a form (`search[<query>]`, `search[...]`) admits any argument; an
    empty or missing list admits anything. (The synthetic environment and `check_family` both read the lists so.)"""
    if not admissible:
        return True
    a = " ".join(action.strip().lower().split())
    for e in admissible:
        ne = " ".join(e.strip().lower().split())
        if a == ne:
            return True
        m = _FORM.match(ne)
        if m and a.startswith(m.group(1) + "[") and a.endswith("]") and len(a) > len(m.group(1)) + 2:
            return True
    return False


class ScriptedPolicy(Protocol):
    """A scripted policy of a family (`EnvFamily.POLICIES`), built as `cls(seed)`: deterministic for a seed."""

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        """Start an episode of `task` from the environment's reset `(obs, info)`."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        """The next action for the latest `(obs, info)` of the environment."""


class FamilyHooks:
    """The optional hooks a family may define, with their contracts. Each one a family defines changes what the
    rest of DreamGym does for it (named in brackets); the body of each method here is the generic behaviour a
    family without it gets. A family defines hooks by subclassing this class and overriding them, or by naming
    functions (`FamilyHooks.of`, or module-level functions of a family module); `defined` names the ones it has."""

    defined: ClassVar[frozenset[str]] = frozenset()
    """The hooks the family defines itself (the others are the defaults below); set for each subclass."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {n for c in cls.__mro__[:cls.__mro__.index(FamilyHooks)] for n, v in vars(c).items()
               if not n.startswith("_") and isinstance(v, (types.FunctionType, staticmethod, classmethod))}
        unknown = sorted(own - set(OPTIONAL_HOOKS))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown hooks {unknown}; known: {', '.join(OPTIONAL_HOOKS)}")
        cls.defined = frozenset(own)

    @staticmethod
    def of(functions: Mapping[str, Callable[..., Any]], name: str = "family") -> FamilyHooks:
        """The hooks whose methods are `functions` (hook name -> function, as a family module defines them);
        raises ValueError naming an unknown hook."""
        methods = {h: staticmethod(fn) for h, fn in functions.items()}
        return types.new_class(f"{name}_hooks", (FamilyHooks,), {}, lambda ns: ns.update(methods))()

    @property
    def writes_observations(self) -> bool:
        """Whether the family defines the `model_observation`/`state_after` pair (else they are identities)."""
        return {"model_observation", "state_after"} <= self.defined

    @property
    def grounds_states(self) -> bool:
        """Whether the family writes the parts of a next state an action fixes, `ground_state`."""
        return "ground_state" in self.defined

    @property
    def grounds_outcomes(self) -> bool:
        """Whether the family defines its own reward rule, `grounded_outcome`."""
        return "grounded_outcome" in self.defined

    def canonical_state(self, state: str) -> str:
        """`state` in the family's canonical layout, derived lines recomputed: a real state comes back unchanged.
        [The synthetic environment passes every state a model writes through it.] Default: `state`."""
        return state

    def model_state(self, state: str) -> str:
        """The part of `state` an experience model writes: the lines a reset fixes are left out, and
        `complete_state` carries them over. Defined together with `complete_state`.
        [`ExperienceModelConfig.compact_states`] Default: the whole `state`."""
        return state

    def complete_state(self, written: str, previous: str) -> str:
        """The whole state rebuilt from a model's `written` part (see `model_state`) and `previous`, the state
        the action was taken in. Defined together with `model_state`. Default: `written`."""
        return written

    def model_observation(self, state: str) -> str:
        """Only the observation of `state` (the feedback to the action), which is all an experience model writes;
        `state_after` derives the rest. Defined together with `state_after`.
        [`ExperienceModelConfig.write_observation`; a family without the pair has whole states written] Default:
        `state`."""
        return state

    def state_after(self, previous: str, written: str) -> str:
        """The whole next state from `previous` (the state the action was taken in) and the `written` observation
        (see `model_observation`), by the environment's own bookkeeping. Defined together with
        `model_observation`. Default: `written`."""
        return written

    def noop_state(self, state: str, action: str) -> str | None:
        """The abstract state the real environment shows after `action`, which it cannot carry out (ALFWorld: the
        observation becomes "Nothing happens."; WebShop: the same page with the shop's notice).
        [The synthetic environment answers inadmissible actions with it.] Default: None, the family cannot say:
        the synthetic environment keeps the state and adds a notice to the observation."""
        return None

    def grounded_outcome(self, task: Task, state: str, action: str, next_state: str,
                         history: Sequence[tuple[str, str]] = ()) -> tuple[float, bool] | None:
        """The family's own reward rule on a transition between abstract states: `(reward, terminated)`, or None
        when it cannot decide (ALFWorld: the goal conditions on `next_state`; WebShop: the purchase score of the
        catalog product bought from `state`; MiniWoB++: the form a Submit sends, a password's characters read from
        the fills of `history`, the episode's earlier (state, action) pairs, oldest first). [The synthetic
        environment takes reward and end from it instead of the model's: `reward_from`.] Default: None (no rule:
        the model's answer stands)."""
        return None

    def ground_state(self, task: Task, state: str, action: str, next_state: str) -> str | None:
        """`next_state`, as an experience model wrote it for `action` on `state`, with the parts the action alone
        fixes written in as the real environment shows them (MiniWoB++: the text a `fill` types into its field, the
        box a click checks), or None when the action fixes nothing the family can write. [The synthetic environment
        applies it to every answer: `DreamConfig.ground_states`.] Default: None (the model's answer stands)."""
        return None

    def hidden_outcome_key(self, task: Task, state: str, action: str) -> str | None:
        """A key under which the outcome of `action` depends only on the task's hidden world (ALFWorld: the first
        look into a receptacle of that game; WebShop: a search, a product's page or tab on that catalog), so any
        recorded real step with the same key answers it; None when the outcome follows from the state.
        [`ExperienceModelConfig.copy_hidden_outcomes`] Default: None."""
        return None

    def determined_outcome(self, task: Task, state: str, action: str) -> str | None:
        """The environment's answer to `action` when `state` alone fixes it, in the form `state_after` folds into
        the state (ALFWorld: the engine's feedback to a take within reach, a revisit of a known receptacle, an
        admissible move, inventory; WebShop: the whole next page after Back to Search or an option); else None.
        [`ExperienceModelConfig.derive_determined_outcomes`] Default: None."""
        return None

    def outcome_contradiction(self, task: Task, state: str, action: str, next_state: str) -> str:
        """Why `next_state` cannot be the environment's answer to `action` in `state` (ALFWorld: feedback that
        restates another command), "" when it can. [`ExperienceModelConfig.reject_contradictions`: the experience
        model re-generates such outputs like malformed ones.] Default: ""."""
        return ""

    def task_kind(self, task: Task) -> str:
        """What `task` is an instance of (MiniWoB++: its page, `click-button`, one instance per seed); tasks of one
        kind are the same thing asked again. [A collection's schedule plays the kinds in turn, so a short collection
        meets every kind it names.] Default: `task.id` (every task its own kind)."""
        return task.id

    def task_variants(self, task: Task, state: str, n: int, rng: random.Random) -> list[str]:
        """At most `n` instructions of other tasks on the page of `task`, whose initial state is `state`, each naming
        something else the page shows (MiniWoB++: another link, option, tab, box set; another text to type), so
        each is feasible there and the family's reward rule can judge it. [The curriculum's writer with
        `curriculum.writer=family`.] Default: [] (the family writes none)."""
        return []

    def show_goal(self, task: Task, state: str) -> str:
        """`state`, a real initial state of the page `task` was varied from (a curriculum variant starts where its
        parent does), showing `task`'s own goal (MiniWoB++: its `[goal]` line). [The synthetic environment applies
        it to a generated task's real initial state.] Default: `state` (the family's states do not show the goal,
        or the real environment writes it from the task)."""
        return state

    def corpus_text(self) -> list[str] | None:
        """Representative text of the family (instructions, states, actions, reasoning traces of training tasks,
        never test tasks), deterministic. [The tiny preset trains its tokenizer on it.] Default: None (no corpus
        of its own)."""
        return None


OPTIONAL_HOOKS: tuple[str, ...] = tuple(n for n, v in vars(FamilyHooks).items()
                                        if isinstance(v, types.FunctionType) and not n.startswith("_"))
# Hooks that only work as a pair: the experience model uses both or neither.
HOOK_PAIRS: tuple[tuple[str, str], ...] = (("model_state", "complete_state"), ("model_observation", "state_after"))


@dataclass(frozen=True)
class DreamAnswer:
    """A model's answer for one step as the dream takes it (`dream_answer`)."""

    next_state: str
    reward: float
    done: bool
    state_grounded: bool
    """`ground_state` changed the next state the model wrote."""
    rule: tuple[float, bool] | None
    """The family's reward rule's `(reward, terminated)`; None where it left them to the model (or was not asked)."""


def dream_answer(hooks: FamilyHooks, task: Task, state: str, action: str, next_state: str, reward: float,
                 done: bool, history: Sequence[tuple[str, str]] = (), *, ground_states: bool = True,
                 rule: bool = True) -> DreamAnswer:
    """The step a dream takes from a model's answer (`next_state`, `reward`, `done`) for `action` on `state`: the
    state in the family's canonical layout, with what the action alone fixes written in (`ground_state`, when
    `ground_states`), then reward and end from the family's rule on it where it decides (`grounded_outcome` with
    the episode's earlier (state, action) pairs `history`, when `rule`). A hook that cannot read a state leaves the
    model's answer as written. The synthetic environment steps by it, and `dreamgym eval-em` scores it, so the
    fidelity the report gives is the one the dream trains on."""
    try:
        written = hooks.canonical_state(next_state)
    except Exception:  # noqa: BLE001 - a state the parser cannot read stays as the model wrote it
        written = next_state
    grounded = None
    if ground_states:
        try:
            grounded = hooks.ground_state(task, state, action, written)
        except Exception:  # noqa: BLE001 - states the family cannot read: keep the model's answer
            grounded = None
    changed = grounded is not None and grounded != written
    final = grounded if changed and grounded is not None else written
    verdict = None
    if rule:
        try:
            verdict = hooks.grounded_outcome(task, state, action, final, history)
        except Exception:  # noqa: BLE001 - as above: the model's reward and end stand
            verdict = None
    if verdict is not None:
        reward, done = float(verdict[0]), bool(verdict[1])
    return DreamAnswer(final, float(reward), bool(done), changed, verdict)


@dataclass(frozen=True, eq=False)  # eq=False: identity, like the module it stands for (and hashable)
class EnvFamily:
    """One environment family: the required surface as fields, its optional hooks in `hooks` (see `FamilyHooks`
    for each hook's contract and default)."""

    name: str
    """The family's name: `Task.env` of its tasks, and what `dreamgym.envs.family(name)` finds it by."""
    make_env: Callable[..., TextEnv]
    """`make_env(split: str = "train", **kwargs) -> TextEnv`: a real environment on a split's tasks."""
    tasks: Callable[..., list[Task]]
    """`tasks(split: str, **kwargs) -> list[Task]`: the tasks of a split; every family has "train" and "test"
    (ALFWorld adds "valid_seen"/"valid_unseen"), and each task's `env` is the family's name."""
    POLICIES: Mapping[str, Callable[[int], ScriptedPolicy]]
    """Scripted policies by name ("oracle"/"expert", "noisy", "random", ...), each built as `cls(seed)`."""
    MAX_STEPS: int
    """The step limit: the most steps an episode of `make_env(split)` (default keyword arguments) takes before it
    is truncated. A dream episode of the family is truncated after as many steps, so dreamt and real episodes have
    the same horizon; a run may lower it (`step_limit`)."""
    admissible_from_state: Callable[[str], list[str]]
    """`admissible_from_state(state: str) -> list[str]`: the actions an abstract state offers."""
    parse_goal: Callable[[str], dict[str, Any] | None]
    """`parse_goal(instruction: str) -> dict | None`: the structured goal, or None when not well-formed (the
    curriculum validates generated task variants with it)."""
    explain: Callable[[Transition], str]
    """`explain(transition: Transition) -> str`: the environment-grounded reasoning trace of a transition."""
    hooks: FamilyHooks = field(default_factory=FamilyHooks)
    """The optional hooks: the family's own where it defines them (`hooks.defined`), the defaults elsewhere."""
    EXPERT_POLICY: str | None = None
    """The role "expert": the name in `POLICIES` of the scripted policy whose episodes are SFT demonstrations
    (`dreamgym train --algo sft` without `data=`). None: the policy named "expert", else the one named "oracle",
    else the family has no expert (SFT then needs `data=` or `demo_policies=`); see `expert_policy`."""
    EXPLORE_POLICIES: Mapping[str, float] | None = None
    """The role "explore": the scripted policies, with their weights, whose mixed-quality episodes are DPO's
    demonstrations (`dreamgym train --algo dpo` without `data=`). None: every policy in `POLICIES` but the expert
    (and its aliases), with equal weights; see `explore_mix`."""

    def __post_init__(self) -> None:
        if not isinstance(self.hooks, FamilyHooks):
            raise TypeError(f"environment family {self.name!r}: hooks must be a FamilyHooks, got "
                            f"{type(self.hooks).__name__} (FamilyHooks.of builds one from functions)")
        if isinstance(self.MAX_STEPS, bool) or not isinstance(self.MAX_STEPS, int) or self.MAX_STEPS < 1:
            raise ValueError(f"environment family {self.name!r}: MAX_STEPS must be an int >= 1, "
                             f"got {self.MAX_STEPS!r}")
        if self.EXPERT_POLICY is not None and self.EXPERT_POLICY not in self.POLICIES:
            raise ValueError(f"environment family {self.name!r}: EXPERT_POLICY {self.EXPERT_POLICY!r} is not in "
                             f"POLICIES ({', '.join(self.POLICIES)})")
        if self.EXPLORE_POLICIES is not None:
            unknown = [p for p in self.EXPLORE_POLICIES if p not in self.POLICIES]
            if unknown or not self.EXPLORE_POLICIES or not all(
                    isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0
                    for w in self.EXPLORE_POLICIES.values()):
                raise ValueError(f"environment family {self.name!r}: EXPLORE_POLICIES must map names in POLICIES "
                                 f"({', '.join(self.POLICIES)}) to weights > 0, got {dict(self.EXPLORE_POLICIES)!r}")

    def step_limit(self, max_episode_steps: int | None = None) -> int:
        """The most steps an episode of this family takes in a run whose `rollout.max_episode_steps` is
        `max_episode_steps`: that, or `MAX_STEPS` when it is None or higher (the environments, real and dreamt,
        truncate their episodes at `MAX_STEPS`). The one place a run's step limit is resolved: the rollouts, the
        dream's and the real-step budget's planning all read it."""
        return self.MAX_STEPS if max_episode_steps is None else min(max_episode_steps, self.MAX_STEPS)

    def expert_policy(self) -> str | None:
        """The name of the expert scripted policy (`EXPERT_POLICY`, or by its default rule), None when the family
        has none."""
        if self.EXPERT_POLICY is not None:
            return self.EXPERT_POLICY
        return next((p for p in ("expert", "oracle") if p in self.POLICIES), None)

    def explore_mix(self) -> dict[str, float]:
        """The exploring scripted policies and their weights (`EXPLORE_POLICIES`, or by its default rule); empty
        when the family has no policy but its expert."""
        if self.EXPLORE_POLICIES is not None:
            return {p: float(w) for p, w in self.EXPLORE_POLICIES.items()}
        expert = self.expert_policy()
        expert_cls = self.POLICIES[expert] if expert is not None else None
        others = [p for p, cls in self.POLICIES.items() if cls is not expert_cls]
        return {p: 1.0 / len(others) for p in others}

    @classmethod
    def from_module(cls, name: str, module: types.ModuleType) -> EnvFamily:
        """The family a module defines with its module-level names (the required members, and functions named
        like an optional hook); raises TypeError naming what it lacks."""
        members = [f for f in dataclasses.fields(cls) if f.name not in ("name", "hooks")]
        required = [f.name for f in members
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        optional = [f.name for f in members if f.name not in required]
        names = vars(module)
        missing = [f for f in required if f not in names]
        if missing:
            raise TypeError(f"environment family {name!r} ({module.__name__}) lacks {', '.join(missing)}")
        hooks = {h: names[h] for h in OPTIONAL_HOOKS if names.get(h) is not None}
        return cls(name=name, hooks=FamilyHooks.of(hooks, name), **{f: names[f] for f in required},
                   **{f: names[f] for f in optional if f in names})

    def __repr__(self) -> str:
        return f"EnvFamily({self.name!r}, hooks={sorted(self.hooks.defined)})"
