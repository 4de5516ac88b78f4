"""Task pools: which train tasks a run draws from, and the draw of one iteration's tasks.

Owns: `task_pool` (all train tasks, those with real data in the replay buffer, those a trajectory file played, or
those a dream left undecided: the real phase of sim-to-real), `iteration_tasks` and `draw_tasks` (the seeded draw
real iterations and the curriculum share), `stratified_tasks` (the draw spread evenly over the values of a goal
field: `task_strata`), `informative_task_ids` and the name of the dream's curriculum log they
read (`VARIANCE_LOG`).
Must not know: torch, trainers, the run loop, the experience model, concrete environments.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dreamgym.config import ConfigError
from dreamgym.data import DataError, iter_jsonl_records
from dreamgym.types import Task
from dreamgym.utils.seeds import mix_seed

if TYPE_CHECKING:
    from dreamgym.replay.buffer import ReplayBuffer

VARIANCE_LOG = "curriculum.jsonl"
"""A dream run's curriculum log (in its run folder): per iteration its stats, new tasks and each task's reward
variance. `task_pool` reads it to aim real RL at the tasks a dream left undecided."""

def informative_task_ids(log_path: str | Path) -> list[str]:
    """The tasks whose latest group in a curriculum log (`<dream run>/curriculum.jsonl`) had mixed outcomes
    (V_τ > 0), in the order they were first logged. A task's latest group is the one the most trained policy
    played, so a task it has since learned (or given up on) drops out. Used to point a small real budget (S2R) at
    the tasks GRPO can learn from: a group whose rewards are all equal has zero advantage and trains nothing."""
    latest: dict[str, float] = {}
    # A torn last line is a write a kill interrupted (the writer cuts it off when the run resumes).
    for lineno, rec in iter_jsonl_records(log_path, skip_torn_tail=True):
        try:
            for row in rec.get("variance", []):
                latest[str(row["task_id"])] = float(row["variance"])
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise DataError(log_path, lineno, f"not a curriculum log row ({type(e).__name__}: {e}); expected "
                            '{"variance": [{"task_id": ..., "variance": ...}, ...]}') from e
    return [tid for tid, v in latest.items() if v > 0]


def draw_tasks(rng: random.Random, pool: Sequence[Task], n: int) -> list[Task]:
    """n tasks from `pool`: without replacement, with it only when the pool holds fewer than n.

    Real GRPO iterations and the dream's curriculum share this rule. With replacement, 16 draws from 64 goals hold
    ~14.3 distinct ones (~10 of 16 from 16), so a dream run saw fewer distinct goals per iteration than its real
    twin on the same fixed set (docs/log/24-webshop-fixed64.md)."""
    return rng.sample(list(pool), n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]



def task_pool(tasks: Sequence[Task], source: str | Path, *, name: str, env: str,
              buffer: ReplayBuffer | None = None, fall_back_below: int = 0) -> list[Task]:
    """The tasks of `tasks` (in their order) a run draws from, by `source`:

    - "" or "all": all of them;
    - "data", with `buffer`: those with real transitions in the replay buffer (`dream.task_pool=data`);
    - a dream run's folder: those whose latest dream group had mixed outcomes (its `curriculum.jsonl`, none
      without one). A group whose rewards are all equal has zero GRPO advantage, so a small real budget spent on
      it trains nothing (docs/decisions.md, "S2R has one route");
    - a trajectory file: those its episodes played (a fixed set real and dream RL can share).

    Fewer than `fall_back_below` kept: all of `tasks`, so S2R never narrows to a handful by accident. Otherwise none
    kept is a `ConfigError` naming `name`, the config field `source` came from."""
    from dreamgym.data import tasks_played_in

    if str(source) in ("", "all"):
        return list(tasks)
    src = Path(source)
    if buffer is not None and str(source) == "data":
        played = {tr.task.id for tr in buffer.transitions(env=env, real_only=True)}
        kept, n_there, what = [t for t in tasks if t.id in played], len(played), "have real data in the replay buffer"
    elif src.is_dir():
        log = src / VARIANCE_LOG
        wanted = set(informative_task_ids(log)) if log.is_file() else set()
        kept, n_there, what = [t for t in tasks if t.id in wanted], len(wanted), f"had mixed dream outcomes in {src}"
    else:
        (kept, n_there), what = tasks_played_in(tasks, src), f"were played in {src}"
    if fall_back_below and len(kept) < fall_back_below:
        print(f"{name}: {len(kept)} train tasks {what} (< {fall_back_below} per iteration); drawing from all "
              f"{len(tasks)}")
        return list(tasks)
    if not kept:
        raise ConfigError(name, f"none of the {len(tasks)} {env} train tasks {what} ({n_there} tasks there)")
    print(f"{name}: {len(kept)} of {len(tasks)} train tasks {what}")
    return kept


def iteration_tasks(pool: Sequence[Task], n: int, seed: int, iteration: int, strata: str = "") -> list[Task]:
    """The tasks of one iteration: a seeded sample without replacement (with it when the pool is smaller), or with
    `strata` (a goal field) `stratified_tasks`."""
    if strata:
        return stratified_tasks(pool, n, seed, iteration, strata)
    return draw_tasks(random.Random(mix_seed(seed, iteration, 11)), pool, n)


def task_stratum(task: Task, key: str) -> str:
    """The value of goal field `key` of `task` (its stratum); a ConfigError naming `task_strata` and the task when it
    has none, wherever the draw meets it."""
    if key not in task.goal:
        raise ConfigError("task_strata", f"task {task.id} has no goal field {key!r} (its fields: "
                          f"{', '.join(sorted(task.goal))})", "a goal field every train task has, or empty")
    return str(task.goal[key])


def check_strata(pool: Sequence[Task], key: str) -> None:
    """Start-up check: every task of `pool` has goal field `key` (`task_stratum`'s ConfigError otherwise)."""
    for t in pool:
        task_stratum(t, key)


def stratified_tasks(pool: Sequence[Task], n: int, seed: int, iteration: int, key: str) -> list[Task]:
    """Iteration `iteration`'s n tasks, spread evenly over the strata (values of goal field `key`) across the run:
    the strata are dealt in rounds, each round a seeded permutation of them, iteration i taking positions
    [i*n, (i+1)*n) of that sequence, so every stratum is drawn once before any is drawn twice, within an iteration
    and across iterations. A stratum's k-th draw is the k-th task of a seeded permutation of its tasks (reshuffled
    each pass through them). Stateless: the same (pool, n, seed, iteration) gives the same tasks, which a resumed
    run needs.

    Why: a uniform draw of 8 of MiniWoB++'s 300 train tasks over 4 iterations left 2 of its 15 families undrawn, and
    the policy lost exactly such families on the test pages (docs/results/miniwob.md)."""
    strata: dict[str, list[Task]] = {}
    for t in pool:
        strata.setdefault(task_stratum(t, key), []).append(t)
    names = sorted(strata)
    picked = []
    for pos in range(iteration * n, (iteration + 1) * n):
        rnd, j = divmod(pos, len(names))
        order = random.Random(mix_seed(seed, rnd, 13)).sample(names, len(names))
        tasks = strata[order[j]]
        cycle, k = divmod(rnd, len(tasks))
        # The stratum's own stream: seeded by its name, so adding a stratum does not reshuffle the others.
        perm = random.Random(mix_seed(seed, cycle, zlib.crc32(order[j].encode()), 17)).sample(tasks, len(tasks))
        picked.append(perm[k])
    return picked
