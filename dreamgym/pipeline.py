"""DreamGym end to end: RL inside the experience model (dream), sim-to-real (s2r), and the quickstart recipe.

Owns: `DreamConfig` (the `dream.*` fields of `dreamgym train`), `train_dream` (the paper's loop: curriculum tasks
→ agent rollouts inside `SyntheticEnv` → GRPO/PPO update → the buffer grows with the synthetic transitions →
curriculum step), `train_s2r_real` (the real phase of S2R under a hard real-step budget), the accounting of
every real transition a method used, and `quickstart_main` (collect → train the experience model → SFT → dream
GRPO → S2R → compare with SFT and real GRPO at the same budget).
Must not know: trainers' internals (only `train_iteration`/`save`/`load`), concrete environments (families are
reached through `dreamgym.envs.family`), how the experience model formats prompts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.config import ConfigError, describe, load_config, to_dict
from dreamgym.curriculum import Curriculum, CurriculumConfig, cluster_groups
from dreamgym.metrics import MetricsLogger
from dreamgym.paths import atomic_write_text
from dreamgym.types import Task


@dataclass
class DreamConfig:
    em: str = ""
    """Experience-model checkpoint directory (from `dreamgym train-em`); required for mode=dream and mode=s2r."""
    em_data: str = ""
    """Offline real trajectories that seed the replay buffer (default: the experience model's training data)."""
    iterations: int = 20
    """RL iterations inside the synthetic environment."""
    s2r_iterations: int = 10
    """mode=s2r: most real-environment iterations after the dream phase (the real-step budget may end it first)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Curriculum task generator (curriculum.enabled=false is the no-task-generation ablation)."""
    max_steps: int = 0
    """Step limit of a synthetic episode (0: the real environment's own limit)."""
    initial_state: str = "auto"
    """Where synthetic episodes start: 'auto' (the real env's initial state when it can reset to the task,
    else the model's), 'real' or 'model'."""
    clusters: int = 8
    """PPO has one rollout per task: the curriculum groups tasks into this many embedding clusters."""
    em_overrides: dict[str, Any] = field(default_factory=dict)
    """Experience-model config overrides at load time, e.g. {use_retrieval: false} (the no-replay ablation)."""

    def validate(self) -> None:
        if self.initial_state not in ("auto", "real", "model"):
            raise ConfigError(f"dream.initial_state: {self.initial_state!r} is not auto, real or model")
        if self.iterations < 0 or self.s2r_iterations < 0:
            raise ConfigError("dream.iterations and dream.s2r_iterations must be >= 0")


def count_real_transitions(paths: Sequence[str | Path]) -> int:
    """Real environment steps stored in trajectory files (how the paper reports a method's "real data")."""
    from dreamgym.data import load_trajectories

    seen: set[str] = set()
    n = 0
    for p in paths:
        if not p or str(p) in seen:
            continue
        seen.add(str(p))
        n += sum(len(t.steps) for t in load_trajectories(p) if t.source == "real")
    return n


def _rewards_by_task(episodes: Sequence[Any]) -> tuple[dict[str, list[float]], dict[str, Task]]:
    rewards: dict[str, list[float]] = defaultdict(list)
    tasks: dict[str, Task] = {}
    for e in episodes:
        if e.trainable:
            rewards[e.task.id].append(float(e.reward))
            tasks[e.task.id] = e.task
    return dict(rewards), tasks


class DreamWorld:
    """The synthetic side of a run: the experience model, its co-evolving replay buffer, the curriculum and a
    `SyntheticEnv` factory. Built once per run; the trainer only ever sees `env_factory`."""

    def __init__(self, env_name: str, dream: DreamConfig, run_dir: Path, seed: int, device: str | None = None):
        from dreamgym.envs import family
        from dreamgym.experience_model import ExperienceModel, checkpoint_buffer

        if not dream.em:
            raise ConfigError("dream.em: mode=dream/s2r needs an experience-model checkpoint (dreamgym train-em)")
        self.family_name = env_name
        self.family = family(env_name)
        self.config = dream
        self.buffer = checkpoint_buffer(dream.em, data=dream.em_data or None, path=run_dir / "buffer")
        self.model = ExperienceModel.load(dream.em, buffer=self.buffer, device=device,
                                          config_overrides=dict(dream.em_overrides))
        self.base_tasks = list(self.family.tasks("train"))
        # M_task shares M_exp's parameters: the curriculum talks to the very same LLM backend.
        self.curriculum = Curriculum(self.base_tasks, self.family.parse_goal, self.model.llm, dream.curriculum,
                                     seed=seed, log_path=run_dir / "curriculum.jsonl")
        self.policy_version = ""

    def env_factory(self) -> Callable[[], Any]:
        from dreamgym.synthetic_env import SyntheticEnv

        def make() -> Any:
            return SyntheticEnv(self.model, self.buffer, tasks=self.base_tasks, env=self.family_name,
                                max_steps=self.config.max_steps or None, initial_state=self.config.initial_state,
                                policy_version=self.policy_version)
        return make

    def curriculum_step(self, iteration: int, episodes: Sequence[Any], algo: str) -> dict[str, float]:
        rewards, tasks = _rewards_by_task(episodes)
        if algo == "ppo" and rewards:
            # One rollout per task: V_τ over an embedding cluster of similar tasks (DESIGN §1).
            ids = list(rewards)
            emb = self.buffer.embedder.encode([tasks[i].instruction for i in ids])
            rewards = cluster_groups(ids, [rewards[i][0] for i in ids], emb, self.config.clusters, seed=iteration)
        return self.curriculum.update(iteration, rewards, tasks)

    def state_dict(self) -> dict[str, Any]:
        return {"generated": [t.to_dict() for t in self.curriculum.generated],
                "stats": dataclasses.asdict(self.curriculum.stats), "rng": self.curriculum.rng.getstate()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        from dreamgym.curriculum import CurriculumStats

        self.curriculum.generated = [Task.from_dict(t) for t in d["generated"]]
        self.curriculum.stats = CurriculumStats(**d["stats"])
        rng = d["rng"]
        self.curriculum.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
        self.curriculum._known |= {t.instruction.strip().lower() for t in self.curriculum.generated}


def train_dream(trainer: Any, world: DreamWorld, *, iterations: int, tasks_per_iteration: int, algo: str,
                run_dir: Path, logger: MetricsLogger | None, evaluate: Callable[[str, int], Any] | None = None,
                eval_every: int = 0, save_every: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """RL inside the experience model for `iterations` iterations (counted by `trainer.iteration`, so a resumed
    trainer continues where it stopped). Zero real steps: the trainer's real-step budget is untouched."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    history = []
    state_file = run_dir / "checkpoint" / "dream_state.json"
    if trainer.iteration and state_file.is_file():
        world.load_state_dict(json.loads(state_file.read_text()))
    factory = world.env_factory()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        job = bar.add_task(f"dream {algo}", total=iterations, completed=trainer.iteration)
        while trainer.iteration < iterations:
            world.policy_version = trainer.policy_version()
            tasks = world.curriculum.sample(tasks_per_iteration)
            episodes, m = trainer.train_iteration(tasks, factory)
            cm = world.curriculum_step(trainer.iteration - 1, episodes, algo)
            em_stats = {f"em/{k}": float(v) for k, v in world.model.stats.items()}
            row = {**m, **cm, **em_stats, "buffer/size": float(len(world.buffer))}
            if logger is not None:
                logger.log(trainer.iteration, {**cm, **em_stats, "buffer/size": row["buffer/size"]}, prefix="dream/")
            history.append(row)
            bar.update(job, completed=trainer.iteration,
                       description=f"dream {algo} synthetic success {m['success_rate']:.2f}")
            if save_every and trainer.iteration % save_every == 0:
                trainer.save(run_dir / "checkpoint")
                atomic_write_text(state_file, json.dumps(world.state_dict()))
            if evaluate is not None and eval_every and trainer.iteration % eval_every == 0:
                evaluate(f"dream-it{trainer.iteration}", trainer.iteration)
    return history


def train_s2r_real(trainer: Any, fam: Any, *, iterations: int, tasks_per_iteration: int, seed: int,
                   evaluate: Callable[[str, int], Any] | None = None, eval_every: int = 0,
                   progress: bool = True) -> list[dict[str, Any]]:
    """The real phase of S2R: continue RL in the real environment until `iterations` more iterations ran or the
    trainer's real-step budget (a hard cap enforced by the rollout engine) is spent."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dreamgym.train import iteration_tasks

    pool = fam.tasks("train")
    start = trainer.iteration
    history = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        job = bar.add_task("s2r real", total=iterations)
        while trainer.iteration - start < iterations and not trainer.budget.exhausted:
            tasks = iteration_tasks(pool, tasks_per_iteration, seed, trainer.iteration)
            _, m = trainer.train_iteration(tasks, lambda: fam.make_env("train"))
            history.append(m)
            bar.update(job, completed=trainer.iteration - start,
                       description=f"s2r real success {m['success_rate']:.2f} real steps {trainer.budget.used}")
            if evaluate is not None and eval_every and (trainer.iteration - start) % eval_every == 0:
                evaluate(f"s2r-it{trainer.iteration}", trainer.iteration)
    return history


# ------------------------------------------------------------------------------------------------ quickstart
@dataclass
class QuickstartConfig:
    """`dreamgym quickstart`: the whole recipe on one environment with the tiny preset, sized for 2 CPU cores."""

    env: str = "webshop"
    """Environment family."""
    run_dir: str = "runs/quickstart"
    """Where every artefact goes (offline data, experience model, policies, report.md)."""
    seed: int = 0
    """One seed for the whole recipe."""
    offline_episodes: int = 800
    """Offline real trajectories collected first (the only real data DreamGym itself uses)."""
    offline_mix: str = "oracle:0.4,noisy:0.4,random:0.2"
    """Scripted-policy mix of the offline data."""
    sft_policy: str = "oracle"
    """Which offline trajectories are the SFT demonstrations (won episodes of this policy)."""
    em_epochs: int = 3
    """Experience-model SFT epochs."""
    sft_epochs: int = 3
    """Policy SFT epochs on the demonstrations."""
    dream_iterations: int = 6
    """GRPO iterations inside the experience model."""
    budget: int = 400
    """Real-step budget B of real GRPO; S2R uses the same B here (the quickstart compares at equal budget)."""
    s2r_iterations: int = 4
    """Most real iterations of S2R and of real GRPO (the budget may stop them first)."""
    eval_tasks: int = 100
    """Held-out real test tasks used for every evaluation."""
    group_size: int = 4
    """GRPO group size G."""
    tasks_per_iteration: int = 8
    """Tasks per GRPO iteration."""
    lr: float = 1e-4
    """Policy learning rate for GRPO."""

    def validate(self) -> None:
        if self.offline_episodes < 10:
            raise ConfigError("offline_episodes: need at least 10 offline episodes")


def _em_config(q: QuickstartConfig, data: Path, out: Path) -> Any:
    from dreamgym.experience_model import TrainEMConfig

    return load_config(TrainEMConfig, None, [f"env={q.env}", f"data={data}", "preset=tiny", f"out={out}",
                                             f"epochs={q.em_epochs}", f"seed={q.seed}"])


def quickstart(q: QuickstartConfig, progress: bool = True) -> dict[str, Any]:
    from dreamgym import experience_model
    from dreamgym.collect import collect, parse_mix
    from dreamgym.data import load_trajectories, write_jsonl
    from dreamgym.envs import family
    from dreamgym.evaluate import EvalConfig, evaluate_policy
    from dreamgym.rollout import RealStepBudget
    from dreamgym.train import TrainConfig, build_backend, build_trainer

    t_start = time.time()
    run = Path(q.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    fam = family(q.env)
    timings: dict[str, float] = {}

    def stage(name: str) -> Callable[[], None]:
        t0 = time.time()
        print(f"\n== {name}", flush=True)
        return lambda: timings.__setitem__(name, time.time() - t0)

    # 1. Offline real data.
    done = stage("collect offline real trajectories")
    offline = run / "offline.jsonl"
    collect(q.env, parse_mix(q.offline_mix), q.offline_episodes, offline, split="train", seed=q.seed, resume=True)
    trajs = load_trajectories(offline)
    demos = [t for t in trajs if t.policy == q.sft_policy and t.won]
    write_jsonl(run / "demos.jsonl", demos)
    real_offline = sum(len(t.steps) for t in trajs)
    real_demos = sum(len(t.steps) for t in demos)
    done()

    # 2. Experience model.
    done = stage("train the reasoning experience model (tiny, from scratch)")
    em_dir = run / "em"
    if not (em_dir / experience_model.EM_CONFIG_FILE).is_file():
        experience_model.train(_em_config(q, offline, em_dir))
    done()

    base = TrainConfig(env=q.env, seed=q.seed)
    base = dataclasses.replace(base, grpo=dataclasses.replace(base.grpo, group_size=q.group_size,
                                                              tasks_per_iteration=q.tasks_per_iteration),
                               optim=dataclasses.replace(base.optim, lr=q.lr), tensorboard=False)
    test_tasks = fam.tasks("test")[: q.eval_tasks]
    ecfg = EvalConfig(temperature=0.0, sample_seed=q.seed, agent=base.agent, rollout=base.rollout)
    results: dict[str, dict[str, Any]] = {}

    def evaluate(name: str, backend: Any, real_steps: int, wall: float) -> None:
        res = evaluate_policy(backend, lambda: fam.make_env("test"), test_tasks, [q.seed], ecfg)
        results[name] = {**res.to_dict(), "real_steps": real_steps, "wall_time_s": wall}
        print(f"[{name}] {res}", flush=True)

    # 3. SFT baseline (the start of every RL method below).
    done = stage("SFT policy on oracle demonstrations")
    t0 = time.time()
    sft_cfg = dataclasses.replace(base, algo="sft", sft=dataclasses.replace(base.sft, epochs=q.sft_epochs),
                                  optim=dataclasses.replace(base.optim, lr=1e-3))
    backend = build_backend(sft_cfg)
    logger = MetricsLogger(run / "sft", tensorboard=False)
    sft = build_trainer("sft", backend, sft_cfg, logger=logger, admissible_fn=fam.admissible_from_state)
    sft.fit(demos, progress=progress)
    sft.save(run / "sft" / "final")
    logger.close()
    evaluate("SFT", backend, real_demos, time.time() - t0)
    done()

    def rl_trainer(name: str, budget: int | None) -> tuple[Any, MetricsLogger]:
        cfg = dataclasses.replace(base, algo="grpo", init=str(run / "sft" / "final"), real_step_budget=budget)
        lg = MetricsLogger(run / name, tensorboard=False)
        return build_trainer("grpo", build_backend(cfg, cfg.init), cfg, logger=lg,
                             budget=RealStepBudget(budget)), lg

    # 4. DreamGym: GRPO purely inside the experience model.
    done = stage("DreamGym: GRPO inside the experience model (0 real steps)")
    t0 = time.time()
    trainer, lg = rl_trainer("dream", 0)
    world = DreamWorld(q.env, DreamConfig(em=str(em_dir), em_data=str(offline)), run / "dream", q.seed)
    train_dream(trainer, world, iterations=q.dream_iterations, tasks_per_iteration=q.tasks_per_iteration,
                algo="grpo", run_dir=run / "dream", logger=lg, progress=progress)
    trainer.save(run / "dream" / "final")
    evaluate("DreamGym GRPO", trainer.backend, trainer.budget.used, time.time() - t0)
    dream_wall = time.time() - t0
    done()

    # 5. S2R: the dream policy continues in the real environment under budget B.
    done = stage(f"DreamGym-S2R: real GRPO from the dream policy, budget {q.budget} real steps")
    t0 = time.time()
    trainer.budget = RealStepBudget(q.budget)
    train_s2r_real(trainer, fam, iterations=q.s2r_iterations, tasks_per_iteration=q.tasks_per_iteration,
                   seed=q.seed, progress=progress)
    lg.close()
    evaluate("DreamGym-S2R GRPO", trainer.backend, trainer.budget.used, dream_wall + time.time() - t0)
    done()

    # 6. Real GRPO from the same SFT policy with the same budget.
    done = stage(f"real GRPO from SFT, budget {q.budget} real steps")
    t0 = time.time()
    real, lg = rl_trainer("real", q.budget)
    train_s2r_real(real, fam, iterations=q.s2r_iterations, tasks_per_iteration=q.tasks_per_iteration,
                   seed=q.seed, progress=progress)
    lg.close()
    evaluate("GRPO real", real.backend, real.budget.used, time.time() - t0)
    done()

    # Real data per method, the way the paper reports it: SFT uses the demonstrations; every RL method starts
    # from SFT; DreamGym methods also used the offline data that trained the experience model.
    results["SFT"]["real_data"] = real_demos
    results["GRPO real"]["real_data"] = real_demos + results["GRPO real"]["real_steps"]
    results["DreamGym GRPO"]["real_data"] = real_offline
    results["DreamGym-S2R GRPO"]["real_data"] = real_offline + results["DreamGym-S2R GRPO"]["real_steps"]
    summary = {"env": q.env, "config": to_dict(q), "results": results, "timings_s": timings,
               "total_wall_time_s": time.time() - t_start, "offline_real_transitions": real_offline,
               "experience_model": {k: float(v) for k, v in world.model.stats.items()},
               "curriculum": dataclasses.asdict(world.curriculum.stats) | {"valid_share": world.curriculum.stats.valid_share}}
    atomic_write_text(run / "summary.json", json.dumps(summary, indent=1))
    report = render_table(results, title=f"DreamGym quickstart — {q.env}, tiny preset, {len(test_tasks)} held-out test tasks")
    atomic_write_text(run / "report.md", report + f"\nTotal wall time: {summary['total_wall_time_s']:.0f} s\n")
    print("\n" + report)
    return summary


def render_table(results: dict[str, dict[str, Any]], title: str) -> str:
    """A Markdown table: method, real data, success with its 95% interval, mean reward, mean steps, wall time."""
    lines = [f"### {title}", "",
             "| method | real data (transitions) | success % [95% CI] | mean reward | mean steps | wall time (s) |",
             "|---|---:|---|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r.get('real_data', r.get('real_steps', 0))} | "
                     f"{100 * r['success_rate']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] | "
                     f"{r['mean_reward']:.3f} | {r['mean_steps']:.2f} | {r.get('wall_time_s', 0):.0f} |")
    return "\n".join(lines) + "\n"


def quickstart_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dreamgym quickstart",
                                     description="The full DreamGym recipe on one environment (tiny preset).",
                                     epilog="Config fields (key=value):\n" + describe(QuickstartConfig),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="YAML file with QuickstartConfig fields")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", help="e.g. env=dial dream_iterations=10")
    args = parser.parse_args(argv)
    try:
        q = load_config(QuickstartConfig, args.config, args.overrides)
    except (ConfigError, OSError) as e:
        print(f"dreamgym quickstart: {e}", file=sys.stderr)
        return 2
    quickstart(q, progress=not args.no_progress)
    return 0
