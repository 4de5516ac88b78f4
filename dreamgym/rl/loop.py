"""The run loop: every online training iteration of every run (real RL, RL inside the experience model, both in
turn) goes through `run_phases`, over a list of phases.

Owns: `World` (what a phase plays in: an iteration's tasks, its environments, what happens after an iteration,
its state beside a checkpoint, and whether it ended its phase early: `PhaseEnd`), `RealWorld` (the real environment:
train tasks drawn from a pool, as many as the real-step budget can finish; it never ends its phase), `Phase` (a
world and a number of iterations), `RunState` (iterations done, the real-step budget and the iterations phases
ended early left unplayed: what every checkpoint keeps of the run), `LoopSettings` (the run's `TrainerConfig`, read
there, and the loop's periods), the policy snapshots a world may ask back (`<run_dir>/policy-snapshots/it-<n>`) and
`run_phases`, the loop.
Must not know: trainers' internals (an `OnlineTrainer` only updates and saves), the experience model (the dream is a
`World` like any other: `dreamgym.dream.world.DreamWorld`), concrete environments.

A run is a list of phases (`dreamgym.rl.modes`: real, dream, sim-to-real).

One iteration, top to bottom:
  1. tasks: the world's draw for this iteration; a real world draws only as many as the budget can finish
     (`RealStepBudget.affordable`, each episode planned at the run's step limit, `EnvFamily.step_limit` of
     `rollout.max_episode_steps`), and when not one fits the run ends;
  2. rollouts: `group_size` episodes of each task in the world's environments, seeded by (seed, iteration), each
     ended at that same step limit; the rollout engine takes every real step from the run's budget and never
     exceeds it;
  3. `trainer.update(episodes)`: the algorithm's update;
     an update that made no optimiser step (every group's rewards equal, say) is reported with a warning;
  4. `world.after_iteration`: what the world does with the episodes and the update's figures (the dream: buffer,
     episode log, curriculum, its report and audit);
  5. log: one metrics row, the rollouts and the loop's counts and timings under `rollout/`, the update's figures
     under `losses/`, and the world's own figures under its name (`dream/`) in a second row of the same step
     (`dreamgym.utils.metric_names`);
  6. save every `save_every` and evaluate every `eval_every` iterations of the phase; a real phase that spent the
     budget ends the run.

A world may end its phase early (`World.phase_end`, a typed verdict: the dream's audit guard,
`dreamgym.dream.guard`): after step 4 the loop asks it, and on a verdict restores the policy the world names, logs
`<world>/<by>/stopped_at` and `<world>/<by>/rolled_back_to` with the world's reason, and goes to the next phase,
which begins where this one stopped (`RunState.cut`). For that the loop keeps, for a world that asks
(`World.keeps_policies` > 0, with `run_dir` set), the latest policies as trainer checkpoints in
`<run_dir>/policy-snapshots/it-<n>` (the policy after n iterations: the starting one at the phase's start, then one
after each iteration), deleting those the world can no longer ask back.

Iterations are numbered over the whole run (S2R's real phase continues the dream's count, a resumed run its
checkpoint's), so task draws and rollout seeds depend only on the iteration; save and evaluation periods count
from the phase's start.

State: `RunState` (the iterations done and the real-step budget) is all the loop keeps of a run; every checkpoint
holds it beside the trainer's own state (`trainer.save(directory, state.state_dict())`), and each world keeps its
own beside the checkpoint (`world.save`). A run resumed from a checkpoint continues from its iteration with the
budget it had left, and plays what the uninterrupted run would have played.

Where this differs from the paper (docs/concepts.md: "The run loop, phases and worlds", "Sim-to-real",
"Real-step accounting"): the paper's loop has no phases; S2R is its dream loop followed by real RL, which is what
two phases of one run are, and its real phase plays the train tasks the dream left with mixed outcomes. The
real-step budget is a hard cap the rollout engine enforces, a real iteration plays only the tasks whose groups it
can finish, and evaluations on held-out tasks are measurement, never charged to it.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dreamgym.utils import distributed
from dreamgym.rl.budget import RealStepBudget
from dreamgym.env import TextEnv
from dreamgym.episode import Episode, rollout_metrics
from dreamgym.envs.family import EnvFamily
from dreamgym.curriculum.pools import iteration_tasks
from dreamgym.rl.builders import OnlineTrainer, PeriodicEvaluation
from dreamgym.utils.metric_names import LOSSES, ROLLOUT, namespaced
from dreamgym.utils.metrics import MetricsLogger
from dreamgym.utils.paths import crash_point
from dreamgym.rl.rollout import run_shared
from dreamgym.trainers.common import TrainerConfig, mix_seed
from dreamgym.trainers.online import UpdateResult
from dreamgym.types import Task


class World(Protocol):
    """Where a phase's episodes are played."""

    name: str
    """"real" or "dream": the progress label, and the prefix of the world's own metrics."""
    real: bool
    """Whether its environments' steps are real ones, paid from the run's real-step budget."""
    family: EnvFamily
    """The environment family it plays: its step limit is the episodes' (`EnvFamily.step_limit`)."""

    def start(self, iteration: int) -> None:
        """Its phase begins, or resumes, at `iteration`."""
        ...

    def tasks(self, iteration: int, n: int) -> list[Task]:
        """The `n` tasks of iteration `iteration`."""
        ...

    def envs(self, policy_version: str) -> Callable[[], TextEnv]:
        """The factory of this iteration's environments (`policy_version` names the policy playing in them)."""
        ...

    def after_iteration(self, iteration: int, episodes: Sequence[Episode], policy_version: str,
                        update: UpdateResult) -> dict[str, float]:
        """What the world does with the episodes once `iteration` iterations are done (`update`: what the trainer's
        update of them did); returns its own metrics."""
        ...

    def save(self, iteration: int) -> None:
        """Keep its state at `iteration`, beside the trainer's checkpoint (also at the end of its phase)."""
        ...

    @property
    def keeps_policies(self) -> int:
        """How many of the latest policies (snapshots) its `phase_end` may ask back; 0: none, and none is written."""
        ...

    def phase_end(self) -> PhaseEnd | None:
        """Asked after each iteration's `after_iteration` (and when its phase starts or resumes): its verdict that
        the phase ends, or None to go on."""
        ...


class PhaseEnd(Protocol):
    """A world's verdict: its phase ends after iteration `stopped_at`, and the policy goes back to the one that had
    made `restore` updates (it played iteration `restore` + 1; the phase's starting policy at the latest)."""

    @property
    def stopped_at(self) -> int: ...

    @property
    def restore(self) -> int: ...

    @property
    def by(self) -> str:
        """What in the world decided (the name its metrics go under: `dream/guard/stopped_at`)."""
        ...

    @property
    def reason(self) -> str:
        """Why, in words (printed)."""
        ...


class RealWorld:
    """The real environment of a family: each iteration a seeded sample of the pool, its environments the family's
    train environments. Its metrics are the loop's; it keeps no state of its own."""

    name = "real"
    real = True
    keeps_policies = 0

    def __init__(self, family: EnvFamily, seed: int, pool: Sequence[Task] | None = None, strata: str = ""):
        self.family, self.seed, self.strata = family, seed, strata
        self.pool: list[Task] = list(family.tasks("train") if pool is None else pool)

    def start(self, iteration: int) -> None:
        pass

    def tasks(self, iteration: int, n: int) -> list[Task]:
        return iteration_tasks(self.pool, n, self.seed, iteration, self.strata)

    def envs(self, policy_version: str) -> Callable[[], TextEnv]:
        return lambda: self.family.make_env("train")

    def after_iteration(self, iteration: int, episodes: Sequence[Episode], policy_version: str,
                        update: UpdateResult) -> dict[str, float]:
        return {}

    def save(self, iteration: int) -> None:
        pass

    def phase_end(self) -> PhaseEnd | None:
        return None


@dataclass
class Phase:
    """`iterations` iterations in `world`; evaluations tagged `<tag><iteration>` (it, dream-it, s2r-it)."""

    world: World
    iterations: int
    tag: str = "it"


@dataclass
class RunState:
    """What a run has done: completed iterations and the real-step budget (built once per run, from
    `real_step_budget`), and `cut`, the iterations phases that a world ended early did not play (later phases begin
    that much earlier). Every checkpoint keeps it (`state_dict`), so a resumed run continues all three."""

    budget: RealStepBudget
    iteration: int = 0
    cut: int = 0

    @classmethod
    def new(cls, real_step_budget: int | None) -> RunState:
        """A run at its start: no iteration done, its one budget built from `real_step_budget` (None: no limit)."""
        return cls(RealStepBudget(real_step_budget))

    def state_dict(self) -> dict[str, Any]:
        d = {"iteration": self.iteration, "budget": self.budget.state_dict()}
        return {**d, "cut": self.cut} if self.cut else d  # a run no phase of which ended early: as before

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.iteration = int(d["iteration"])
        self.cut = int(d.get("cut", 0))
        if d.get("budget") is not None:
            self.budget.load_state_dict(d["budget"])


@dataclass
class LoopSettings:
    """How the loop runs, the same for every phase of a run."""

    config: TrainerConfig
    """The run's config: the loop reads its seed, `tasks_per_iteration`, `group_size` (episodes of each task per
    iteration, one GRPO group), `rollout` and `agent` there."""
    save_every: int = 0
    """Save `<run_dir>/checkpoint` every this many iterations of a phase (0: the caller saves)."""
    eval_every: int = 0
    run_dir: Path | None = None
    progress: bool = True


@dataclass
class RunEnd:
    """What `run_phases` returns: every iteration's metrics (what it logged, the world's figures included, under their
    namespaces), and whether the real-step budget ended the run (spent, or what is left cannot finish one task's
    episodes)."""

    history: list[dict[str, Any]]
    out_of_budget: bool = False


def policy_version(trainer: OnlineTrainer, seed: int, iteration: int) -> str:
    """The policy's name in what it plays at `iteration` (the buffer and the dream's episode log keep it)."""
    return f"{trainer.algo}-seed{seed}-it{iteration}"


def run_phases(trainer: OnlineTrainer, phases: Sequence[Phase], state: RunState, settings: LoopSettings, *,
          logger: MetricsLogger | None = None, evaluate: PeriodicEvaluation | None = None) -> RunEnd:
    """Run `phases` in turn from `state.iteration` (a phase already done is skipped, one begun continues), each for
    its iterations (fewer when its world ends it early: later phases then begin where it stopped, `RunState.cut`);
    see the module docstring for one iteration. `evaluate(tag, iteration)` runs every `eval_every` iterations of a
    phase."""
    history: list[dict[str, Any]] = []
    planned = 0
    for phase in phases:
        # Where the phase begins and ends: as planned, less what phases that ended early did not play (every one of
        # them before this one: a phase begins only once those before it are done).
        start, end = planned - state.cut, planned + phase.iterations - state.cut
        if state.iteration < end and _phase(trainer, phase, start, end, state, settings, logger, evaluate, history):
            return RunEnd(history, out_of_budget=True)
        planned += phase.iterations
    return RunEnd(history)


SNAPSHOTS_DIR = "policy-snapshots"
"""In a run folder: the policies a world may ask back (`World.keeps_policies`), `it-<n>` the policy after n
iterations, each a trainer checkpoint written atomically."""


def _snapshot(trainer: OnlineTrainer, state: RunState, run_dir: Path, keep: int) -> None:
    """The current policy as `it-<state.iteration>`; only the latest `keep` snapshots stay."""
    root = run_dir / SNAPSHOTS_DIR
    trainer.save(root / f"it-{state.iteration}", state.state_dict())
    if distributed.is_main():
        for it in _snapshots(root):
            if it <= state.iteration - keep:
                shutil.rmtree(root / f"it-{it}", ignore_errors=True)


def _snapshots(root: Path) -> list[int]:
    """The iterations of the snapshots in `root`, oldest first."""
    found = [p.name[3:] for p in root.glob("it-*") if p.is_dir()] if root.is_dir() else []
    return sorted(int(n) for n in found if n.isdigit())


def _end_phase(trainer: OnlineTrainer, world: World, verdict: PhaseEnd, start: int, state: RunState,
               settings: LoopSettings) -> dict[str, float]:
    """Restore the policy `verdict` names (never one from before the phase's `start`) from its snapshot, say why and
    return the decision's metrics (under the world's name)."""
    if settings.run_dir is None:
        raise ValueError(f"the {world.name} world ended its phase: restoring a policy needs the loop's run_dir")
    root = settings.run_dir / SNAPSHOTS_DIR
    want = max(verdict.restore, start)
    kept = [it for it in _snapshots(root) if it >= want]
    if not kept:
        raise RuntimeError(f"{world.name} ended its phase and asked back the policy after {want} iterations, but "
                           f"{root} holds no snapshot from then on")
    if kept[0] != want:
        print(f"warning: {root}/it-{want} is missing; restoring the oldest snapshot after it, it-{kept[0]}")
    trainer.load(root / f"it-{kept[0]}")  # the run's own state (iterations, budget) stays this iteration's
    version = policy_version(trainer, settings.config.seed, kept[0])
    print(f"{world.name} phase stopped after iteration {verdict.stopped_at} by its {verdict.by}: {verdict.reason}; "
          f"the policy is rolled back to {version} (after {kept[0]} iterations)")
    return {f"{verdict.by}/stopped_at": float(verdict.stopped_at), f"{verdict.by}/rolled_back_to": float(kept[0])}


def _warn_if_untrained(world: str, iteration: int, update: UpdateResult) -> None:
    """Say so when the update of iteration `iteration` made no optimiser step (a deferred update aside): every GRPO
    group with equal rewards (e.g. all 0) leaves nothing to learn, and the iteration's rollouts were spent for
    nothing."""
    if update.optimizer_steps or update.deferred:
        return
    why = (f"{update.zero_variance_groups} of {update.groups} groups had equal rewards"
           if update.groups is not None else "no trainable samples")
    print(f"warning: {world} iteration {iteration} trained nothing (0 optimiser steps): {why}")


def _phase(trainer: OnlineTrainer, phase: Phase, start: int, end: int, state: RunState, settings: LoopSettings,
           logger: MetricsLogger | None, evaluate: PeriodicEvaluation | None, history: list[dict[str, Any]]) -> bool:
    """Iterations `state.iteration` .. `end` - 1 of a phase that began at `start`; True when the budget ended it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    world, budget, cfg = phase.world, state.budget, settings.config
    # The run's step limit in this world: where every episode ends at the latest, and what a real iteration's
    # budget is planned with.
    steps = world.family.step_limit(cfg.rollout.max_episode_steps)
    rollout = dataclasses.replace(cfg.rollout, max_episode_steps=steps)
    world.start(state.iteration)
    verdict = world.phase_end()
    if verdict is not None and verdict.stopped_at <= state.iteration:  # a resumed run: its world ended the phase
        print(f"{world.name} phase ended after iteration {verdict.stopped_at} ({verdict.by}: {verdict.reason}); "
              "it is not continued")
        state.cut += end - state.iteration
        return False
    keep = world.keeps_policies
    snapshots = settings.run_dir if keep else None  # where the policies it may ask back go
    if keep and snapshots is None:
        raise ValueError(f"the {world.name} world keeps policies to roll back to: the loop needs a run_dir")
    if snapshots is not None:
        _snapshot(trainer, state, snapshots, keep)  # the starting policy
    label = f"{world.name} {trainer.algo}"
    ran, out_of_budget = False, False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not settings.progress) as bar:
        job = bar.add_task(label, total=phase.iterations, completed=state.iteration - start)
        while state.iteration < end:
            # 1. tasks: in the real world only as many as the budget can finish (spending the rest would cut every
            # episode of the batch short, and train on none of them)
            n_tasks = cfg.tasks_per_iteration
            if world.real:
                n_tasks = budget.affordable(n_tasks, cfg.group_size, steps)
                if n_tasks == 0:
                    print(f"real-step budget: {budget.remaining} steps left, fewer than one task's episodes need at "
                          f"{steps} steps each; stopping after {state.iteration} iterations")
                    out_of_budget = True
                    break
            tasks = world.tasks(state.iteration, n_tasks)
            version = policy_version(trainer, cfg.seed, state.iteration)

            # 2. rollouts
            t0 = time.perf_counter()
            stats: dict[str, float] = {}
            episodes = run_shared(trainer.backend, world.envs(version), tasks, group_size=cfg.group_size,
                                  seed=mix_seed(cfg.seed, state.iteration), config=rollout,
                                  budget=budget, agent=cfg.agent, policy_version=version, stats=stats)
            t_roll = time.perf_counter() - t0
            crash_point("loop.rolled_out")  # fault tests: a rank dies between its rollouts and the update

            # 3. the update
            played = rollout_metrics(episodes)
            t1 = time.perf_counter()
            result = trainer.update(episodes)
            t_upd = time.perf_counter() - t1
            state.iteration += 1
            ran = True
            played.update(
                iteration=float(state.iteration), real_steps_used=float(budget.used),
                synthetic_steps=float(stats["synthetic_steps"]), rollout_time_s=t_roll,
                rollout_tokens_per_s=stats["gen_tokens"] / stats["gen_time_s"] if stats["gen_time_s"] > 0 else 0.0,
                gen_tokens=stats["gen_tokens"])
            update = {**result.metrics, "update_time_s": t_upd}
            if result.tokens and t_upd > 0:
                update["update_tokens_per_s"] = result.tokens / t_upd
            metrics: dict[str, Any] = {**namespaced(ROLLOUT, played), **namespaced(LOSSES, update)}

            if distributed.is_main():
                _warn_if_untrained(world.name, state.iteration, result)

            # 4. the world's turn, and its verdict: the phase ends here, the policy goes back
            own = namespaced(f"{world.name}/", world.after_iteration(state.iteration, episodes, version, result))
            verdict = world.phase_end()
            if verdict is not None:
                own.update(namespaced(f"{world.name}/", _end_phase(trainer, world, verdict, start, state, settings)))
            elif snapshots is not None:
                _snapshot(trainer, state, snapshots, keep)

            # 5. log
            if logger is not None:
                logger.log(state.iteration, metrics)
                if own:
                    logger.log(state.iteration, own)
            history.append({**metrics, **own})
            bar.update(job, completed=state.iteration - start,
                       description=f"{label} success {played['success_rate']:.2f} loss {result.loss:.3f} "
                                   f"real steps {budget.used}")
            if verdict is not None:
                state.cut += end - state.iteration
                if settings.save_every and settings.run_dir is not None:  # a resumed run starts past the phase
                    trainer.save(settings.run_dir / "checkpoint", state.state_dict())
                break

            # 6. save, evaluate
            done = state.iteration - start
            if settings.save_every and settings.run_dir is not None and done % settings.save_every == 0:
                trainer.save(settings.run_dir / "checkpoint", state.state_dict())
                world.save(state.iteration)
            if evaluate is not None and settings.eval_every and done % settings.eval_every == 0:
                evaluate(f"{phase.tag}{state.iteration}", state.iteration)
            if world.real and budget.exhausted:
                out_of_budget = True
                break
    if ran:
        # Only the world's state: the caller saves the trainer's checkpoint of this last iteration right after, so
        # saving the weights here as well would write them twice when the iteration is not a multiple of save_every.
        world.save(state.iteration)
    return out_of_budget
