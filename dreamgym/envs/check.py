"""`check_family`: validate an environment family against its contract (`dreamgym.envs.family`) on real play.

Owns: the rules a family must keep, checked in order, and `CheckFamilyError` naming the first one broken.
Must not know: any concrete family, models, torch, trainers.

The checks run on real data: tasks from `tasks`, episodes of every scripted policy in an environment from
`make_env` (which must also pass `dreamgym.env.check_env`), and the abstract states and transitions of those
episodes for `admissible_from_state`, `explain` and each optional hook the family has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dreamgym.env import CheckEnvError, check_env
from dreamgym.envs.family import HOOK_PAIRS, EnvFamily
from dreamgym.envs.registry import family
from dreamgym.types import Task, Transition


class CheckFamilyError(AssertionError):
    """Raised by `check_family` with a message naming the family and the rule it broke."""


def check_family(fam_or_name: EnvFamily | str, *, split: str = "train", splits: Sequence[str] = ("train", "test"),
                 task_kwargs: Mapping[str, Any] | None = None, env_kwargs: Mapping[str, Any] | None = None,
                 seed: int = 0, max_steps: int = 1000) -> None:
    """Validate a family (or the registered family of that name); raises `CheckFamilyError` naming the first
    broken rule.

    Checks: the required members exist with the right kinds; `tasks(s)` for each of `splits` (every family has
    "train" and "test") is a non-empty list of `Task` of this family; each distinct scripted policy plays an episode
    of a `split` task to its end (within `max_steps`, and within the family's step limit `MAX_STEPS`) in an
    environment from `make_env(split)`, which then passes `check_env`; `admissible_from_state` of every state seen
    returns a list of str; `parse_goal` of each task played returns a dict or None; `explain` of every transition
    seen returns a str; and each optional hook the family defines returns its documented type on those states and
    transitions (pairs of hooks come together).

    `task_kwargs` and `env_kwargs` go to `tasks` and `make_env` (e.g. a small `n` for a family whose pool is
    costly to build); `splits` narrows the pools checked where a split is costly in full (ALFWorld's "test" is
    both valid splits, 274 planner-checked games on first use: `splits=("train", "valid_unseen")` checks the same
    code on `n` of them).
    """
    fam = family(fam_or_name) if isinstance(fam_or_name, str) else fam_or_name
    if not isinstance(fam, EnvFamily):
        raise CheckFamilyError(f"expected an EnvFamily or a family name, got {type(fam).__name__}")
    label = f"environment family {fam.name!r}"

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise CheckFamilyError(f"{label}: {msg}")

    def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any exception breaks the rule; say which call raised it
            raise CheckFamilyError(f"{label}: {what} raised {type(e).__name__}: {e}") from e

    _check_surface(fam, need)
    task_kwargs, env_kwargs = dict(task_kwargs or {}), dict(env_kwargs or {})
    pools: dict[str, list[Task]] = {}
    for s in (*splits, split):
        if s not in pools:
            pools[s] = call(f"tasks({s!r})", fam.tasks, s, **task_kwargs)
            need(isinstance(pools[s], list) and len(pools[s]) > 0, f"tasks({s!r}) must be a non-empty list")
            need(all(isinstance(t, Task) and t.env == fam.name for t in pools[s]),
                 f"tasks({s!r}) must hold dreamgym.types.Task objects whose env is {fam.name!r}")

    env = call(f"make_env({split!r})", fam.make_env, split, **env_kwargs)
    transitions = []
    played = []
    for i, (pname, cls) in enumerate(_distinct_policies(fam)):
        task = pools[split][i % len(pools[split])]
        played.append(task)
        episode = _play(env, call(f"POLICIES[{pname!r}]({seed})", cls, seed), pname, task, max_steps, need, call)
        need(len(episode) <= fam.MAX_STEPS, f"policy {pname!r} played {len(episode)} steps of {task.id!r}, more than "
                                            f"the step limit MAX_STEPS ({fam.MAX_STEPS})")
        transitions += episode
    try:
        check_env(env, seed=seed, options={"task": pools[split][0]})
    except CheckEnvError as e:
        raise CheckFamilyError(f"{label}: make_env({split!r}) fails check_env: {e}") from e

    for task in played:
        goal = call(f"parse_goal({task.instruction!r})", fam.parse_goal, task.instruction)
        need(goal is None or isinstance(goal, dict),
             f"parse_goal must return a dict or None, got {type(goal).__name__}")
    for tr in transitions:
        adm = call("admissible_from_state", fam.admissible_from_state, tr.state)
        need(isinstance(adm, list) and all(isinstance(a, str) for a in adm),
             f"admissible_from_state must return a list of str, got {adm!r:.80}")
        text = call(f"explain of {tr.action!r}", fam.explain, tr)
        need(isinstance(text, str), f"explain must return a str, got {type(text).__name__}")
        _check_hooks(fam, tr, need, call)
    if "corpus_text" in fam.hooks.defined:
        lines = call("corpus_text", fam.hooks.corpus_text)
        need(isinstance(lines, (list, tuple)) and all(isinstance(t, str) for t in lines),
             "corpus_text must return a list of str")


def _check_surface(fam: EnvFamily, need: Callable[[bool, str], None]) -> None:
    need(isinstance(fam.name, str) and fam.name.isidentifier(), "name must be an identifier")
    members = {"make_env": fam.make_env, "tasks": fam.tasks, "admissible_from_state": fam.admissible_from_state,
               "parse_goal": fam.parse_goal, "explain": fam.explain}
    for member, value in members.items():
        need(callable(value), f"{member} must be callable")
    need(isinstance(fam.MAX_STEPS, int) and fam.MAX_STEPS >= 1, "MAX_STEPS must be an int >= 1")
    need(isinstance(fam.POLICIES, Mapping) and len(fam.POLICIES) > 0, "POLICIES must be a non-empty mapping")
    need(all(isinstance(k, str) and callable(v) for k, v in fam.POLICIES.items()),
         "POLICIES must map names (str) to policy classes")
    for a, b in HOOK_PAIRS:
        need((a in fam.hooks.defined) == (b in fam.hooks.defined), f"hooks {a} and {b} come together or not at all")


def _distinct_policies(fam: EnvFamily) -> list[tuple[str, Any]]:
    """Each policy class once, under its first name: aliases ("oracle" and "expert") play the same episode."""
    seen: dict[int, tuple[str, Any]] = {}
    for name, cls in fam.POLICIES.items():
        seen.setdefault(id(cls), (name, cls))
    return list(seen.values())


def _play(env: Any, policy: Any, pname: str, task: Task, max_steps: int, need: Callable[[bool, str], None],
          call: Callable[..., Any]) -> list[Transition]:
    obs, info = call(f"reset on task {task.id!r}", env.reset, options={"task": task})
    call(f"policy {pname!r} reset", policy.reset, task, obs, info)
    history: list[tuple[str, str]] = []
    out = []
    for _ in range(max_steps):
        action = call(f"policy {pname!r} act", policy.act, obs, info)
        need(isinstance(action, str), f"policy {pname!r} must act with a str, got {type(action).__name__}")
        state = info["abstract_state"]
        obs, reward, term, trunc, info = call(f"step({action!r})", env.step, action)
        out.append(Transition(task=task, history=list(history[-4:]), state=state, action=action,
                              next_state=info["abstract_state"], reward=reward, done=term or trunc))
        history.append((state, action))
        if term or trunc:
            break
    else:
        need(False, f"policy {pname!r} did not end an episode of {task.id!r} within {max_steps} steps")
    return out


def _check_hooks(fam: EnvFamily, tr: Transition, need: Callable[[bool, str], None], call: Callable[..., Any]) -> None:
    """Each optional hook the family defines, on a real transition: the type its contract (`FamilyHooks`)
    promises."""
    h, defined = fam.hooks, fam.hooks.defined
    s, a, nxt, task = tr.state, tr.action, tr.next_state, tr.task
    str_results: dict[str, Any] = {}
    if "canonical_state" in defined:
        str_results["canonical_state"] = call("canonical_state", h.canonical_state, s)
    if "model_state" in defined:
        written = str_results["model_state"] = call("model_state", h.model_state, nxt)
        if isinstance(written, str):
            str_results["complete_state"] = call("complete_state", h.complete_state, written, s)
    if "model_observation" in defined:
        written = str_results["model_observation"] = call("model_observation", h.model_observation, nxt)
        if isinstance(written, str):
            str_results["state_after"] = call("state_after", h.state_after, s, written)
    if "noop_state" in defined:
        str_results["noop_state"] = call("noop_state", h.noop_state, s, a)
    if "outcome_contradiction" in defined:
        str_results["outcome_contradiction"] = call("outcome_contradiction", h.outcome_contradiction, task, s, a, nxt)
    for hook, got in str_results.items():
        need(isinstance(got, str), f"{hook} must return a str, got {type(got).__name__}")
    for hook, fn in (("hidden_outcome_key", h.hidden_outcome_key), ("determined_outcome", h.determined_outcome)):
        if hook in defined:
            got = call(hook, fn, task, s, a)
            need(got is None or isinstance(got, str), f"{hook} must return a str or None, got {type(got).__name__}")
    if "grounded_outcome" in defined:
        got = call("grounded_outcome", h.grounded_outcome, task, s, a, nxt)
        need(got is None or (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (int, float))
                             and not isinstance(got[0], bool) and isinstance(got[1], bool)),
             f"grounded_outcome must return (reward, terminated) or None, got {got!r}")
