"""Offline real trajectories: play an environment family's scripted policies and write them to the store.

Owns: playing one episode into a `Trajectory` (`run_episode`), the policy mix and task/seed schedule of a
collection (`collect`), its summary, and the `dreamgym collect` command with its start-up check of `--env-kw`
(`check_env_kwargs`: the names the family's environment takes).
Must not know: any concrete environment (it only uses the family surface of `dreamgym.envs`), models,
torch, trainers.

A collection is reproducible: episode i gets a seed derived from (seed, i), a task from the split's pool
(shuffled once with `seed`, then taken in turn so every task is covered evenly) and a policy from the
mix (exact counts by largest remainder, shuffled with `seed`). Trajectory ids are
`<env>-<split>-s<seed>-<i>`, which is what `resume` uses to skip episodes already written.

Failures are isolated: an exception in the environment or the policy ends that episode, which is then
not written (the data file only holds complete episodes); the failure is counted per policy and its
reason recorded in the summary (`<out>.summary.json`), and the collection goes on.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
import sys
import time
import traceback
import typing
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dreamgym
from dreamgym.checks import env_family, family_choices, parse_mix
from dreamgym.config import CommandParser, at_least, fail
from dreamgym.data import JsonlWriter, iter_jsonl_records, read_jsonl, read_parquet, write_jsonl, write_parquet
from dreamgym.envs import FamilyImportError, family
from dreamgym.utils.filecheck import output_path
from dreamgym.utils.paths import atomic_write_text
from dreamgym.types import Step, Task, Trajectory, _jsonable

# Keys of `info` that are not copied into Step.info: the task is on the trajectory, the abstract state
# is Step.state/next_state, the raw observation can be large (HTML), and admissible actions follow from
# the abstract state through the family's `admissible_from_state`.
_INFO_SKIP = frozenset({"task", "abstract_state", "raw_obs", "admissible_actions", "episode_over"})
_INFO_MAX_CHARS = 2000


class EpisodeFailed(RuntimeError):
    """An episode could not be completed; `stage` is "reset", "policy", "env" or "limit"."""

    def __init__(self, stage: str, reason: str, steps_done: int):
        self.stage, self.reason, self.steps_done = stage, reason, steps_done
        super().__init__(f"{stage}: {reason} (after {steps_done} steps)")


def info_subset(info: dict[str, Any]) -> dict[str, Any]:
    """The part of an env's `info` worth storing with a step: small JSON-able values such as `won` and
    reward components; see `_INFO_SKIP` for what is left out and why."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if k in _INFO_SKIP:
            continue
        v = _jsonable(v)
        if len(json.dumps(v, ensure_ascii=False)) <= _INFO_MAX_CHARS:
            out[k] = v
    return out


def _reason(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{type(e).__name__}: {e}{where}"


def run_episode(env: Any, policy: Any, seed: int, task: Task | None = None, policy_name: str = "",
                max_steps: int = 1000, policy_version: str = "", traj_id: str = "") -> Trajectory:
    """Play one episode of `policy` in `env` and return it as a real `Trajectory`.

    Each step records the abstract state before and after, the action, reward, end flags and a small
    `info` subset. Raises `EpisodeFailed` when the env or the policy raises, or when the episode does not
    end within `max_steps` (a safety net: environments enforce their own limits).
    """
    start = time.time()
    t0 = time.perf_counter()
    try:
        obs, info = env.reset(seed=seed, options={"task": task} if task is not None else None)
    except Exception as e:  # noqa: BLE001 - isolate any env failure to this episode
        raise EpisodeFailed("reset", _reason(e), 0) from e
    task = info["task"]
    try:
        policy.reset(task, obs, info)
    except Exception as e:  # noqa: BLE001
        raise EpisodeFailed("policy", _reason(e), 0) from e
    initial_state = state = info["abstract_state"]
    steps: list[Step] = []
    won = False
    while True:
        if len(steps) >= max_steps:
            raise EpisodeFailed("limit", f"episode did not end within {max_steps} steps", len(steps))
        try:
            action = policy.act(obs, info)
        except Exception as e:  # noqa: BLE001
            raise EpisodeFailed("policy", _reason(e), len(steps)) from e
        if not isinstance(action, str):
            raise EpisodeFailed("policy", f"act() returned {type(action).__name__}, not str", len(steps))
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as e:  # noqa: BLE001
            raise EpisodeFailed("env", _reason(e), len(steps)) from e
        next_state = info["abstract_state"]
        steps.append(Step(state=state, action=action, reward=float(reward), terminated=bool(terminated),
                          truncated=bool(truncated), next_state=next_state, info=info_subset(info)))
        state = next_state
        won = bool(info.get("won", False))
        if terminated or truncated:
            break
    return Trajectory(task=task, steps=steps, source="real", seed=seed, policy=policy_name,
                      policy_version=policy_version, initial_state=initial_state, won=won,
                      start_time=start, wall_time_s=time.perf_counter() - t0, id=traj_id)


# ------------------------------------------------------------------------------------------- schedule

def policy_counts(mix: dict[str, float], episodes: int) -> dict[str, int]:
    """Exact episode counts per policy (largest remainder, ties broken by name order)."""
    total = sum(mix.values())
    quotas = {k: episodes * w / total for k, w in mix.items()}
    counts = {k: int(math.floor(q)) for k, q in quotas.items()}
    left = episodes - sum(counts.values())
    for k in sorted(quotas, key=lambda k: (-(quotas[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


def episode_seed(seed: int, i: int) -> int:
    # String seeding of random.Random is deterministic (sha512), unlike hash(); neighbouring collection
    # seeds therefore give unrelated episode seeds instead of shifted copies.
    return random.Random(f"dreamgym-collect:{seed}:{i}").randrange(2**31)


@dataclass
class EpisodeSpec:
    index: int
    env: str
    split: str
    env_kwargs: dict[str, Any]
    policy: str
    seed: int
    task: Task
    traj_id: str
    max_steps: int


def schedule(env_name: str, mix: dict[str, float], episodes: int, split: str, seed: int,
             env_kwargs: dict[str, Any] | None = None, max_steps: int = 1000,
             episodes_per_task: int = 1) -> list[EpisodeSpec]:
    """The episodes to play, in order: tasks in a seeded random order that plays the family's task kinds in turn
    (`task_kind`: one instance of every kind before a second of any), each played `episodes_per_task` times in a
    row (each time with its own episode seed and policy draw, so the plays differ where the policy or the
    environment is random)."""
    if episodes_per_task < 1:
        raise ValueError("episodes_per_task must be >= 1")
    fam = family(env_name)
    unknown = [p for p in mix if p not in fam.POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)} for env {env_name!r}; "
                         f"known: {', '.join(sorted(fam.POLICIES))}")
    tasks = list(fam.tasks(split))
    if not tasks:
        raise ValueError(f"env {env_name!r} has no tasks in split {split!r}")
    rng = random.Random(seed)
    rng.shuffle(tasks)
    # Kinds in turn: the first instance of every kind (in the shuffled order), then the second of each, ... so the
    # first k episodes meet min(k, kinds) kinds. A stable sort on the occurrence rank draws no random numbers, so a
    # family whose every task is its own kind (the default) keeps the shuffled order, and the policy draw below is
    # the same either way.
    kind_of = fam.hooks.task_kind
    seen: Counter[str] = Counter()
    rank = []
    for t in tasks:
        k = kind_of(t)
        rank.append(seen[k])
        seen[k] += 1
    tasks = [t for _, t in sorted(zip(rank, tasks), key=lambda rt: rt[0])]
    names = [p for p, n in policy_counts(mix, episodes).items() for _ in range(n)]
    rng.shuffle(names)
    return [EpisodeSpec(i, env_name, split, dict(env_kwargs or {}), names[i], episode_seed(seed, i),
                        tasks[(i // episodes_per_task) % len(tasks)], f"{env_name}-{split}-s{seed}-{i:06d}",
                        max_steps)
            for i in range(episodes)]


# ------------------------------------------------------------------------------------------- playing

_ENV_CACHE: dict[str, Any] = {}


def _play(spec: EpisodeSpec) -> tuple[EpisodeSpec, Trajectory | None, str | None]:
    """Play one scheduled episode (in this process or a worker); returns (spec, trajectory, failure)."""
    fam = family(spec.env)
    key = json.dumps([spec.env, spec.split, spec.env_kwargs], sort_keys=True, default=str)
    try:
        if key not in _ENV_CACHE:
            _ENV_CACHE[key] = fam.make_env(split=spec.split, **spec.env_kwargs)
        env = _ENV_CACHE[key]
        cls = fam.POLICIES[spec.policy]
        policy = cls(spec.seed)
    except Exception as e:  # noqa: BLE001 - an env that cannot be built fails this episode, not the run
        return spec, None, f"setup: {_reason(e)}"
    version = f"scripted:{cls.__module__}.{cls.__qualname__}@dreamgym-{dreamgym.__version__}"
    try:
        traj = run_episode(env, policy, spec.seed, task=spec.task, policy_name=spec.policy,
                           max_steps=spec.max_steps, policy_version=version, traj_id=spec.traj_id)
    except EpisodeFailed as e:
        if e.stage in ("reset", "env"):
            _ENV_CACHE.pop(key, None)  # its state is unknown after an exception: use a fresh one
        return spec, None, str(e)
    return spec, traj, None


def _worker_start() -> None:
    """A collection worker's start: its environments are closed when it exits."""
    import atexit

    atexit.register(_close_envs)


def _close_envs() -> None:
    for env in _ENV_CACHE.values():
        try:
            env.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
    _ENV_CACHE.clear()


class _Tally:
    def __init__(self) -> None:
        self.episodes: Counter[str] = Counter()
        self.wins: Counter[str] = Counter()
        self.reward: defaultdict[str, float] = defaultdict(float)
        self.steps: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []

    def add(self, spec: EpisodeSpec, traj: Trajectory | None, failure: str | None) -> None:
        p = spec.policy
        if traj is None:
            self.failed[p] += 1
            self.failures.append({"episode": spec.index, "policy": p, "seed": spec.seed,
                                  "task": spec.task.id, "reason": failure})
            return
        self.episodes[p] += 1
        self.wins[p] += int(traj.won)
        self.reward[p] += traj.total_reward
        self.steps[p] += len(traj.steps)

    def summary(self) -> dict[str, Any]:
        per = {}
        for p in sorted(set(self.episodes) | set(self.failed)):
            n = self.episodes[p]
            per[p] = {"episodes": n, "failed": self.failed[p],
                      "success_rate": self.wins[p] / n if n else 0.0,
                      "mean_reward": self.reward[p] / n if n else 0.0,
                      "mean_steps": self.steps[p] / n if n else 0.0}
        n = sum(self.episodes.values())
        return {"episodes": n, "failed": sum(self.failed.values()),
                "success_rate": sum(self.wins.values()) / n if n else 0.0,
                "steps": sum(self.steps.values()), "per_policy": per, "failures": self.failures}


class ResumeRefused(ValueError):
    """`resume` found an output it cannot continue without losing or mixing data; the message names the file."""


def _episode_key(rec: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What the schedule fixes for an episode id: its episode seed, policy and task."""
    return rec.get("seed"), rec.get("policy"), (rec.get("task") or {}).get("id")


def _check_written_by(path: Path, keys: dict[str, tuple[Any, Any, Any]], specs: list[EpisodeSpec]) -> None:
    """Refuse when `path` holds an episode this collection would not have written: another seed, env or split (its
    id is not scheduled) or another mix, episode count or episodes_per_task (same id, other seed, policy or task).
    Resuming would append a second collection to it, and the summary and any Parquet would describe neither."""
    planned = {s.traj_id: (s.seed, s.policy, s.task.id) for s in specs}
    for traj_id, key in keys.items():
        if traj_id not in planned:
            raise ResumeRefused(f"{path} holds episode {traj_id!r}, which this collection does not schedule (another "
                                "--env, --split, --seed or --episodes?); resume with the settings that wrote it, or "
                                "choose another --out")
        if key != planned[traj_id]:
            raise ResumeRefused(f"{path} holds episode {traj_id!r} with (seed, policy, task) {key}, but this "
                                f"collection schedules {planned[traj_id]} (another --policy, --episodes or "
                                "--episodes-per-task?); resume with the settings that wrote it, or choose another "
                                "--out")


def resume_ids(out: Path, jsonl: Path, specs: list[EpisodeSpec]) -> set[str]:
    """Ids of the episodes already in the output of a collection being resumed, after making the JSONL stream hold
    all of them. Never drops an episode it did not read: a Parquet output whose JSONL stream is gone (deleted, or
    the Parquet copied alone) has its episodes written back to the stream, because the Parquet file is rebuilt
    from the stream at the end; an output that cannot be read, or that another collection wrote, raises
    `ResumeRefused` naming the file. A torn last JSONL line (a killed run) is not an episode: it is played again."""
    streamed: dict[str, tuple[Any, Any, Any]] = {}
    if jsonl.exists():
        try:
            streamed = {str(rec.get("id", "")): _episode_key(rec)
                        for _, rec in iter_jsonl_records(jsonl, skip_torn_tail=True)}
        except ValueError as e:
            raise ResumeRefused(f"cannot resume: {e}; fix or move {jsonl}") from e
        _check_written_by(jsonl, streamed, specs)
    if out == jsonl or not out.exists():
        return set(streamed)
    try:
        kept = list(read_parquet(out))
    except ValueError as e:
        raise ResumeRefused(f"cannot resume: {e}; the collection would overwrite {out}, so fix or move it") from e
    keys = {t.id: (t.seed, t.policy, t.task.id) for t in kept}
    _check_written_by(out, keys, specs)
    if not jsonl.exists():
        write_jsonl(jsonl, kept)
        return set(keys)
    lost = [i for i in keys if i not in streamed]
    if lost:
        raise ResumeRefused(f"{out} holds {len(lost)} episodes that {jsonl} lacks (e.g. {lost[0]!r}); the Parquet "
                            f"file is rebuilt from {jsonl}, so resuming would drop them: remove {jsonl} to resume from "
                            f"{out}, or move {out} away")
    return set(streamed)


def collect(env_name: str, mix: dict[str, float], episodes: int, out_path: str | Path, split: str = "train",
            seed: int = 0, workers: int = 1, env_kwargs: dict[str, Any] | None = None, resume: bool = False,
            overwrite: bool = False, progress: bool = True, max_steps: int = 1000,
            episodes_per_task: int = 1) -> dict[str, Any]:
    """Collect `episodes` trajectories of the policy `mix` in `env_name` and write them to `out_path`.

    Episodes stream into a JSONL file as they finish (one fsynced record each), so a killed collection
    keeps everything finished and `resume=True` completes it. When `out_path` ends in `.parquet`, the
    stream goes to the sibling `.jsonl` and the Parquet file is written atomically at the end. An existing
    output is an error unless `resume` (skip episodes already written, see `resume_ids`: it keeps every episode it
    finds and refuses an output it cannot read or that other settings wrote) or `overwrite`. Returns the summary,
    which is also written to `<out>.summary.json`.

    `episodes_per_task` > 1 plays each task several times. A retrieval-conditioned experience model needs this
    to learn to copy a task's own real outcomes: training excludes a transition's own trajectory from its
    examples, so with one play per task the model never sees an example from the same task and never learns
    that such an example (which the dream does retrieve) is the one to copy.
    """
    if episodes < 0:
        raise ValueError("episodes must be >= 0")
    out = Path(out_path)
    jsonl = out.with_suffix(".jsonl") if out.suffix == ".parquet" else out
    specs = schedule(env_name, mix, episodes, split, seed, env_kwargs, max_steps, episodes_per_task)
    if jsonl.exists() or out.exists():
        if overwrite:
            for f in {jsonl, out}:
                f.unlink(missing_ok=True)
        elif not resume:
            raise FileExistsError(f"{out} exists; pass resume (skip episodes already written) or overwrite")
    done = resume_ids(out, jsonl, specs) if resume else set()
    todo = [s for s in specs if s.traj_id not in done]
    tally = _Tally()
    t0 = time.perf_counter()
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    columns = [TextColumn("[bold]collect {task.fields[env]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("success {task.fields[success]}"), TextColumn("failed {task.fields[failed]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with JsonlWriter(jsonl) as writer, Progress(*columns, console=console, disable=not progress) as bar:
        job = bar.add_task("collect", total=len(todo), env=env_name, success="-", failed=0)
        pool = None
        results: Iterator[tuple[EpisodeSpec, Trajectory | None, str | None]]
        try:
            if workers > 1 and len(todo) > 1:
                import multiprocessing as mp

                # spawn: workers start clean (no copied locks or threads from the progress bar).
                pool = mp.get_context("spawn").Pool(workers, initializer=_worker_start)
                results = pool.imap(_play, todo, chunksize=max(1, min(16, len(todo) // (workers * 8))))
            else:
                results = map(_play, todo)
            for spec, traj, failure in results:  # in schedule order, so files are reproducible
                if traj is not None:
                    writer.write(traj)
                tally.add(spec, traj, failure)
                s = tally.summary()
                bar.update(job, advance=1, success=f"{s['success_rate']:.0%}", failed=s["failed"])
            if pool is not None:
                # Workers that exit on their own close their environments (their browsers and Playwright drivers)
                # at exit; a terminated one leaves its driver writing to a closed pipe (a Node EPIPE trace per
                # worker after a successful run).
                pool.close()
                pool.join()
                pool = None
        finally:
            if pool is not None:  # interrupted or failed: stop the workers now
                pool.terminate()
                pool.join()
            _close_envs()
    summary = tally.summary()
    summary.update(env=env_name, split=split, seed=seed, mix=mix, requested=episodes,
                   episodes_per_task=episodes_per_task,
                   skipped_existing=len(specs) - len(todo), out=str(out), jsonl=str(jsonl),
                   wall_time_s=time.perf_counter() - t0)
    if out.suffix == ".parquet":
        summary["parquet_trajectories"] = write_parquet(out, read_jsonl(jsonl))
    atomic_write_text(str(out) + ".summary.json", json.dumps(summary, indent=2))
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"collect {summary['env']} ({summary['split']}) -> {summary['out']}")
    for col in ("policy", "episodes", "success", "mean reward", "mean steps", "failed"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for p, s in summary["per_policy"].items():
        table.add_row(p, str(s["episodes"]), f"{s['success_rate']:.1%}", f"{s['mean_reward']:.3f}",
                      f"{s['mean_steps']:.1f}", str(s["failed"]))
    table.add_row("all", str(summary["episodes"]), f"{summary['success_rate']:.1%}", "", "",
                  str(summary["failed"]), style="bold")
    console = Console()
    console.print(table)
    rate = summary["episodes"] / summary["wall_time_s"] if summary["wall_time_s"] > 0 else 0.0
    console.print(f"{summary['steps']} steps, {summary['wall_time_s']:.1f} s ({rate:.1f} episodes/s); "
                  f"{summary['skipped_existing']} already present; summary in {summary['out']}.summary.json")
    for f in summary["failures"][:5]:
        console.print(f"[red]failed[/red] episode {f['episode']} ({f['policy']}, task {f['task']}): {f['reason']}")


def _kv(text: str) -> tuple[str, Any]:
    import yaml

    k, sep, v = text.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return k, yaml.safe_load(v)


def _family(name: str) -> str:
    """`--env`: a registered family (an installed package's included) that loads, else the option's one-line usage
    error (a family whose package fails at import, lacks a member or shares its name with another says so here,
    before any work)."""
    try:
        env_family(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (allowed: {family_choices()})") from None
    try:
        family(name)
    except FamilyImportError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def check_env_kwargs(name: str, kwargs: Mapping[str, Any]) -> None:
    """Keyword arguments for family `name`'s `make_env(split, **kwargs)`: each names a parameter of `make_env` or,
    when `make_env` passes keywords on, of the environment class it returns (its return annotation), and its value
    fits that parameter's annotation where the annotation resolves (`_check_value`). So a typo in a name, or a value
    of the wrong type, is refused before anything runs, not by every episode's set-up."""
    make_env = family(name).make_env
    accepted, open_ended = _keywords(make_env)
    if open_ended:
        try:
            env_class = typing.get_type_hints(make_env).get("return")
        except (NameError, TypeError):  # an annotation that does not resolve: the names cannot be known here
            env_class = None
        more, open_ended = _keywords(env_class) if isinstance(env_class, type) else ({}, True)
        accepted = {**more, **accepted}
    _check_keywords(name, "environment", kwargs, accepted, open_ended)


def check_task_kwargs(name: str, kwargs: Mapping[str, Any]) -> None:
    """Keyword arguments for family `name`'s `tasks(split, **kwargs)`: each names a parameter of `tasks` and its
    value fits that parameter's annotation where it resolves, so a typo is refused as bad input before anything
    runs (not reported as the family's failure)."""
    accepted, open_ended = _keywords(family(name).tasks)
    _check_keywords(name, "tasks", kwargs, accepted, open_ended)


def _check_keywords(name: str, what: str, kwargs: Mapping[str, Any], accepted: dict[str, Any],
                    open_ended: bool) -> None:
    """`kwargs` against the keywords `accepted` by family `name`'s `what` (its environment or its tasks): an unknown
    name is refused unless the callee takes any keyword (`open_ended`), and each known one's value must fit its
    annotation. `split` is the command's own --split, never a keyword here."""
    accepted = {k: v for k, v in accepted.items() if k != "split"}
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown and not open_ended:
        raise ValueError(f"{', '.join(map(repr, unknown))}: not a keyword of the {name} {what} (allowed: "
                         f"{', '.join(sorted(accepted)) or 'none'})")
    for key, value in kwargs.items():
        if key in accepted:
            _check_value(name, key, value, accepted[key])


def _keywords(fn: Any) -> tuple[dict[str, Any], bool]:
    """The names `fn` takes as keywords, each with its resolved annotation (None: none, or it does not resolve),
    and whether it also takes any other (`**kwargs`)."""
    try:
        try:
            signature, resolved = inspect.signature(fn, eval_str=True), True
        except (NameError, TypeError, SyntaxError):  # e.g. a name imported only for type checkers
            signature, resolved = inspect.signature(fn), False
    except (TypeError, ValueError):
        return {}, True
    params = signature.parameters.values()
    names = {p.name: p.annotation if resolved and p.annotation is not p.empty else None for p in params
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _check_value(env: str, key: str, value: Any, annotation: Any) -> None:
    """Refuse a `--env-kw` value that does not fit its parameter's annotation as pydantic's lax mode reads it
    (`max_steps=ten` for an int). Lax, because a value that works must never be refused: YAML has no tuple or path,
    and an environment given a list for a tuple or a string for a path takes it. The environment receives the value
    as given. An annotation pydantic cannot check (one it has no schema for) leaves the value to the environment."""
    import pydantic

    if annotation is None:
        return
    try:
        adapter = pydantic.TypeAdapter(annotation, config=pydantic.ConfigDict(arbitrary_types_allowed=True))
    except (pydantic.PydanticUserError, NameError, TypeError):
        return
    try:
        adapter.validate_python(value)
    except pydantic.ValidationError as e:
        shown = annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
        reason = e.errors()[0]["msg"]
        raise ValueError(f"{key}={value!r}: not a value of the {env} environment's {key} ({shown}): {reason}") \
            from None


def main(argv: list[str] | None = None) -> int:
    ap = CommandParser(prog="dreamgym collect", description=(
        "Write offline real trajectories of scripted policies (with provenance) to a JSONL or Parquet file."))
    ap.add_argument("--env", required=True, type=_family, help=f"environment family: {family_choices()}")
    ap.add_argument("--policy", default="oracle:0.5,noisy:0.3,random:0.2",
                    help="policy mix as name:weight,... (default: %(default)s)")
    ap.add_argument("--episodes", type=at_least(1), required=True, help="number of episodes")
    ap.add_argument("--out", required=True, help="output file (.jsonl, or .parquet with a .jsonl beside it)")
    ap.add_argument("--split", default="train", help="task split (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="collection seed (default: %(default)s)")
    ap.add_argument("--workers", type=at_least(1), default=1, help="worker processes (default: %(default)s)")
    ap.add_argument("--max-steps", type=at_least(1), default=1000, help="safety cap on steps per episode")
    ap.add_argument("--episodes-per-task", type=at_least(1), default=1,
                    help="plays of each task, in a row, each with its own seed (default: %(default)s)")
    ap.add_argument("--env-kw", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                    help="keyword argument for the family's make_env (YAML value), repeatable")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="keep an existing output, add missing episodes")
    g.add_argument("--overwrite", action="store_true", help="replace an existing output")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--max-failed-share", type=_share, default=MAX_FAILED_SHARE,
                    help="exit 1 when more than this share of the episodes failed (the environment or policy refused "
                         "them; those played are written either way; default: %(default)s)")
    args = ap.parse_args(argv)
    if args.no_progress:
        from dreamgym.utils.quiet import quiet_progress_bars

        quiet_progress_bars()  # other libraries' bars too
    if Path(args.out).suffix not in (".jsonl", ".parquet"):
        # The trajectory readers know these two; anything else would be written and then be unreadable.
        ap.error(f"--out: {args.out!r} must end in .jsonl or .parquet")
    try:
        # Before anything runs or is written: a keyword the environment does not take would fail every episode, an
        # output that is a folder (or under a file) would fail after the first one.
        check_env_kwargs(args.env, dict(args.env_kw))
        out = Path(args.out)
        for path in dict.fromkeys([out, out.with_suffix(".jsonl"), Path(f"{out}.summary.json")]):
            output_path(path, "file")
        mix = parse_mix(args.policy)
        summary = collect(args.env, mix, args.episodes, args.out, split=args.split, seed=args.seed,
                          workers=args.workers, env_kwargs=dict(args.env_kw), resume=args.resume,
                          overwrite=args.overwrite, progress=not args.no_progress, max_steps=args.max_steps,
                          episodes_per_task=args.episodes_per_task)
    except (ValueError, FileExistsError) as e:
        return fail("collect", e)
    print_summary(summary)
    verdict = failed_verdict(summary, args.max_failed_share)
    if verdict:  # last, where it is seen
        print(f"dreamgym collect: {verdict}", file=sys.stderr)
        return 1
    return 0


MAX_FAILED_SHARE = 0.1
"""`dreamgym collect --max-failed-share`'s default: a collection that lost more than a tenth of its episodes (a
browser that keeps dying, a policy without a rule for a task asked for) is a different data set from the one
asked for; one that lost a few to a flaky page is not."""


def _share(text: str) -> float:
    """A share in [0, 1] (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def failed_verdict(summary: dict[str, Any], max_share: float) -> str | None:
    """One line when the collection failed more than `max_share` of its episodes (every one, when none played),
    naming the count, the share and the threshold; None otherwise. A 4-of-10 collection used to exit 0."""
    failed, played = summary["failed"], summary["episodes"]
    total = failed + played
    if not failed or (played and failed / total <= max_share):
        return None
    return (f"{failed} of {total} episodes failed ({failed / total:.0%}), over --max-failed-share {max_share}; the "
            f"{played} played are written, the reasons are above")


if __name__ == "__main__":
    sys.exit(main())
