"""The rollout engine: many multi-turn episodes at once, token-in/token-out, with failures isolated.

Owns: `run_rollouts` (batched policy generation across all live episodes each turn; real environments stepped
in a thread pool with per-step and per-episode timeouts; environments that declare `batched_step` stepped
with one `step_batch` call per turn) and `run_shared` (the same split over the processes of a distributed run).
It fills the `dreamgym.episode` records (what was sampled, exactly: prompt ids, generated ids and their sampling
log-probabilities) and takes every real step from the run's `RealStepBudget`.
Must not know: any concrete environment (it gets a `TextEnv` factory), trainers, optimisers, the loss.

Decisions (documented here because trainers and evaluation depend on them):
- The policy sees the environment's abstract state (`info["abstract_state"]`), the same text for real and
  synthetic environments, so a policy trained in one transfers to the other.
- Each turn's prompt is rebuilt by `dreamgym.agent.build_messages` from the task, the last H (state, action)
  turns and the current state; if it exceeds `max_prompt_tokens` the oldest history turns are dropped, and
  if even the bare prompt is too long the episode ends with reason "prompt_too_long".
- A reply without a parseable action (`parse_action` is None): with `on_invalid_action="end"` (default) the
  turn is kept with reward 0 and the episode ends with reason "invalid_action" — the paper's "invalid action
  leads to a failure state with reward 0", and the policy is trained away from it. With "pass" the raw reply
  text goes to the environment, which answers with its invalid-action notice. Either way it is counted.
- With `ground_actions` > 0 a parsed action that the environment does not list is replaced by the most similar
  admissible action (`dreamgym.agent.ground_action`) when the similarity reaches that threshold. The turn keeps
  the generated tokens (they are what is trained on) and the written action (`Turn.generated_action`); the
  episode counts how often it happened.
- An environment that raises (in reset or step), exceeds `step_timeout_s` on one step (a batched step of n
  environments gets n times that), or whose reset and steps add up to more than `episode_timeout_s`, ends its
  episode with that reason and the error text; the rest of the batch continues.
  Such episodes are not the policy's doing: `Episode.trainable` is False and trainers skip them. A timed-out
  environment is abandoned (its thread cannot be killed; it is never used again).
- Environments are constructed in the calling thread (constructors are cheap; a failing one ends its episode
  with "reset_error"). When any of them declares `thread_safe = False` the pool has one worker: their steps
  run one at a time and a step's timeout measures the step, not the wait behind the other instances.
- An episode ends after `max_episode_steps` turns (reason "max_turns") when its environment has not ended it
  first; without one, the environment's own step limit ends it (the run loop gives the limit it resolved,
  `EnvFamily.step_limit`).
- Every step of an environment without `is_synthetic = True` takes one unit from the run's `RealStepBudget`
  (`dreamgym.rl.budget`) before it runs; when none is left the episode ends with reason "budget" (not trainable),
  so the cap is never exceeded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from dreamgym.agent import ACTION_STOP, AgentConfig, build_messages, ground_action, parse_action
from dreamgym.rl.budget import RealStepBudget
from dreamgym.env import TextEnv
from dreamgym.episode import Episode, RolloutConfig, Turn
from dreamgym.llm.base import ChatRequest, Completion, SamplingParams
from dreamgym.utils.seeds import ROLLOUT_BASIS, mix_seed, row_seed
from dreamgym.types import Task


class PolicyBackend(Protocol):
    """What the rollout engine needs from a policy backend (dreamgym.llm.hf.HFBackend provides it)."""

    def prompt_ids(self, request: ChatRequest) -> list[int]: ...

    def generate_from_ids(self, prompts: list[list[int]], params: SamplingParams, *,
                          seeds: Sequence[int] | None = None) -> list[Completion]: ...


# ------------------------------------------------------------------------------------------------ helpers
def _call_all(pool: ThreadPoolExecutor, fns: list[Callable[[], Any]],
              timeouts: Sequence[float]) -> list[tuple[str, Any, float]]:
    """Run `fns` in the pool; call i gets `timeouts[i]` seconds from the moment it starts running (time queued
    behind other work does not count). Returns per call (status, value, seconds it ran): ("ok", value, s),
    ("error", exception, s) or ("timeout", None, s)."""
    starts: list[float | None] = [None] * len(fns)
    ends: list[float | None] = [None] * len(fns)

    def run(i: int) -> Any:
        starts[i] = time.monotonic()
        try:
            return fns[i]()
        finally:
            ends[i] = time.monotonic()

    futs: dict[Future, int] = {pool.submit(run, i): i for i in range(len(fns))}
    out: list[tuple[str, Any, float]] = [("timeout", None, 0.0)] * len(fns)
    pending = set(futs)
    while pending:
        deadlines = [began + timeouts[i] for i in (futs[f] for f in pending) if (began := starts[i]) is not None]
        now = time.monotonic()
        wait_s = max(0.0, min(deadlines) - now) + 1e-3 if deadlines else 0.05
        done, pending = wait(pending, timeout=wait_s, return_when=FIRST_COMPLETED)
        for f in done:
            i = futs[f]
            ran = (ends[i] or time.monotonic()) - (starts[i] or time.monotonic())
            exc = f.exception()
            out[i] = ("error", exc, ran) if exc is not None else ("ok", f.result(), ran)
        now = time.monotonic()
        expired = {f: began for f in pending
                   if (began := starts[futs[f]]) is not None and now - began > timeouts[futs[f]]}
        for f, began in expired.items():  # the thread is abandoned
            out[futs[f]] = ("timeout", None, now - began)
        pending -= set(expired)
    return out


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


@dataclass
class _Slot:
    """Runtime state of one episode (the environment and what the policy needs next turn)."""

    ep: Episode
    env: TextEnv | None = None
    state: str = ""
    admissible: list[str] | None = None
    abandoned: bool = False

    @property
    def live_env(self) -> TextEnv:
        """`env` of a slot still running: a constructor that failed closed its slot, so a live one has its env."""
        assert self.env is not None, "a live slot has an environment"
        return self.env


# ------------------------------------------------------------------------------------------------ the engine
def run_rollouts(backend: PolicyBackend, env_factory: Callable[[], TextEnv], tasks: Sequence[Task], *,
                 group_size: int = 1, seed: int = 0, config: RolloutConfig | None = None,
                 budget: RealStepBudget | None = None, agent: AgentConfig | None = None,
                 policy_version: str = "", stats: dict[str, float] | None = None,
                 task_seeds: Sequence[int] | None = None, first_task: int = 0,
                 share_rows: Callable[[int], tuple[int, int]] | None = None) -> list[Episode]:
    """Play `group_size` episodes of every task (members of a group share the environment seed) and return
    them in order (task-major). Never raises for environment or parse failures; see the module docstring.

    `seed` fixes the environment seeds (`reset(seed=mix_seed(seed, task_index, basis=ROLLOUT_BASIS))`, or
    `task_seeds[task_index]` when given) and the sampling seed of each turn, so the same seed, policy and
    environments give the same episodes. `first_task` is the index of `tasks[0]` in a larger list split between
    processes: task indices
    (environment seeds, group ids) are then those of the whole list, and `share_rows` (every process calls it
    once per turn with the number of prompts it generates) returns (the position of this process's first prompt
    among all processes' prompts of the turn, their total): each prompt is sampled with the seed of its position in
    the whole turn, and the loop runs until no process has one, so N processes sample what one process would.
    `stats`, when given, is filled with timing and token counts (gen_time_s, env_time_s, gen_tokens, prompt_tokens,
    generate_calls, real_steps, synthetic_steps).
    """
    cfg = config or RolloutConfig()
    agent = agent or AgentConfig()
    st = stats if stats is not None else {}
    for k in ("gen_time_s", "env_time_s", "gen_tokens", "prompt_tokens", "generate_calls", "real_steps",
              "synthetic_steps"):
        st.setdefault(k, 0.0)
    slots: list[_Slot] = []
    for ti, task in enumerate(tasks, start=first_task):
        env_seed = (int(task_seeds[ti - first_task]) if task_seeds is not None
                    else mix_seed(seed, ti, basis=ROLLOUT_BASIS))
        for m in range(group_size):
            slots.append(_Slot(Episode(task=task, seed=env_seed, group=ti, member=m, policy_version=policy_version)))
    if not slots:
        # A process with no task of its own still answers every turn's count until no process has a prompt.
        while share_rows is not None and share_rows(0)[1] > 0:
            pass
        return []

    pool: ThreadPoolExecutor | None = None
    try:  # from the first constructor on, the finally below closes whatever environments exist
        for s in slots:
            s.ep._start = time.monotonic()
            try:
                s.env = env_factory()
            except Exception as e:  # noqa: BLE001 - a broken environment ends its episode, not the batch
                _close(s, "reset_error", _err(e))
        workers = min(cfg.env_workers, len(slots))
        if any(not getattr(s.env, "thread_safe", True) for s in slots if s.env is not None):
            workers = 1
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dreamgym-env")
        _reset_all(pool, slots, cfg, st)
        turn = 0
        while True:
            live = [s for s in slots if not s.ep.done]
            if not live and share_rows is None:
                break
            for s in live:
                if s.ep.env_time_s > cfg.episode_timeout_s:
                    _close(s, "episode_timeout", f"its environment took more than {cfg.episode_timeout_s}s")
                elif cfg.max_episode_steps is not None and len(s.ep.turns) >= cfg.max_episode_steps:
                    _close(s, "max_turns")  # the run's step limit, below the environment's own
            live = [s for s in slots if not s.ep.done]
            if not live and share_rows is None:
                break
            turn_seed = mix_seed(seed, 7919, turn, basis=ROLLOUT_BASIS)
            to_step = _policy_turn(backend, live, cfg, agent, turn_seed, st, share_rows)
            if to_step is None:  # no process has a prompt left
                break
            _env_turn(pool, to_step, cfg, budget, st)
            turn += 1
    finally:
        for s in slots:
            if not s.ep.done:  # only reachable if the backend raised: record it, then let the error propagate
                _close(s, "generation_error", "the rollout was interrupted")
            if s.env is not None and not s.abandoned:
                try:
                    s.env.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    return [s.ep for s in slots]


def run_shared(backend: PolicyBackend, env_factory: Callable[[], TextEnv], tasks: Sequence[Task], *,
               budget: RealStepBudget | None = None, stats: dict[str, float] | None = None,
               task_seeds: Sequence[int] | None = None, **kw: Any) -> list[Episode]:
    """`run_rollouts` over `tasks` split between the processes of a `torch.distributed` group (one process: exactly
    `run_rollouts`). Each plays a contiguous share of the tasks (whole groups) within its share of `budget`,
    sampling each prompt with the seed of its position in the whole turn; every process then holds all the
    episodes in the order one process would have them, `stats` summed over processes and `budget` charged with
    every process's real steps. A sharded (FSDP) policy is gathered for the whole rollout: ranks generate different
    numbers of tokens."""
    from dreamgym.utils import distributed, fsdp

    with fsdp.gathered(getattr(backend, "model", None)):
        if not distributed.active():
            return run_rollouts(backend, env_factory, tasks, budget=budget, stats=stats, task_seeds=task_seeds, **kw)
        start, end = distributed.my_range(len(tasks))
        remaining = budget.remaining if budget is not None else None
        lo, hi = distributed.my_range(remaining) if remaining is not None else (0, 0)
        share = RealStepBudget(None if remaining is None else hi - lo)  # counts this process's real steps
        st: dict[str, float] = {}
        mine = run_rollouts(backend, env_factory, tasks[start:end], budget=share, stats=st,
                            task_seeds=None if task_seeds is None else task_seeds[start:end], first_task=start,
                            share_rows=distributed.share_rows, **kw)
    keys = sorted(st)
    *totals, used = distributed.sum_floats([st[k] for k in keys] + [share.used])
    if stats is not None:
        stats.update(zip(keys, totals))
    if budget is not None:
        budget.charge(int(used))
    return [e for part in distributed.gather(mine) for e in part]


def _close(s: _Slot, reason: str, error: str | None = None) -> None:
    if not s.ep.done:
        s.ep.end_reason = reason
        s.ep.error = error
        s.ep.wall_time_s = time.monotonic() - s.ep._start


def _reset_all(pool: ThreadPoolExecutor, slots: list[_Slot], cfg: RolloutConfig, st: dict[str, float]) -> None:
    def reset(s: _Slot) -> Callable[[], Any]:
        return lambda: s.live_env.reset(seed=s.ep.seed, options={"task": s.ep.task})

    t0 = time.monotonic()
    ready = [s for s in slots if not s.ep.done]  # constructed without error
    for s in ready:
        s.ep._start = t0
    results = _call_all(pool, [reset(s) for s in ready], [cfg.step_timeout_s] * len(ready))
    st["env_time_s"] += time.monotonic() - t0
    for s, (status, value, ran) in zip(ready, results):
        s.ep.env_time_s += ran
        if status == "ok":
            obs, info = value
            s.ep.source = "synthetic" if getattr(s.env, "is_synthetic", False) else "real"
            s.ep.initial_observation = obs
            s.state = s.ep.initial_state = str(info.get("abstract_state", obs))
            s.admissible = info.get("admissible_actions")
        elif status == "timeout":
            s.abandoned = True
            _close(s, "step_timeout", f"reset took longer than {cfg.step_timeout_s}s")
        else:
            _close(s, "reset_error", _err(value))


def _fit_prompt(backend: PolicyBackend, s: _Slot, cfg: RolloutConfig,
                agent: AgentConfig) -> tuple[list[int], int] | None:
    """Prompt ids for this turn, dropping the oldest history turns until it fits; None when nothing fits."""
    history = s.ep.history
    for h in range(min(agent.history, len(history)), -1, -1):
        a = dataclasses.replace(agent, history=h)
        ids = backend.prompt_ids(build_messages(s.ep.task, history, s.state, s.admissible, a))
        if len(ids) <= cfg.max_prompt_tokens:
            return ids, h
    return None


def _policy_turn(backend: PolicyBackend, live: list[_Slot], cfg: RolloutConfig, agent: AgentConfig,
                 turn_seed: int, st: dict[str, float],
                 share_rows: Callable[[int], tuple[int, int]] | None = None) -> list[tuple[_Slot, str]] | None:
    """Generate one reply for every live episode in a single batched call; return (slot, action) to step, or None
    when `share_rows` says no process has a prompt this turn."""
    prompts, owners, shown = [], [], []
    for s in live:
        fit = _fit_prompt(backend, s, cfg, agent)
        if fit is None:
            _close(s, "prompt_too_long", f"the prompt exceeds {cfg.max_prompt_tokens} tokens even without history")
            continue
        prompts.append(fit[0])
        shown.append(fit[1])
        owners.append(s)
    seeds = None
    if share_rows is not None:
        offset, total = share_rows(len(prompts))
        if total == 0:
            return None
        seeds = [row_seed(turn_seed, offset + i) for i in range(len(prompts))]
    if not prompts:
        return []
    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens,
                            stop=[ACTION_STOP], seed=turn_seed)
    t0 = time.monotonic()
    # Without shared rows the call stays the seam's plain form (row i seeded row_seed(turn_seed, i)).
    completions = backend.generate_from_ids(prompts, params) if seeds is None else \
        backend.generate_from_ids(prompts, params, seeds=seeds)
    st["gen_time_s"] += time.monotonic() - t0
    st["generate_calls"] += 1
    to_step: list[tuple[_Slot, str]] = []
    for s, ids, h, c in zip(owners, prompts, shown, completions):
        st["gen_tokens"] += len(c.token_ids)
        st["prompt_tokens"] += len(ids)
        action = written = parse_action(c.text)
        if action is not None and cfg.ground_actions > 0 and s.admissible:
            action = ground_action(action, s.admissible, cfg.ground_actions)
        t = Turn(state=s.state, prompt_ids=list(ids), completion_ids=list(c.token_ids), logprobs=list(c.logprobs),
                 text=c.text, action=action, finish_reason=c.finish_reason, history_shown=h,
                 admissible_actions=list(s.admissible) if s.admissible is not None else None,
                 generated_action=written if action != written else None)
        s.ep.turns.append(t)
        s.ep.grounded_actions += action != written
        if c.finish_reason == "error":
            _close(s, "generation_error", c.text or "the backend reported an error")
        elif action is None:
            s.ep.invalid_actions += 1
            if cfg.on_invalid_action == "end":
                _close(s, "invalid_action")
            else:
                to_step.append((s, c.text.strip()))
        else:
            to_step.append((s, action))
    return to_step


def _record(s: _Slot, out: tuple[str, float, bool, bool, dict[str, Any]]) -> None:
    obs, reward, terminated, truncated, info = out
    t = s.ep.turns[-1]
    t.stepped = True
    t.observation, t.reward, t.terminated, t.truncated = obs, float(reward), bool(terminated), bool(truncated)
    t.next_state = str(info.get("abstract_state", obs))
    s.state, s.admissible = t.next_state, info.get("admissible_actions")
    s.ep.noop_steps += bool(info.get("invalid_action"))
    s.ep.model_claimed_wins += bool(info.get("model_won"))
    if terminated or truncated:
        s.ep.won = bool(info.get("won", False))
        _close(s, "terminated" if terminated else "truncated")


def _env_turn(pool: ThreadPoolExecutor, to_step: list[tuple[_Slot, str]], cfg: RolloutConfig,
              budget: RealStepBudget | None, st: dict[str, float]) -> None:
    """Step every environment that got an action: batched classes with one `step_batch` call, the rest in the
    thread pool. Real steps are taken from the budget first."""
    ready: list[tuple[_Slot, str]] = []
    for s, action in to_step:
        if s.ep.source == "real":
            if budget is not None and not budget.take():
                s.ep.turns[-1].reward = 0.0
                _close(s, "budget", f"real-step budget of {budget.limit} used up")
                continue
            st["real_steps"] += 1
        else:
            st["synthetic_steps"] += 1
        ready.append((s, action))
    if not ready:
        return
    t0 = time.monotonic()
    batched: dict[type[TextEnv], list[tuple[_Slot, str]]] = {}
    single: list[tuple[_Slot, str]] = []
    for s, a in ready:
        cls = type(s.live_env)
        (batched.setdefault(cls, []) if getattr(cls, "batched_step", False) else single).append((s, a))

    calls: list[Callable[[], Any]] = [_stepper(s, a) for s, a in single]
    groups = list(batched.items())
    calls += [_batch_stepper(cls, g) for cls, g in groups]
    # A batched call makes len(g) steps at once, so it gets len(g) steps' time (a dream batch of 128 episodes on
    # a CPU takes minutes, and one step's timeout would end every episode in it); each episode is charged its share.
    timeouts = [cfg.step_timeout_s] * len(single) + [cfg.step_timeout_s * len(g) for _, g in groups]
    results = _call_all(pool, calls, timeouts)

    for (s, _), (status, value, ran) in zip(single, results[: len(single)]):
        s.ep.env_time_s += ran
        _settle(s, status, value, cfg)
    retry: list[tuple[_Slot, str]] = []
    for (_cls, g), (status, value, ran) in zip(groups, results[len(single):]):
        for s, _ in g:
            s.ep.env_time_s += ran / len(g)
        if status == "ok":
            for (s, _), out in zip(g, value):
                _record(s, out)
        elif status == "timeout":
            for s, _ in g:
                _settle(s, "timeout", None, cfg)
        else:
            retry += g  # one bad episode must not sink the batch: step each alone to find it
    if retry:
        alone = [_stepper(s, a) for s, a in retry]
        for (s, _), (status, value, ran) in zip(retry, _call_all(pool, alone, [cfg.step_timeout_s] * len(retry))):
            s.ep.env_time_s += ran
            _settle(s, status, value, cfg)
    st["env_time_s"] += time.monotonic() - t0


def _stepper(s: _Slot, action: str) -> Callable[[], Any]:
    return lambda: s.live_env.step(action)


def _batch_stepper(cls: type[TextEnv], g: list[tuple[_Slot, str]]) -> Callable[[], Any]:
    return lambda: cls.step_batch([s.live_env for s, _ in g], [a for _, a in g])


def _settle(s: _Slot, status: str, value: Any, cfg: RolloutConfig) -> None:
    if status == "ok":
        _record(s, value)
    elif status == "timeout":
        s.abandoned = True
        _close(s, "step_timeout", f"a step took longer than {cfg.step_timeout_s}s")
    else:
        _close(s, "env_error", _err(value))


# ------------------------------------------------------------------------------------------------ metrics
