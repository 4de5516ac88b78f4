"""`check_family`: validate an environment family against its contract (`dreamgym.envs.family`) on real play.

Owns: the rules a family must keep, checked in order, `CheckFamilyError` naming the first one broken, the
behaviour checks of the family's members and hooks against real episodes (`FamilyCheckReport`: per check, the
cases checked and the disagreements with their reasons).
Must not know: any concrete family, models, torch, trainers, the command line (`dreamgym check-family` is
`dreamgym.commands.check_family`).

The checks run on real data: tasks from `tasks`, episodes of every scripted policy in an environment from
`make_env` (which must also pass `dreamgym.env.check_env`), and the abstract states and transitions of those
episodes for `admissible_from_state`, `explain` and each optional hook the family has. Types are rules (the first
broken one raises); behaviour is counted: each recorded real step (the checker's own episodes, a probe step per
task with an action no environment accepts, and any episodes the caller gives, e.g. a collected file) is
replayed through the family's members, and each answer that differs from what the real environment did is a
disagreement with its reason (`BEHAVIOUR_CHECKS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dreamgym.env import CheckEnvError, check_env
from dreamgym.envs.family import HOOK_PAIRS, EnvFamily, is_admissible, is_form
from dreamgym.envs.registry import family
from dreamgym.types import Step, Task, Trajectory, Transition

# The action every probe step takes: no environment carries it out, so its answer is what `noop_state` must give.
PROBE_ACTION = "xyzzy plugh"

BEHAVIOUR_CHECKS: dict[str, str] = {
    "admissible": "every action the real environment accepted is in admissible_from_state of its state (a form "
                  "such as search[<query>] admits any argument, as in the synthetic environment)",
    "offered": "every action admissible_from_state offers on a state of the checker's own episodes is one the real "
               "environment carries out there (tried on a replay of the episode to that state; forms such as "
               "search[<query>] are not tried)",
    "grounded_outcome": "grounded_outcome gives the reward and end the real environment gave",
    "noop_state": "noop_state gives the state the real environment showed after an action it could not carry out",
    "canonical_state": "canonical_state gives a real state back unchanged",
    "state_round_trip": "complete_state(model_state(next state), state) is the next state",
    "observation_round_trip": "state_after(state, model_observation(next state)) is the next state",
    "step_limit": "an episode ends within MAX_STEPS steps, and is truncated only at MAX_STEPS",
}
"""The behaviour checks, by name: what each requires of every recorded real step (or episode) it applies to."""

_EXAMPLES = 3  # reasons kept per check: enough to see the pattern, short enough to print

OFFERED_TRIES = 200
"""Offered actions `check_family` tries at most (each a reset, a replay to its state and one step): states are taken
breadth-first over the checker's own episodes (every episode's first state, then every second state, ...), so a
long episode does not use the budget up alone."""


class CheckFamilyError(AssertionError):
    """Raised by `check_family` with a message naming the family and the rule it broke; `report` holds the
    behaviour counts when behaviour checks failed (None when a rule broke before they ran)."""

    def __init__(self, message: str, report: FamilyCheckReport | None = None):
        super().__init__(message)
        self.report = report


@dataclass
class FamilyCheckReport:
    """What `check_family` replayed and how much of it disagreed with the real environment."""

    family: str
    episodes: int = 0
    """Real episodes replayed (the checker's own, the probes and the ones given)."""
    steps: int = 0
    """Real steps replayed."""
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BEHAVIOUR_CHECKS, 0))
    """Per check: the steps (episodes, for `step_limit`) it applied to."""
    disagreements: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BEHAVIOUR_CHECKS, 0))
    """Per check: how many of those disagreed with the real environment."""
    reasons: dict[str, list[str]] = field(default_factory=dict)
    """Per check: the first few disagreements, each with its reason."""

    @property
    def ok(self) -> bool:
        return not any(self.disagreements.values())

    def disagree(self, check: str, reason: str) -> None:
        self.disagreements[check] += 1
        kept = self.reasons.setdefault(check, [])
        if len(kept) < _EXAMPLES:
            kept.append(reason)

    def summary(self) -> str:
        """One line per check: disagreements / cases, then the reasons kept."""
        lines = [f"environment family {self.family!r}: {self.episodes} real episodes, {self.steps} steps replayed"]
        for check in BEHAVIOUR_CHECKS:
            n = self.checked[check]
            lines.append(f"  {check:<24} {self.disagreements[check]:>5} disagreements in {n:>5}"
                         + ("" if n else "  (nothing to check: hook not defined or no such step)"))
            lines += [f"      {r}" for r in self.reasons.get(check, [])]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "episodes": self.episodes, "steps": self.steps, "checked": self.checked,
                "disagreements": self.disagreements, "reasons": self.reasons}


def check_family(fam_or_name: EnvFamily | str, *, split: str = "train", splits: Sequence[str] = ("train", "test"),
                 task_kwargs: Mapping[str, Any] | None = None, env_kwargs: Mapping[str, Any] | None = None,
                 seed: int = 0, episodes_per_policy: int = 1, episodes: Sequence[Trajectory] = (),
                 step_limit: int | None = None) -> FamilyCheckReport:
    """Validate a family (or the registered family of that name); returns the behaviour report, and raises
    `CheckFamilyError` naming the first broken rule, or, when every rule holds but some behaviour disagrees with
    the real environment, with the report's counts (`CheckFamilyError.report`).

    Rules: the required members exist with the right kinds, the policy roles name policies; `tasks(s)` for each of
    `splits` (every family has "train" and "test") is a non-empty list of `Task` of this family; each distinct
    scripted policy plays `episodes_per_policy` episodes of `split` tasks (up to one step past the step limit) in
    an environment from `make_env(split)`, which then passes `check_env`; `admissible_from_state` of every state
    seen returns a list of str; `parse_goal` of each task played returns a dict or None; `explain` of every
    transition seen returns a str; each optional hook the family defines returns its documented type on those
    states and transitions (pairs of hooks come together); `corpus_text`, when defined, is a deterministic list of
    str.

    Behaviour (`BEHAVIOUR_CHECKS`, counted in the report): those episodes, a probe step (`PROBE_ACTION`) on each
    task played, and `episodes` (recorded real episodes of the family, e.g. `load_trajectories` of a collected
    file) are replayed step by step through `admissible_from_state` and the hooks, each answer compared with what
    the real environment did.

    `task_kwargs` and `env_kwargs` go to `tasks` and `make_env` (e.g. a small `n` for a family whose pool is
    costly to build); `step_limit` is the limit `make_env(**env_kwargs)` enforces when those change it (default:
    the family's `MAX_STEPS`); `splits` narrows the pools checked where a split is costly in full (ALFWorld's
    "test" is both valid splits, 274 planner-checked games on first use: `splits=("train", "valid_unseen")`
    checks the same code on `n` of them).
    """
    try:
        fam = family(fam_or_name) if isinstance(fam_or_name, str) else fam_or_name
    except (ValueError, TypeError, ImportError) as e:  # a module that is no family (a member lacking, a bad role)
        raise CheckFamilyError(f"environment family {fam_or_name!r} does not load: {e}") from e
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
    limit = fam.MAX_STEPS if step_limit is None else step_limit
    task_kwargs, env_kwargs = dict(task_kwargs or {}), dict(env_kwargs or {})
    pools: dict[str, list[Task]] = {}
    for s in (*splits, split):
        if s not in pools:
            pools[s] = call(f"tasks({s!r})", fam.tasks, s, **task_kwargs)
            need(isinstance(pools[s], list) and len(pools[s]) > 0, f"tasks({s!r}) must be a non-empty list")
            need(all(isinstance(t, Task) and t.env == fam.name for t in pools[s]),
                 f"tasks({s!r}) must hold dreamgym.types.Task objects whose env is {fam.name!r}")

    env = call(f"make_env({split!r})", fam.make_env, split, **env_kwargs)
    recorded: list[Trajectory] = []
    played: list[Task] = []
    pool = pools[split]
    policies = _distinct_policies(fam)
    for i, (pname, cls) in enumerate(policies):
        for k in range(episodes_per_policy):
            task = pool[(i + k * len(policies)) % len(pool)]
            played.append(task)
            policy = call(f"POLICIES[{pname!r}]({seed + k})", cls, seed + k)
            recorded.append(_play(env, policy, pname, task, seed + k, limit + 1, need, call))
    try:
        check_env(env, seed=seed, options={"task": pool[0]})
    except CheckEnvError as e:
        raise CheckFamilyError(f"{label}: make_env({split!r}) fails check_env: {e}") from e
    probes = [_probe(env, task, seed, call) for task in {t.id: t for t in played}.values()]

    for task in played:
        goal = call(f"parse_goal({task.instruction!r})", fam.parse_goal, task.instruction)
        need(goal is None or isinstance(goal, dict),
             f"parse_goal must return a dict or None, got {type(goal).__name__}")
    for traj in recorded:
        for tr in _transitions(traj):
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
        need(list(lines) == list(call("corpus_text", fam.hooks.corpus_text)),
             "corpus_text must be deterministic (two calls gave different text)")

    report = FamilyCheckReport(fam.name)
    for traj in (*recorded, *probes, *episodes):
        _replay(fam, traj, limit, report, call, probe=traj.policy == _PROBE_POLICY)
    _try_offered(fam, env, recorded, report, call)
    if not report.ok:
        raise CheckFamilyError(f"{label}: its hooks disagree with the real environment\n{report.summary()}", report)
    return report


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
    need(fam.EXPERT_POLICY is None or fam.EXPERT_POLICY in fam.POLICIES, "EXPERT_POLICY must name a policy in POLICIES")
    need(fam.EXPLORE_POLICIES is None or all(p in fam.POLICIES for p in fam.EXPLORE_POLICIES),
         "EXPLORE_POLICIES must name policies in POLICIES")
    for a, b in HOOK_PAIRS:
        need((a in fam.hooks.defined) == (b in fam.hooks.defined), f"hooks {a} and {b} come together or not at all")


def _distinct_policies(fam: EnvFamily) -> list[tuple[str, Any]]:
    """Each policy class once, under its first name: aliases ("oracle" and "expert") play the same episode."""
    seen: dict[int, tuple[str, Any]] = {}
    for name, cls in fam.POLICIES.items():
        seen.setdefault(id(cls), (name, cls))
    return list(seen.values())


def _play(env: Any, policy: Any, pname: str, task: Task, seed: int, max_steps: int,
          need: Callable[[bool, str], None], call: Callable[..., Any]) -> Trajectory:
    """An episode of `policy` on `task`, stopped after `max_steps` steps if the environment has not ended it."""
    obs, info = call(f"reset on task {task.id!r}", env.reset, seed=seed, options={"task": task})
    call(f"policy {pname!r} reset", policy.reset, task, obs, info)
    initial = state = info["abstract_state"]
    steps: list[Step] = []
    for _ in range(max_steps):
        action = call(f"policy {pname!r} act", policy.act, obs, info)
        need(isinstance(action, str), f"policy {pname!r} must act with a str, got {type(action).__name__}")
        obs, reward, term, trunc, info = call(f"step({action!r})", env.step, action)
        steps.append(_step(state, action, reward, term, trunc, info))
        state = info["abstract_state"]
        if term or trunc:
            break
    return Trajectory(task=task, steps=steps, seed=seed, policy=pname, initial_state=initial,
                      won=bool(info.get("won", False)))


_PROBE_POLICY = "check_family probe"


def _probe(env: Any, task: Task, seed: int, call: Callable[..., Any]) -> Trajectory:
    """One step of `PROBE_ACTION` from `task`'s first state: what the environment shows after an action it cannot
    carry out."""
    obs, info = call(f"reset on task {task.id!r}", env.reset, seed=seed, options={"task": task})
    state = info["abstract_state"]
    obs, reward, term, trunc, info = call(f"step({PROBE_ACTION!r})", env.step, PROBE_ACTION)
    return Trajectory(task=task, steps=[_step(state, PROBE_ACTION, reward, term, trunc, info)], seed=seed,
                      policy=_PROBE_POLICY, initial_state=state)


def _step(state: str, action: str, reward: Any, term: Any, trunc: Any, info: Mapping[str, Any]) -> Step:
    return Step(state=state, action=action, reward=float(reward), terminated=bool(term), truncated=bool(trunc),
                next_state=info["abstract_state"], info={"invalid_action": bool(info.get("invalid_action", False))})


def _transitions(traj: Trajectory) -> list[Transition]:
    history: list[tuple[str, str]] = []
    out = []
    for st in traj.steps:
        out.append(Transition(task=traj.task, history=list(history[-4:]), state=st.state, action=st.action,
                              next_state=st.next_state, reward=st.reward, done=st.terminated or st.truncated))
        history.append((st.state, st.action))
    return out


def _replay(fam: EnvFamily, traj: Trajectory, limit: int, report: FamilyCheckReport, call: Callable[..., Any], *,
            probe: bool) -> None:
    """Count `traj`'s steps against each behaviour check (`BEHAVIOUR_CHECKS`); a probe episode is checked for
    `noop_state` only (its action is no policy's, and its one step says nothing of the step limit)."""
    h, defined = fam.hooks, fam.hooks.defined
    where = f"{traj.policy or 'episode'} on {traj.task.id!r}"
    report.episodes += 1
    report.steps += len(traj.steps)

    def agree(check: str, ok: bool, reason: str) -> None:
        report.checked[check] += 1
        if not ok:
            report.disagree(check, f"{where}: {reason}")

    for t, st in enumerate(traj.steps):
        at = f"step {t + 1} {st.action!r}"
        rejected = bool(st.info.get("invalid_action", False))
        if rejected and "noop_state" in defined:
            got = call("noop_state", h.noop_state, st.state, st.action)
            if got is not None:
                agree("noop_state", got == st.next_state,
                      f"{at}: noop_state gives {_short(got)}, the environment showed {_short(st.next_state)}")
        if probe:
            continue
        if not rejected:
            adm = call("admissible_from_state", fam.admissible_from_state, st.state)
            agree("admissible", is_admissible(st.action, adm),
                  f"{at}: accepted by the environment, not in admissible_from_state ({_short(adm)})")
        if "grounded_outcome" in defined:
            got_outcome = call("grounded_outcome", h.grounded_outcome, traj.task, st.state, st.action, st.next_state,
                               traj.history(t))
            if got_outcome is not None:
                reward, terminated = got_outcome
                agree("grounded_outcome", math.isclose(reward, st.reward, abs_tol=1e-6) and terminated == st.terminated,
                      f"{at}: grounded_outcome gives reward {reward:g}, terminated {terminated}; the "
                              f"environment gave {st.reward:g}, {st.terminated}")
        if "canonical_state" in defined:
            for s in ((st.state,) if t == 0 else ()) + (st.next_state,):
                got = call("canonical_state", h.canonical_state, s)
                agree("canonical_state", got == s, f"{at}: canonical_state changes a real state to {_short(got)}")
        if "model_state" in defined:
            written = call("model_state", h.model_state, st.next_state)
            back = call("complete_state", h.complete_state, written, st.state)
            agree("state_round_trip", back == st.next_state,
                  f"{at}: complete_state(model_state(s')) gives {_short(back)}, not {_short(st.next_state)}")
        if "model_observation" in defined:
            written = call("model_observation", h.model_observation, st.next_state)
            back = call("state_after", h.state_after, st.state, written)
            agree("observation_round_trip", back == st.next_state,
                  f"{at}: state_after(s, model_observation(s')) gives {_short(back)}, "
                          f"not {_short(st.next_state)}")
    if probe or not traj.steps:
        return
    n, last = len(traj.steps), traj.steps[-1]
    if n > limit:
        agree("step_limit", False, f"{n} steps without the environment ending the episode, more than the "
                                           f"step limit MAX_STEPS ({limit})")
    elif last.truncated and not last.terminated:
        agree("step_limit", n == limit, f"truncated after {n} steps, not at the step limit MAX_STEPS ({limit})")
    else:
        agree("step_limit", True, "")


def _try_offered(fam: EnvFamily, env: Any, recorded: Sequence[Trajectory], report: FamilyCheckReport,
                 call: Callable[..., Any], tries: int = OFFERED_TRIES) -> None:
    """The `offered` check: the actions `admissible_from_state` offers on the states of the checker's own episodes,
    each stepped in the real environment from that state (reset with the episode's task and seed, its earlier actions
    replayed). The dream accepts every offered action, so one the environment refuses would be a step the dream
    plays and the real environment never does. A replay that does not reach the recorded state (an environment that
    is not deterministic under a seed) checks nothing there."""
    depth = max((len(t.steps) for t in recorded), default=0)
    for t in range(depth):
        for traj in recorded:
            if t >= len(traj.steps):
                continue
            st = traj.steps[t]
            offered = call("admissible_from_state", fam.admissible_from_state, st.state)
            for action in dict.fromkeys(offered):
                if tries <= 0:
                    return
                if is_form(action):
                    continue  # a form admits any argument: there is no one action to try
                tries -= 1
                state = _state_after(env, traj, t, call)
                if state != st.state:
                    continue
                _, _, _, _, info = call(f"step({action!r})", env.step, action)
                report.checked["offered"] += 1
                if info.get("invalid_action", False):
                    report.disagree("offered", f"{traj.policy} on {traj.task.id!r}: step {t + 1}: {action!r} is "
                                               f"offered by admissible_from_state, the environment refuses it")


def _state_after(env: Any, traj: Trajectory, t: int, call: Callable[..., Any]) -> Any:
    """The abstract state `env` shows after a reset on `traj`'s task and seed and its first `t` actions."""
    _, info = call(f"reset on task {traj.task.id!r}", env.reset, seed=traj.seed, options={"task": traj.task})
    for st in traj.steps[:t]:
        _, _, term, trunc, info = call(f"step({st.action!r})", env.step, st.action)
        if term or trunc:
            return None
    return info["abstract_state"]


def _short(x: Any, n: int = 120) -> str:
    text = repr(x)
    return text if len(text) <= n else text[: n - 3] + "..."


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
        got = call("grounded_outcome", h.grounded_outcome, task, s, a, nxt, [])  # the hook takes the history
        need(got is None or (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (int, float))
                             and not isinstance(got[0], bool) and isinstance(got[1], bool)),
             f"grounded_outcome must return (reward, terminated) or None, got {got!r}")

