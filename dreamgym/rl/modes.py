"""The modes of an online run, each a named list of phases: real RL, RL inside the experience model (the dream),
and sim-to-real (the dream, then a small real budget on the tasks it left undecided).

Owns: `real_phases`, `dream_phases`, `sim_to_real_phases` and `online_phases` (a `mode` name to its phases: the one
place a mode becomes a run), and `SimToRealWorld`, the real world of S2R's second phase, whose task pool is chosen
when the phase starts from the dream's curriculum log.
Must not know: trainers, the experience model's internals (a `DreamWorld` is a `World` like any other), concrete
environments (a family is reached through `dreamgym.envs.family`).

    real  = [Phase(RealWorld, n, "it")]
    dream = [Phase(DreamWorld, n, "dream-it")]
    S2R   = [Phase(DreamWorld, n, "dream-it"), Phase(SimToRealWorld, m, "s2r-it")]

Real phases stop earlier when the run's real-step budget is spent; the dream spends none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dreamgym.curriculum.pools import task_pool
from dreamgym.dream.world import DreamWorld
from dreamgym.envs.family import EnvFamily
from dreamgym.rl.loop import Phase, RealWorld
from dreamgym.types import Task
from dreamgym.utils import distributed

MODES = ("real", "dream", "s2r")
"""The online modes (`dreamgym train mode=...`)."""


class SimToRealWorld(RealWorld):
    """S2R's real phase: the train tasks whose latest dream group had mixed outcomes, read from the dream run's
    curriculum log at `dream_dir` when the phase starts (all train tasks when fewer than `min_pool`). A group whose
    rewards are all equal has zero GRPO advantage, so a small real budget spent on it trains nothing."""

    def __init__(self, family: EnvFamily, seed: int, dream_dir: Path, *, env: str, min_pool: int, strata: str = ""):
        super().__init__(family, seed, [], strata)
        self.dream_dir, self.env, self.min_pool = Path(dream_dir), env, min_pool

    def start(self, iteration: int) -> None:
        distributed.barrier("rank 0 finishing the dream's log")  # the other ranks read what rank 0 wrote
        self.pool = task_pool(self.family.tasks("train"), self.dream_dir, name="s2r", env=self.env,
                              fall_back_below=self.min_pool)


def real_phases(family: EnvFamily, seed: int, iterations: int, pool: Sequence[Task] | None = None,
                strata: str = "") -> list[Phase]:
    """Real RL: `iterations` in the real environment, drawing from `pool` (default: all train tasks), evenly over
    goal field `strata` when given."""
    return [Phase(RealWorld(family, seed, pool, strata), iterations, "it")]


def dream_phases(world: DreamWorld, iterations: int) -> list[Phase]:
    """DreamGym: `iterations` inside the experience model of `world`; no real step is spent."""
    return [Phase(world, iterations, "dream-it")]


def sim_to_real_phases(family: EnvFamily, env: str, seed: int, *, world: DreamWorld | None, dream_iterations: int,
                       real_iterations: int, min_pool: int, dream_log: Path | None = None,
                       strata: str = "") -> list[Phase]:
    """DreamGym-S2R: the dream of `world`, then at most `real_iterations` in the real environment on the train tasks
    the dream left with mixed outcomes (`SimToRealWorld`). Without a `world`, only that real phase, after the dream
    whose run folder is `dream_log` (an S2R row of the recipe continuing a dream row)."""
    log = world.run_dir if world is not None else dream_log
    if log is None:
        raise ValueError("the real phase of S2R needs the dream's run folder")
    dream = [] if world is None else dream_phases(world, dream_iterations)
    return [*dream, Phase(SimToRealWorld(family, seed, log, env=env, min_pool=min_pool, strata=strata),
                          real_iterations, "s2r-it")]


def online_phases(mode: str, family: EnvFamily, env: str, seed: int, *, world: DreamWorld | None,
                  real_iterations: int, dream_iterations: int, tasks_per_iteration: int,
                  pool: Sequence[Task] | None = None, dream_log: Path | None = None, strata: str = "") -> list[Phase]:
    """The phases of an online run in `mode` (one of `MODES`): `real_phases`, `dream_phases` (needs a `world`) or
    `sim_to_real_phases` (its real phase falls back to all train tasks below one iteration's worth)."""
    if mode == "real":
        return real_phases(family, seed, real_iterations, pool, strata)
    if mode == "dream":
        if world is None:
            raise ValueError("a dream phase needs a DreamWorld")
        return dream_phases(world, dream_iterations)
    if mode == "s2r":
        return sim_to_real_phases(family, env, seed, world=world, dream_iterations=dream_iterations,
                                  real_iterations=real_iterations, min_pool=tasks_per_iteration, dream_log=dream_log,
                                  strata=strata)
    raise ValueError(f"mode {mode!r} is not real, dream or s2r")
