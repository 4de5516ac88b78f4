"""`dreamgym train`: train an agent with GRPO, PPO, SFT or DPO, in the real environment or (mode=dream|s2r)
inside the experience model.

Owns: `TrainConfig` (the run-level fields on top of `dreamgym.trainers.common.TrainerConfig`),
`build_trainer` (algorithm name -> trainer object), `build_backend`, the real-environment training loop
(`train_real`), the offline loop (`train_offline`), demonstration loading/collection for SFT and DPO, periodic
evaluation, checkpoints and resume, and `main(argv)`.
Must not know: trainers' internals (it only calls `train_iteration`/`fit`/`save`/`load`).

Usage:
    dreamgym train --algo grpo|ppo|sft|dpo --env dial|webshop|alfworld [--config file.yaml] [--resume] key=value...

Layout of a run directory: `config.yaml` (the resolved config), `metrics.jsonl` + `tb/` (dreamgym.metrics),
`checkpoint/` (the latest checkpoint, replaced atomically), `final/` (the checkpoint at the end), `eval.jsonl`
(one line per evaluation) and, for SFT/DPO collected on the fly, `demos.jsonl`.

The DreamGym pipeline builds on this module: it reuses `TrainConfig`, `build_backend` and `build_trainer`, and
swaps the environment factory (real / synthetic) and the task source (curriculum) per iteration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.config import ConfigError, describe, load_config, to_dict
from dreamgym.curriculum import draw_tasks
from dreamgym.evaluate import EvalConfig, EvalResult, evaluate_policy, load_policy
from dreamgym.metrics import MetricsLogger, machine_info
from dreamgym.paths import atomic_write_text
from dreamgym.pipeline import (DREAM_VARIANCE_LOG, DreamConfig, DreamWorld, s2r_task_pool, train_dream,
                               train_s2r_real)
from dreamgym.rollout import RealStepBudget
from dreamgym.trainers.common import TrainerConfig, mix_seed
from dreamgym.trainers.dpo import DPOConfig, DPOTrainer
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer
from dreamgym.trainers.ppo import PPOConfig, PPOTrainer
from dreamgym.trainers.sft import SFTConfig, SFTTrainer
from dreamgym.types import Task, Trajectory

ALGOS = ("grpo", "ppo", "sft", "dpo")


@dataclass
class TrainConfig(TrainerConfig):
    algo: Literal["grpo", "ppo", "sft", "dpo"] = "grpo"
    """Training algorithm."""
    mode: Literal["real", "dream", "s2r"] = "real"
    """GRPO/PPO: 'real' (RL in the real environment), 'dream' (RL only inside the experience model: zero real
    steps), 's2r' (dream, then real RL under `real_step_budget`). The dream.* fields configure the synthetic side."""
    dream: DreamConfig = field(default_factory=DreamConfig)
    """Experience model, curriculum and iteration counts for mode=dream/s2r (dreamgym.pipeline)."""
    env: str = "dial"
    """Environment family (see dreamgym.envs.FAMILIES)."""
    run_dir: str = ""
    """Output directory (default: runs/<algo>-<env>-seed<seed>)."""
    init: str = ""
    """Start from this policy instead of `model.preset`: a trainer checkpoint (e.g. an SFT run's final/) or a
    model directory."""
    iterations: int = 20
    """Online algorithms: rollout + update iterations."""
    save_every: int = 5
    """Write checkpoint/ every this many iterations (online) or optimiser steps x 10 (offline); 0 = only at the end."""
    eval_every: int = 0
    """Evaluate on `eval_split` every this many iterations (0 = only before and after training)."""
    eval_split: str = "test"
    """Task split for evaluation."""
    eval_seeds: list[int] = field(default_factory=lambda: [0])
    """Environment seeds for evaluation; each task runs once per seed."""
    eval_temperature: float = 0.0
    """Sampling temperature during evaluation (0 = greedy)."""
    eval_max_tasks: int = 0
    """Evaluate on at most this many tasks of the split (0 = all)."""
    eval_at_start: bool = True
    """Evaluate before training. False skips it, e.g. when `init` is a checkpoint whose run just evaluated it on the
    same tasks (an ALFWorld evaluation of 60 games x 50 steps costs ~5 minutes of one core)."""
    keep_evaluated: bool = False
    """Keep the policy of every periodic evaluation as a trainer checkpoint named by its tag in eval.jsonl
    (`<run_dir>/it<N>/`, `dream-it<N>/`, `s2r-it<N>/`). `checkpoint/` is replaced as training goes on, so without this
    a policy picked on the periodic evaluation is lost; with it, the pick can be confirmed on tasks it was not picked
    on (`dreamgym eval --policy <run_dir>/it<N> --skip-tasks ...`)."""
    real_task_pool: str = ""
    """Real RL (`mode=real`): draw each iteration's tasks only from these train tasks. A trajectory file
    (JSONL/Parquet): the tasks it played, e.g. the `dream.em_data` of a `dream.task_pool=data` run, so that real and
    dream RL play the same games. A dream run's folder (S2R from its policy): the tasks whose latest dream group
    had mixed outcomes (its `curriculum.jsonl`), so a small real budget is not spent on groups that all fail or
    all win. Empty: all train tasks."""
    data: str = ""
    """SFT/DPO: trajectory file (JSONL/Parquet). Empty: collect `demo_episodes` with `demo_policies` first."""
    demo_policies: str = ""
    """Policy mix for on-the-fly demonstrations, e.g. "expert" or "noisy:0.5,random:0.5" (default: expert for
    SFT, noisy:0.7,random:0.3 for DPO, which needs failures)."""
    demo_episodes: int = 200
    """Demonstration episodes to collect when `data` is empty."""
    tensorboard: bool = True
    """Also write TensorBoard event files."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """GRPO settings."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """SFT settings."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """DPO settings."""

    def validate(self) -> None:
        if self.mode != "real" and self.algo not in ("grpo", "ppo"):
            raise ConfigError(f"mode: {self.mode!r} needs algo grpo or ppo, not {self.algo!r}")
        if self.mode != "real" and not self.dream.em:
            raise ConfigError("dream.em: mode=dream/s2r needs an experience-model checkpoint (from dreamgym train-em)")
        if self.real_task_pool and not (self.mode == "real" and self.algo in ("grpo", "ppo")):
            raise ConfigError("real_task_pool: only real RL (mode=real, algo grpo or ppo) draws train tasks from it")
        pool = Path(self.real_task_pool)
        if self.real_task_pool and not (pool.is_file() or (pool / DREAM_VARIANCE_LOG).is_file()):
            raise ConfigError(f"real_task_pool: {self.real_task_pool!r} is neither a trajectory file nor a dream "
                              f"run folder with a {DREAM_VARIANCE_LOG}")

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or f"runs/{self.algo}-{self.env}-seed{self.seed}")


def build_backend(cfg: TrainerConfig, init: str = "", device: str | None = None) -> Any:
    """The policy backend: `init` (a checkpoint or model dir) when given, else the preset, on CUDA when present."""
    from dreamgym.llm.hf import HFBackend

    model, tok, meta = load_policy(init or cfg.model.preset, device=device)
    if meta.get("kind") == "lora" and cfg.model.lora is not False:
        # Continue training the same adapters (the PEFT model loads them frozen by default).
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)
    elif meta.get("kind") == "lora":
        model = model.merge_and_unload()
    return HFBackend(model, tok, batch_size=cfg.model.generation_batch_size)


def build_trainer(algo: str, backend: Any, cfg: TrainConfig, *, logger: MetricsLogger | None = None,
                  budget: RealStepBudget | None = None,
                  admissible_fn: Callable[[str], list[str]] | None = None) -> Any:
    """A trainer for `algo` over `backend` configured by `cfg` (the algorithm's section plus the shared fields)."""
    if algo == "grpo":
        return GRPOTrainer(backend, cfg.grpo, cfg, logger=logger, budget=budget)
    if algo == "ppo":
        return PPOTrainer(backend, cfg.ppo, cfg, logger=logger, budget=budget)
    if algo == "sft":
        return SFTTrainer(backend, cfg.sft, cfg, logger=logger, admissible_fn=admissible_fn)
    if algo == "dpo":
        return DPOTrainer(backend, cfg.dpo, cfg, logger=logger, admissible_fn=admissible_fn)
    raise ValueError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGOS)}")


def iteration_tasks(pool: Sequence[Task], n: int, seed: int, iteration: int) -> list[Task]:
    """The tasks of one iteration: a seeded sample without replacement (with it when the pool is smaller)."""
    return draw_tasks(random.Random(mix_seed(seed, iteration, 11)), pool, n)


def real_iteration_tasks(trainer: Any, pool: Sequence[Task], n_tasks: int, seed: int) -> list[Task]:
    """One real iteration's tasks: `iteration_tasks` over as many of `n_tasks` as the remaining real-step budget can
    finish (`affordable_tasks`). Empty, with a message, when not even one task's episodes fit: the caller stops."""
    affordable = trainer.affordable_tasks(n_tasks)
    if affordable == 0:
        print(f"real-step budget: {trainer.budget.remaining} steps left, fewer than one task's episodes need at "
              f"rollout.max_turns; stopping after {trainer.iteration} iterations")
        return []
    return iteration_tasks(pool, affordable, seed, trainer.iteration)


def _evaluated_at(run_dir: Path, step: int, fam: Any, cfg: TrainConfig) -> EvalResult | None:
    """The periodic evaluation this run already wrote at iteration `step`, if the last one was there: the same
    policy on the same tasks, seeds and sampling seed, so evaluating again would repeat it exactly (an ALFWorld
    evaluation of 120 episodes costs ~8 minutes of one core). None when there is none, or it covered other tasks."""
    path = run_dir / "eval.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows or rows[-1].get("step") != step or rows[-1].get("tag") == "start" or \
            rows[-1].get("n", 0) + rows[-1].get("n_failed", 0) != len(_eval_tasks(fam, cfg)) * len(cfg.eval_seeds):
        return None
    names = {f.name for f in dataclasses.fields(EvalResult)} - {"episodes"}
    print(f"[eval final] = [eval {rows[-1]['tag']}], the evaluation at this iteration")
    return EvalResult(**{k: v for k, v in rows[-1].items() if k in names})


def _eval_tasks(fam: Any, cfg: TrainConfig) -> list[Task]:
    tasks = fam.tasks(cfg.eval_split)
    return tasks[: cfg.eval_max_tasks] if cfg.eval_max_tasks else tasks


def _evaluate(backend: Any, fam: Any, cfg: TrainConfig, tag: str, run_dir: Path, step: int,
              logger: MetricsLogger | None) -> Any:
    tasks = _eval_tasks(fam, cfg)
    ecfg = EvalConfig(temperature=cfg.eval_temperature, sample_seed=cfg.seed, agent=cfg.agent, rollout=cfg.rollout)
    res = evaluate_policy(backend, lambda: fam.make_env(cfg.eval_split), tasks, cfg.eval_seeds, ecfg)
    row = {"tag": tag, "step": step, **res.to_dict()}
    with open(run_dir / "eval.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    if logger is not None:
        logger.log(step, {k: v for k, v in res.to_dict().items()}, prefix="eval/")
    print(f"[eval {tag}] {res}")
    return res


def _periodic_evaluation(trainer: Any, fam: Any, cfg: TrainConfig, run_dir: Path, logger: MetricsLogger | None,
                         tag: str) -> Any:
    """Evaluate the trainer's current policy under `tag` (it<N>, dream-it<N>, s2r-it<N>), first keeping it as
    `<run_dir>/<tag>/` when `cfg.keep_evaluated`."""
    if cfg.keep_evaluated:
        trainer.save(run_dir / tag)
    return _evaluate(trainer.backend, fam, cfg, tag, run_dir, trainer.iteration, logger)


def real_tasks(fam: Any, cfg: TrainConfig) -> list[Task]:
    """The train tasks real RL draws from: all of them, those `cfg.real_task_pool`'s trajectories played, or those
    whose latest group in that dream run had mixed outcomes."""
    from dreamgym.curriculum import informative_task_ids
    from dreamgym.data import tasks_played_in

    pool = list(fam.tasks("train"))
    if not cfg.real_task_pool:
        return pool
    src = Path(cfg.real_task_pool)
    if src.is_dir():
        wanted, what = set(informative_task_ids(src / DREAM_VARIANCE_LOG)), "had mixed dream outcomes in"
        kept, n_there = [t for t in pool if t.id in wanted], len(wanted)
    else:
        (kept, n_there), what = tasks_played_in(pool, src), "was played in"
    if not kept:
        raise ConfigError(f"real_task_pool: none of the {len(pool)} {cfg.env} train tasks {what} "
                          f"{cfg.real_task_pool} ({n_there} tasks there)")
    print(f"real_task_pool: {len(kept)} of {len(pool)} train tasks")
    return kept


def train_real(trainer: Any, fam: Any, cfg: TrainConfig, run_dir: Path, logger: MetricsLogger,
               progress: bool = True, pool: Sequence[Task] | None = None) -> None:
    """The online loop: per iteration a seeded task sample, `train_iteration` in the real environment,
    periodic evaluation and checkpoints; stops early when the real-step budget is spent."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    pool = list(pool) if pool is not None else real_tasks(fam, cfg)
    n_tasks = cfg.grpo.tasks_per_iteration if cfg.algo == "grpo" else cfg.ppo.tasks_per_iteration
    env_factory = lambda: fam.make_env("train")  # noqa: E731
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        job = bar.add_task(cfg.algo, total=cfg.iterations, completed=trainer.iteration)
        while trainer.iteration < cfg.iterations:
            tasks = real_iteration_tasks(trainer, pool, n_tasks, cfg.seed)
            if not tasks:
                break
            _, m = trainer.train_iteration(tasks, env_factory)
            bar.update(job, completed=trainer.iteration,
                       description=f"{cfg.algo} success {m['success_rate']:.2f} loss {m.get('loss', 0):.3f}")
            if cfg.save_every and trainer.iteration % cfg.save_every == 0:
                trainer.save(run_dir / "checkpoint")
            if cfg.eval_every and trainer.iteration % cfg.eval_every == 0:
                _periodic_evaluation(trainer, fam, cfg, run_dir, logger, f"it{trainer.iteration}")
            if m.get("budget_exhausted"):
                print(f"real-step budget of {cfg.real_step_budget} used up after {trainer.iteration} iterations")
                break


def demonstrations(fam_name: str, cfg: TrainConfig, run_dir: Path) -> list[Trajectory]:
    """SFT/DPO data: `cfg.data` when given, else collected now with the family's scripted policies."""
    from dreamgym.collect import collect, parse_mix
    from dreamgym.data import load_trajectories

    if cfg.data:
        return load_trajectories(cfg.data)
    mix = cfg.demo_policies or ("expert" if cfg.algo == "sft" else "noisy:0.7,random:0.3")
    out = run_dir / "demos.jsonl"
    collect(fam_name, parse_mix(mix), cfg.demo_episodes, out, split="train", seed=cfg.seed, resume=True)
    return load_trajectories(out)


def train_offline(trainer: Any, data: list[Trajectory], cfg: TrainConfig, run_dir: Path, progress: bool = True) -> dict:
    def on_step(step: int) -> bool:
        if cfg.save_every and step % (cfg.save_every * 10) == 0:
            trainer.save(run_dir / "checkpoint")
        return False

    return trainer.fit(data, progress=progress, on_step=on_step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dreamgym train", description="Train an agent in a real environment.",
                                     epilog="Config fields (key=value):\n" + describe(TrainConfig),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=ALGOS, default=None, help="training algorithm")
    parser.add_argument("--env", default=None, help="environment family")
    parser.add_argument("--config", default=None, help="YAML file with TrainConfig fields")
    parser.add_argument("--resume", action="store_true", help="continue from <run_dir>/checkpoint when it exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. grpo.group_size=8 optim.lr=1e-4")
    args = parser.parse_intermixed_args(argv)
    overrides = list(args.overrides)
    overrides += [f"algo={args.algo}"] if args.algo else []
    overrides += [f"env={args.env}"] if args.env else []
    try:
        cfg = load_config(TrainConfig, args.config, overrides)
        from dreamgym.envs import family

        fam = family(cfg.env)
        pool = real_tasks(fam, cfg) if cfg.real_task_pool else None  # a bad file fails here, at start-up
    except (ConfigError, ValueError, OSError, ImportError) as e:
        print(f"dreamgym train: {e}", file=sys.stderr)
        return 2
    run_dir = cfg.resolved_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    import yaml

    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    logger = MetricsLogger(run_dir, tensorboard=cfg.tensorboard)
    t0 = time.time()
    try:
        backend = build_backend(cfg, cfg.init)
        trainer = build_trainer(cfg.algo, backend, cfg, logger=logger,
                                admissible_fn=getattr(fam, "admissible_from_state", None))
        if args.resume and (run_dir / "checkpoint" / "trainer_state.json").is_file():
            trainer.load(run_dir / "checkpoint")
            print(f"resumed from {run_dir / 'checkpoint'} at iteration {trainer.iteration}, step {trainer.global_step}")
        before = _evaluate(backend, fam, cfg, "start", run_dir, trainer.iteration, logger) \
            if cfg.eval_at_start and trainer.iteration == 0 and trainer.global_step == 0 else None
        if cfg.algo in ("grpo", "ppo") and cfg.mode == "real":
            train_real(trainer, fam, cfg, run_dir, logger, progress=not args.no_progress, pool=pool)
        elif cfg.algo in ("grpo", "ppo"):
            n_tasks = cfg.grpo.tasks_per_iteration if cfg.algo == "grpo" else cfg.ppo.tasks_per_iteration
            evaluate = lambda tag, step: _periodic_evaluation(trainer, fam, cfg, run_dir, logger, tag)  # noqa: E731
            world = DreamWorld(cfg.env, cfg.dream, run_dir, cfg.seed)
            train_dream(trainer, world, iterations=cfg.dream.iterations, tasks_per_iteration=n_tasks,
                        algo=cfg.algo, run_dir=run_dir, logger=logger, evaluate=evaluate,
                        eval_every=cfg.eval_every, save_every=cfg.save_every, progress=not args.no_progress)
            if cfg.mode == "s2r":
                train_s2r_real(trainer, fam, iterations=cfg.dream.s2r_iterations, tasks_per_iteration=n_tasks,
                               seed=cfg.seed, evaluate=evaluate, eval_every=cfg.eval_every,
                               progress=not args.no_progress, pool=s2r_task_pool(fam, run_dir, n_tasks))
        else:
            train_offline(trainer, demonstrations(cfg.env, cfg, run_dir), cfg, run_dir, progress=not args.no_progress)
        trainer.save(run_dir / "checkpoint")
        trainer.save(run_dir / "final")
        after = _evaluated_at(run_dir, trainer.iteration, fam, cfg) or \
            _evaluate(backend, fam, cfg, "final", run_dir, trainer.iteration, logger)
    finally:
        logger.close()
    summary = {"algo": cfg.algo, "env": cfg.env, "run_dir": str(run_dir), "wall_time_s": time.time() - t0,
               "real_steps_used": trainer.budget.used, "iterations": trainer.iteration,
               "optimizer_steps": trainer.global_step, "final": after.to_dict(),
               "start": before.to_dict() if before is not None else None, "machine": machine_info()}
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k not in ("final", "start", "machine")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
