"""`dreamgym train`: train an agent with GRPO, PPO, SFT or DPO, in the real environment or (mode=dream|s2r)
inside the experience model.

Owns: `TrainConfig` (the run-level fields on top of `dreamgym.trainers.common.TrainerConfig`) and the command
line `main(argv)`: the run directory, demonstrations for SFT/DPO, the run's evaluation record, checkpoints,
resume and the summary. GRPO/PPO run through the run loop (`dreamgym.rl.loop.run_phases`) over the phases of `mode`
(`dreamgym.rl.modes.online_phases`); SFT/DPO through the offline loop (`dreamgym.rl.builders.train_offline`).
Must not know: how the loops run, trainers' internals, recipes.

Usage:
    dreamgym train --algo grpo|ppo|sft|dpo --env dial|webshop|alfworld [--config file.yaml] [--resume] key=value...

Layout of a run directory: `config.yaml` (the resolved config), `metrics.jsonl` + `tb/` (dreamgym.utils.metrics),
`checkpoint/` (the latest checkpoint, replaced atomically), `final/` (the checkpoint at the end), `eval.jsonl`
(one line per evaluation) and, for SFT/DPO collected on the fly, `demos.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym import provenance

from dreamgym.utils import distributed
from dreamgym.checks import (POLICY_MIX, env_family, family_choices, model_source, policy_mix, real_task_file,
                             trajectory_file)
from dreamgym.config import CommandParser, ConfigError, checked, describe, fail, load_config, ranged, renamed, to_dict
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.curriculum.pools import check_strata, task_pool
from dreamgym.rl.modes import online_phases
from dreamgym.envs.family import EnvFamily
from dreamgym.rl.evaluate import EvalConfig
from dreamgym.utils.filecheck import output_path
from dreamgym.llm.capabilities import LLMEndpointError
from dreamgym.rl.builders import (Evaluation, OnlineTrainer, Trainer, build_backend, build_offline_trainer,
                                  build_online_trainer, close_backend, train_offline)
from dreamgym.utils.metrics import (REPORT_TO_ALLOWED, MetricsLogger, machine_info, parse_report_to, pin_threads,
                                    resolve_threads)
from dreamgym.utils.paths import atomic_write_text
from dreamgym.utils.quiet import quiet_progress_bars
from dreamgym.llm.presets import PresetError
from dreamgym.rl.loop import LoopSettings, RunState, run_phases
from dreamgym.trainers.checkpoint import CheckpointError, resumable_checkpoint
from dreamgym.trainers.common import TrainerConfig
from dreamgym.trainers.dpo import DPOConfig
from dreamgym.trainers.grpo import GRPOConfig
from dreamgym.trainers.ppo import PPOConfig
from dreamgym.trainers.sft import SFTConfig
from dreamgym.types import Task, Trajectory

ONLINE_ALGOS = ("grpo", "ppo")


def report_to_check(spec: str) -> None:
    """Trackers that exist and are installed (`dreamgym.utils.metrics.parse_report_to`)."""
    parse_report_to(spec)

OFFLINE_ALGOS = ("sft", "dpo")


RENAMED_KEYS = {"grpo.group_size": "group_size", "ppo.episodes_per_task": "group_size",
                "grpo.tasks_per_iteration": "tasks_per_iteration", "ppo.tasks_per_iteration": "tasks_per_iteration",
                "rollout.max_turns": "rollout.max_episode_steps", "dream.max_steps": "rollout.max_episode_steps"}
"""Keys of earlier versions (an older run folder's config.yaml holds them): the run loop's batch is set once for GRPO
and PPO, and the episodes' step limit once for real and dreamt episodes. Refused naming the new key."""


@renamed(RENAMED_KEYS)
@dataclass
class TrainConfig(TrainerConfig):
    algo: Literal["grpo", "ppo", "sft", "dpo"] = "grpo"
    """Training algorithm."""
    mode: Literal["real", "dream", "s2r"] = "real"
    """GRPO/PPO: 'real' (RL in the real environment), 'dream' (RL only inside the experience model: zero real
    steps), 's2r' (dream, then real RL under `real_step_budget`). The dream.* fields configure the synthetic side."""
    dream: DreamConfig = field(default_factory=DreamConfig)
    """Experience model, curriculum and iteration counts for mode=dream/s2r (dreamgym.dream.world)."""
    env: str = checked("dial", env_family, family_choices)
    """Environment family."""
    run_dir: str = ""
    """Output directory (default: runs/<algo>-<env>-seed<seed>)."""
    init: str = checked("", model_source, "a trainer checkpoint, a model folder, a preset or a Hugging Face id")
    """Start from this policy instead of `model.preset` (e.g. an SFT run's final/)."""
    iterations: int = ranged(20, ge=1)
    """Online algorithms: rollout + update iterations."""
    save_every: int = ranged(5, ge=0)
    """Write checkpoint/ every this many iterations (online) or optimiser steps x 10 (offline); 0 = only at the end."""
    eval_every: int = ranged(0, ge=0)
    """Evaluate on `eval_split` every this many iterations (0 = only before and after training)."""
    eval_split: str = "test"
    """Task split for evaluation."""
    eval_seeds: list[int] = ranged([0], ge=0)
    """Environment seeds for evaluation; each task runs once per seed."""
    eval_temperature: float = ranged(0.0, ge=0)
    """Sampling temperature during evaluation (0 = greedy)."""
    eval_max_tasks: int = ranged(0, ge=0)
    """Evaluate on at most this many tasks of the split (0 = all)."""
    eval_at_start: bool = True
    """Evaluate before training (false: skip it, e.g. when `init` was just evaluated on the same tasks)."""
    keep_evaluated: bool = False
    """Keep the policy of every periodic evaluation as a trainer checkpoint named by its tag in eval.jsonl
    (`<run_dir>/it<N>/`, `dream-it<N>/`, `s2r-it<N>/`)."""
    real_task_pool: str = checked("", real_task_file, "a trajectory file (.jsonl or .parquet)")
    """Real RL (`mode=real`): draw each iteration's tasks only from the train tasks this trajectory file played.
    Empty: all train tasks."""
    data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """SFT/DPO: trajectory file (JSONL/Parquet). Empty: collect `demo_episodes` with `demo_policies` first."""
    demo_policies: str = checked("", policy_mix, POLICY_MIX)
    """Policy mix for on-the-fly demonstrations (default: the family's expert policy for SFT, its exploring policies
    for DPO: `EXPERT_POLICY`, `EXPLORE_POLICIES`)."""
    demo_episodes: int = ranged(200, ge=1)
    """Demonstration episodes to collect when `data` is empty."""
    report_to: str = checked("tensorboard", report_to_check, REPORT_TO_ALLOWED)
    """Where every logged scalar goes besides metrics.jsonl (TRL's `report_to`): tensorboard (`<run_dir>/tb`), wandb
    (`<run_dir>/wandb`, project WANDB_PROJECT or dreamgym; WANDB_MODE=offline keeps it local), trackio (its local
    store, TRACKIO_DIR; project TRACKIO_PROJECT or dreamgym); comma-separated, or none."""
    tensorboard: bool = True
    """false: no TensorBoard even where `report_to` names it (the switch of earlier versions)."""
    threads: int = ranged(0, ge=0)
    """CPU threads of torch and of numpy's BLAS (they change results); 0: OMP_NUM_THREADS when it is set, else
    torch's own count (the rule of every command). On a GPU only BLAS is set."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """GRPO settings."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """SFT settings."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """DPO settings."""

    def validate(self) -> None:
        if self.mode != "real" and self.algo not in ONLINE_ALGOS:
            raise ConfigError("mode", f"{self.mode!r} needs algo grpo or ppo, not {self.algo!r}", "real with sft/dpo")
        if self.mode != "real" and not self.dream.em:
            raise ConfigError("dream.em", "mode=dream/s2r needs an experience-model checkpoint",
                              "a checkpoint folder from dreamgym train-em")
        if self.mode == "dream" and self.dream.iterations == 0:
            raise ConfigError("dream.iterations", "0 trains nothing in mode=dream", ">= 1 with mode=dream")
        if self.mode == "s2r" and self.dream.iterations + self.dream.s2r_iterations == 0:
            raise ConfigError("dream.iterations", "0 dream and 0 real iterations train nothing in mode=s2r",
                              "dream.iterations + dream.s2r_iterations >= 1")
        if self.real_task_pool and not (self.mode == "real" and self.algo in ONLINE_ALGOS):
            raise ConfigError("real_task_pool", "only real RL (mode=real, algo grpo or ppo) draws train tasks from it; "
                              "S2R from a dream run is `mode=s2r`")
        if not self.eval_seeds:
            raise ConfigError("eval_seeds", "need at least one evaluation seed", "a list of seeds >= 0")
        if self.model.fsdp and self.algo == "ppo" and self.ppo.critic == "separate":
            raise ConfigError("ppo.critic", "a separate critic is not sharded", "critic=shared with model.fsdp")

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or f"runs/{self.algo}-{self.env}-seed{self.seed}")

    def online_config(self) -> GRPOConfig | PPOConfig:
        """The settings of the online algorithm `algo` names."""
        if self.algo not in ONLINE_ALGOS:
            raise ValueError(f"algo: {self.algo!r} is not an online algorithm ({', '.join(ONLINE_ALGOS)})")
        return self.grpo if self.algo == "grpo" else self.ppo

    def offline_config(self) -> SFTConfig | DPOConfig:
        """The settings of the offline algorithm `algo` names."""
        if self.algo not in OFFLINE_ALGOS:
            raise ValueError(f"algo: {self.algo!r} is not an offline algorithm ({', '.join(OFFLINE_ALGOS)})")
        return self.sft if self.algo == "sft" else self.dpo


def demo_mix(cfg: TrainConfig, fam: EnvFamily) -> dict[str, float]:
    """The scripted policies (and weights) that play SFT/DPO demonstrations when `cfg.data` is empty:
    `demo_policies`, else the family's expert (SFT) or exploring policies (DPO). Raises ValueError naming the
    problem: a policy the family lacks, or a family that declares no policy for the role."""
    from dreamgym.commands.collect import parse_mix

    if cfg.demo_policies:
        mix = parse_mix(cfg.demo_policies)
        unknown = [p for p in mix if p not in fam.POLICIES]
        if unknown:
            raise ValueError(f"demo_policies: family {fam.name!r} has no policy {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(fam.POLICIES)}")
        return mix
    if cfg.algo == "sft":
        expert = fam.expert_policy()
        if expert is None:
            raise ValueError(f"data: family {fam.name!r} declares no expert policy (EXPERT_POLICY) for SFT "
                             f"demonstrations; give data=FILE or demo_policies=NAME (known: {', '.join(fam.POLICIES)})")
        return {expert: 1.0}
    mix = fam.explore_mix()
    if not mix:
        raise ValueError(f"data: family {fam.name!r} has no exploring policy (EXPLORE_POLICIES) for DPO "
                         f"demonstrations; give data=FILE or demo_policies=MIX (known: {', '.join(fam.POLICIES)})")
    return mix


def _demonstrations(cfg: TrainConfig, run_dir: Path, mix: dict[str, float]) -> list[Trajectory]:
    """SFT/DPO data: `cfg.data` when given, else collected now with the scripted policies of `mix` (`demo_mix`)."""
    from dreamgym.commands.collect import collect
    from dreamgym.data import load_trajectories

    if cfg.data:
        return load_trajectories(cfg.data)
    out = run_dir / "demos.jsonl"
    if distributed.is_main():  # the other ranks read what rank 0 wrote
        collect(cfg.env, mix, cfg.demo_episodes, out, split="train", seed=cfg.seed, resume=True)
    distributed.barrier("collecting demonstrations")
    return load_trajectories(out)


def _train_online(trainer: OnlineTrainer, state: RunState, fam: EnvFamily, pool: list[Task], cfg: TrainConfig,
                  run_dir: Path, logger: MetricsLogger | None, evaluation: Evaluation, progress: bool) -> None:
    """GRPO/PPO in `cfg.mode` through the run loop: real RL on `pool`, RL inside the experience model, or S2R (the
    dream, then real RL), continuing `state`."""
    def periodic(tag: str, step: int) -> None:
        # checkpoint/ is replaced as training goes on: keep_evaluated keeps each evaluated policy under its tag.
        if cfg.keep_evaluated:
            trainer.save(run_dir / tag, state.state_dict())
        evaluation(trainer.backend, tag, step)

    world = (DreamWorld(cfg.env, cfg.dream, run_dir, cfg.seed, strata=cfg.task_strata) if cfg.mode != "real"
             else None)
    phases = online_phases(cfg.mode, fam, cfg.env, cfg.seed, world=world, pool=pool, strata=cfg.task_strata,
                           real_iterations=cfg.iterations if cfg.mode == "real" else cfg.dream.s2r_iterations,
                           dream_iterations=cfg.dream.iterations, tasks_per_iteration=cfg.tasks_per_iteration)
    settings = LoopSettings(cfg, save_every=cfg.save_every, eval_every=cfg.eval_every, run_dir=run_dir,
                            progress=progress)
    end = run_phases(trainer, phases, state, settings, logger=logger, evaluate=periodic)
    if end.out_of_budget and state.budget.exhausted:
        print(f"real-step budget of {cfg.real_step_budget} used up after {state.iteration} iterations")


def _check_inputs(cfg: TrainConfig) -> None:
    """Start-up checks of what the run reads and writes, before any model loads (cheap: JSON, YAML, file headers,
    streamed records): the run folder can be written and, when it holds a run already, was this family's and
    algorithm's run; the policy to start from and the experience model are of this family; every trajectory file
    the run trains on or draws from reads to its last record, each record of this family. Raises ValueError naming
    the problem."""
    output_path(cfg.resolved_run_dir(), "folder")
    # One run per folder: --resume continues its config.yaml and metrics.jsonl, and a new run there (without
    # --resume) would overwrite the one config.yaml and append to its metrics, so another family's or algorithm's
    # run is refused either way.
    found = provenance.of_run_dir(cfg.resolved_run_dir())
    if found is not None:
        provenance.require(found, family=cfg.env, algo=cfg.algo)
    if cfg.init:
        found_init = provenance.of_model_folder(cfg.init)
        if found_init is not None:
            provenance.require(found_init, family=cfg.env)
    if cfg.dream.em and cfg.mode != "real":
        provenance.require(provenance.of_em_checkpoint(cfg.dream.em), family=cfg.env)
    files = [cfg.data if cfg.algo in OFFLINE_ALGOS else "", cfg.real_task_pool,
             cfg.dream.em_data if cfg.mode != "real" else "",
             cfg.dream.task_pool if cfg.mode != "real" and cfg.dream.task_pool not in ("all", "data") else ""]
    for path in dict.fromkeys(f for f in files if f):
        provenance.check_trajectories(path, cfg.env)


def _check_checkpoint(ckpt: Path, cfg: TrainConfig) -> None:
    """The checkpoint `--resume` loads was written by this family's run of this algorithm, with the kind of weights
    `model.lora` asks for when it is set."""
    kind = None if cfg.model.lora is None else "lora" if cfg.model.lora else "full"
    provenance.require(provenance.of_trainer_checkpoint(ckpt), family=cfg.env, algo=cfg.algo, model_kind=kind)


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="dreamgym train",
                           description="Train an agent: GRPO/PPO in the real environment (mode=real), inside the "
                                       "experience model (mode=dream) or both (mode=s2r); SFT/DPO on demonstrations.",
                           epilog="Config fields (key=value):\n" + describe(TrainConfig),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=ONLINE_ALGOS + OFFLINE_ALGOS, default=None, help="training algorithm")
    parser.add_argument("--env", default=None, help="environment family")
    parser.add_argument("--config", default=None, help="YAML file with TrainConfig fields")
    parser.add_argument("--resume", action="store_true", help="continue from <run_dir>/checkpoint when it exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. group_size=8 optim.lr=1e-4")
    args = parser.parse_intermixed_args(argv)
    if args.no_progress:  # other libraries' bars too (loading and writing weights), before any of them runs
        quiet_progress_bars()
    overrides = list(args.overrides)
    overrides += [f"algo={args.algo}"] if args.algo else []
    overrides += [f"env={args.env}"] if args.env else []
    try:
        cfg = load_config(TrainConfig, args.config, overrides)
        _check_inputs(cfg)
        from dreamgym.envs import family

        fam: EnvFamily = family(cfg.env)
        # Before any model loads: the scripted policies that play the demonstrations when no data is given.
        mix = demo_mix(cfg, fam) if cfg.algo in OFFLINE_ALGOS and not cfg.data else {}
        # A real_task_pool that played no train task fails here, at start-up.
        pool = task_pool(fam.tasks("train"), cfg.real_task_pool, name="real_task_pool", env=cfg.env) \
            if cfg.mode == "real" and cfg.algo in ONLINE_ALGOS else []
        if cfg.task_strata and cfg.algo in ONLINE_ALGOS:  # a field the train tasks lack fails now, not at iteration 1
            check_strata(pool or fam.tasks("train"), cfg.task_strata)
        # Several processes (torchrun): every rank runs this same command; see dreamgym/utils/distributed.py.
        distributed.init()
        threads = resolve_threads(cfg.threads)  # a bad OMP_NUM_THREADS is refused here, in one line
        # Before any model loads: a run folder whose checkpoint a kill left mid-switch is recovered, one that shows a
        # checkpoint was written but holds none that loads is refused (never a silent restart from iteration 0).
        # Rank 0 first, since recovering writes.
        ckpt = resumable_checkpoint(cfg.resolved_run_dir() / "checkpoint") \
            if args.resume and distributed.is_main() else None
        distributed.barrier("opening the checkpoint")
        if args.resume and not distributed.is_main():
            ckpt = resumable_checkpoint(cfg.resolved_run_dir() / "checkpoint")
        if ckpt is not None:
            _check_checkpoint(ckpt, cfg)
    except (ValueError, OSError, ImportError, CheckpointError) as e:
        return fail("train", e)
    from dreamgym.llm.presets import pick_device

    # After the start-up checks (a refusal stays one line; pinning may warn of busy cores), before any model loads.
    # On a GPU torch's CPU pool is host-side glue and is left alone.
    pin_threads(threads, torch_threads=pick_device() == "cpu")
    run_dir = cfg.resolved_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    import yaml

    main_rank = distributed.is_main()  # the only writer of files
    if main_rank:
        atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    progress = not args.no_progress
    logger = MetricsLogger(run_dir, tensorboard=cfg.tensorboard, report_to=cfg.report_to, run_name=run_dir.name,
                           config=to_dict(cfg)) if main_rank else None
    t0 = time.time()
    backend: object = None  # set once built: closed at the end when it samples on servers
    try:
        eval_tasks = fam.tasks(cfg.eval_split)
        evaluation = Evaluation(fam, cfg.eval_split, eval_tasks[: cfg.eval_max_tasks] if cfg.eval_max_tasks else
                                eval_tasks, list(cfg.eval_seeds),
                                EvalConfig(temperature=cfg.eval_temperature, sample_seed=cfg.seed, agent=cfg.agent,
                                           rollout=cfg.rollout), log=run_dir / "eval.jsonl" if main_rank else None,
                                logger=logger)
        try:
            backend = build_backend(cfg, cfg.init)
        except PresetError as e:  # a Hugging Face id that cannot be fetched is known only now
            return fail("train", ConfigError("init" if cfg.init else "model.preset", str(e)))
        # The run's one real-step budget and iteration count (an offline run spends none and counts epochs).
        state = RunState.new(cfg.real_step_budget)
        trainer: Trainer
        fit: Callable[[], object]
        if cfg.algo in ONLINE_ALGOS:
            online = build_online_trainer(backend, cfg, cfg.online_config(), admissible_fn=fam.admissible_from_state)
            trainer, fit = online, lambda: _train_online(online, state, fam, pool, cfg, run_dir, logger, evaluation,
                                                         progress)
            run_state: Callable[[], dict[str, Any]] = state.state_dict
        else:
            offline = build_offline_trainer(backend, cfg, cfg.offline_config(), logger=logger,
                                            admissible_fn=fam.admissible_from_state)
            trainer, fit = offline, lambda: train_offline(offline, _demonstrations(cfg, run_dir, mix),
                                                          save_every=cfg.save_every,
                                                          checkpoint=run_dir / "checkpoint", progress=progress)
            run_state = lambda: {"iteration": offline.iteration}  # noqa: E731 - the fit loop keeps its epoch

        def iteration() -> int:
            return int(run_state()["iteration"])

        if ckpt is not None:
            state.load_state_dict(trainer.load(ckpt))
            print(f"resumed from {ckpt} at iteration {iteration()}, step {trainer.global_step}")
        if args.resume and logger is not None:
            # Rows logged after the checkpoint are redone now: drop them (online runs log per iteration, offline
            # ones per optimiser step).
            logger.resume(None if ckpt is None else iteration() if cfg.algo in ONLINE_ALGOS else trainer.global_step)
        before = evaluation(backend, "start", iteration()) \
            if cfg.eval_at_start and iteration() == 0 and trainer.global_step == 0 else None
        fit()
        trainer.save(run_dir / "checkpoint", run_state())
        trainer.save(run_dir / "final", run_state())
        after = evaluation.recorded_at(iteration()) or evaluation(backend, "final", iteration())
    except LLMEndpointError as e:
        # A policy server gone or too slow: one line naming the server and the setting to raise (as `dreamgym eval`
        # says it), and where the run can go on from; the checkpoints and metrics written so far stay.
        saved = run_dir / "checkpoint"
        again = f"; `--resume` goes on from {saved}" if saved.is_dir() else ""
        return fail("train", f"{e}{again}")
    finally:
        if logger is not None:
            logger.close()
        close_backend(backend)
    if main_rank:
        summary = {"algo": cfg.algo, "env": cfg.env, "run_dir": str(run_dir), "wall_time_s": time.time() - t0,
                   "real_steps_used": state.budget.used, "iterations": iteration(),
                   "optimizer_steps": trainer.global_step, "final": after.to_dict(),
                   "start": before.to_dict() if before is not None else None, "machine": machine_info()}
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=1))
        print(json.dumps({k: v for k, v in summary.items() if k not in ("final", "start", "machine")}))
    return distributed.leave(0)


if __name__ == "__main__":
    sys.exit(main())
