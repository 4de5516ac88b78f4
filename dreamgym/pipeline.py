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
from dreamgym.metrics import MetricsLogger, describe_machine, machine_info, pin_threads
from dreamgym.paths import atomic_write_text
from dreamgym.types import Task

DREAM_STATE_FILE = "dream_state.json"
"""The curriculum's state (generated tasks, counters, RNG) at the checkpoint's iteration, in the run folder."""
DREAM_VARIANCE_LOG = "curriculum.jsonl"
"""The curriculum's log in the run folder: per iteration, its stats, new tasks and each task's reward variance."""


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
    reward_from: str = "auto"
    """Where a synthetic step's reward and end come from: 'model' (the experience model's `<reward>` and done, the
    paper's design), 'state' (the family's own reward rule on the states the model wrote, `grounded_outcome`) or
    'auto' ('state' for families that have one, ALFWorld and WebShop, else 'model'). Why: ALFWorld's model
    credited wins that its own final state contradicted (README, section 5)."""
    shared_noise: bool = True
    """With a sampled experience model, the members of a GRPO group (same task and reset seed) draw the model's
    sampling noise from (episode, action), so the same action meets the same sampled world in each of them, as
    the real group shares one game (`SyntheticEnv.shared_noise`). false: independent noise per member."""
    task_pool: str = "all"
    """The dream's base tasks: 'all' (every train task of the family), 'data' (only the train tasks the
    offline real data played, whose outcomes the replay buffer holds) or a trajectory file (JSONL/Parquet: the
    train tasks its episodes played, e.g. a fixed set that real RL also trains on with `real_task_pool`). Why
    'data': on ALFWorld the model can copy a game's receptacle contents only from that game's real steps; on the
    other games every content is a guess (README, section 9). Curriculum variants are added to any pool."""
    em_overrides: dict[str, Any] = field(default_factory=dict)
    """Experience-model config overrides at load time, e.g. {use_retrieval: false} (the no-replay ablation)."""

    def validate(self) -> None:
        if self.initial_state not in ("auto", "real", "model"):
            raise ConfigError(f"dream.initial_state: {self.initial_state!r} is not auto, real or model")
        if self.reward_from not in ("auto", "model", "state"):
            raise ConfigError(f"dream.reward_from: {self.reward_from!r} is not auto, model or state")
        if self.task_pool not in ("all", "data") and not Path(self.task_pool).is_file():
            raise ConfigError(f"dream.task_pool: {self.task_pool!r} is not all, data or a trajectory file")
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


def dream_tasks(train_tasks: list[Task], buffer: Any, env_name: str, pool: str) -> list[Task]:
    """The dream's base task pool (`DreamConfig.task_pool`): all train tasks, those with real data in `buffer`, or
    those a trajectory file played."""
    from dreamgym.data import tasks_played_in

    if pool == "all":
        return train_tasks
    if pool == "data":
        played = {tr.task.id for tr in buffer.transitions(env=env_name, real_only=True)}
        tasks, n_there = [t for t in train_tasks if t.id in played], len(played)
        where = "has real data in the replay buffer"
    else:
        (tasks, n_there), where = tasks_played_in(train_tasks, pool), f"was played in {pool}"
    if not tasks:
        raise ConfigError(f"dream.task_pool={pool}: none of the {len(train_tasks)} {env_name} train tasks "
                          f"{where} ({n_there} tasks there)")
    return tasks


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
        self.base_tasks = dream_tasks(list(self.family.tasks("train")), self.buffer, env_name, dream.task_pool)
        # M_task shares M_exp's parameters: the curriculum talks to the very same LLM backend.
        self.curriculum = Curriculum(self.base_tasks, self.family.parse_goal, self.model.llm, dream.curriculum,
                                     seed=seed, log_path=run_dir / DREAM_VARIANCE_LOG)
        self.policy_version = ""

    def env_factory(self) -> Callable[[], Any]:
        from dreamgym.synthetic_env import SyntheticEnv

        def make() -> Any:
            return SyntheticEnv(self.model, self.buffer, tasks=self.base_tasks, env=self.family_name,
                                max_steps=self.config.max_steps or None, initial_state=self.config.initial_state,
                                policy_version=self.policy_version, reward_from=self.config.reward_from,
                                shared_noise=self.config.shared_noise)
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
    # Beside the checkpoint, not inside it: `trainer.save` replaces the whole checkpoint folder, and the end-of-run
    # save did, so a finished run's curriculum state was lost and `--resume` restarted the curriculum from scratch.
    state_file = run_dir / DREAM_STATE_FILE
    if trainer.iteration and state_file.is_file():
        state = json.loads(state_file.read_text())
        if state.get("iteration") != trainer.iteration:
            print(f"warning: {state_file} is from iteration {state.get('iteration')}, the checkpoint from "
                  f"{trainer.iteration}; the curriculum continues from the older state")
        world.load_state_dict(state)

    def save_state() -> None:
        atomic_write_text(state_file, json.dumps({"iteration": trainer.iteration, **world.state_dict()}))
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
                save_state()
            if evaluate is not None and eval_every and trainer.iteration % eval_every == 0:
                evaluate(f"dream-it{trainer.iteration}", trainer.iteration)
    if history:
        # Only the state: `dreamgym train` saves the checkpoint of this last iteration right after, so saving the
        # weights here as well would write them twice when the iteration is not a multiple of save_every.
        save_state()
    return history


def s2r_task_pool(fam: Any, dream_dir: str | Path, tasks_per_iteration: int) -> list[Task]:
    """The real train tasks the real phase of S2R draws from: those whose latest group in the dream run at
    `dream_dir` had mixed outcomes (`curriculum.informative_task_ids`). A group whose rewards are all equal has zero
    GRPO advantage, so a small real budget spent on it trains nothing (ALFWorld, README section 18: uniform draws gave
    0 of 7 mixed groups, this pool 5 of 8). All train tasks when the dream run has no log or fewer such tasks than
    one iteration draws, so the phase never narrows to a handful of tasks by accident."""
    from dreamgym.curriculum import informative_task_ids

    pool = list(fam.tasks("train"))
    log = Path(dream_dir) / DREAM_VARIANCE_LOG
    wanted = set(informative_task_ids(log)) if log.is_file() else set()
    kept = [t for t in pool if t.id in wanted]
    if len(kept) < tasks_per_iteration:
        print(f"s2r: {len(kept)} train tasks had mixed dream outcomes (< {tasks_per_iteration} per iteration); "
              f"drawing from all {len(pool)}")
        return pool
    print(f"s2r: drawing from the {len(kept)} of {len(pool)} train tasks with mixed dream outcomes")
    return kept


def train_s2r_real(trainer: Any, fam: Any, *, iterations: int, tasks_per_iteration: int, seed: int,
                   evaluate: Callable[[str, int], Any] | None = None, eval_every: int = 0,
                   progress: bool = True, pool: Sequence[Task] | None = None) -> list[dict[str, Any]]:
    """The real phase of S2R: continue RL in the real environment until `iterations` more iterations ran or the
    trainer's real-step budget (a hard cap enforced by the rollout engine) is spent. Tasks are drawn from `pool`
    (`s2r_task_pool` after a dream phase), all train tasks when None."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dreamgym.train import real_iteration_tasks

    pool = list(pool) if pool is not None else fam.tasks("train")
    start = trainer.iteration
    history = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        job = bar.add_task("s2r real", total=iterations)
        while trainer.iteration - start < iterations and not trainer.budget.exhausted:
            tasks = real_iteration_tasks(trainer, pool, tasks_per_iteration, seed)
            if not tasks:  # the rest of the budget cannot finish one group: spending it would train nothing
                break
            _, m = trainer.train_iteration(tasks, lambda: fam.make_env("train"))
            history.append(m)
            bar.update(job, completed=trainer.iteration - start,
                       description=f"s2r real success {m['success_rate']:.2f} real steps {trainer.budget.used}")
            if evaluate is not None and eval_every and (trainer.iteration - start) % eval_every == 0:
                evaluate(f"s2r-it{trainer.iteration}", trainer.iteration)
    return history


# ------------------------------------------------------------------------------------------------ recipe
ENV_DEFAULTS: dict[str, dict[str, list[str]]] = {
    # The dial is Markov and its state lists its buttons: no history, no admissible list, ~8-token replies keep
    # the tiny policy's prompts short (the trainers' learning tests use the same settings).
    "dial": {"train": ["agent.history=0", "agent.show_admissible=false", "agent.system_prompt=You are an agent.",
                       "rollout.max_new_tokens=10", "rollout.max_turns=12"],
             "em": ["model.embedder=hashing"]},
    # Page states are long: the hashing embedder keeps buffer seeding and retrieval cheap on CPU.
    "webshop": {"train": ["rollout.max_new_tokens=48"], "em": ["model.embedder=hashing"]},
    # The experience model writes the observation only and the state is derived (README section 7: whole-state
    # agreement 0.01 -> 0.50 on held-out steps).
    "alfworld": {"train": ["rollout.max_new_tokens=32", "rollout.max_turns=50"],
                 "em": ["model.embedder=hashing", "model.write_observation=true"]},
}
"""Settings each environment's small-scale runs start from (before the caller's own overrides)."""

class Recipe:
    """The artefacts one environment's comparison shares, built once each and reused from disk: offline real
    data, the SFT demonstrations, experience models (full and ablated), the SFT policy every RL method starts
    from, and `run_method` which trains and evaluates one row of the results table.

    Every evaluation runs the policy greedily on the same held-out real test tasks; `results[name]` records
    success with its Wilson 95% interval, mean reward and steps, the real steps the method itself took, its real
    data in the paper's sense (see `real_data`), wall time and the learning curve."""

    def __init__(self, env: str, run_dir: str | Path, *, seed: int = 0, eval_tasks: int = 100,
                 eval_seeds: Sequence[int] = (0,), eval_temperature: float = 0.0, progress: bool = True,
                 train_overrides: Sequence[str] = (), em_overrides: Sequence[str] = (), threads: int = 2):
        from dreamgym.envs import family
        from dreamgym.train import TrainConfig

        # One thread count for every stage, set here and given to the experience model, whose training used to set
        # it as a side effect: a resumed recipe (experience model on disk) then ran SFT at the torch default and a
        # fresh one at the model's 2, and the dial's SFT lands at 31.1% or 9.4% by that alone (README section 1).
        # numpy's BLAS (retrieval scores) too, which otherwise follows OPENBLAS_NUM_THREADS / OMP_NUM_THREADS.
        self.threads = threads
        pin_threads(threads)
        self.env, self.run, self.seed, self.progress = env, Path(run_dir), seed, progress
        self.run.mkdir(parents=True, exist_ok=True)
        self.family = family(env)
        self.test_tasks = list(self.family.tasks("test"))[:eval_tasks]
        self.eval_seeds, self.eval_temperature = list(eval_seeds), eval_temperature
        # Per-environment defaults first (ENV_DEFAULTS), then the caller's overrides, all validated at once.
        self.base = load_config(TrainConfig, None, [f"env={env}", f"seed={seed}", "tensorboard=false",
                                                    *ENV_DEFAULTS.get(env, {}).get("train", []), *train_overrides])
        self.em_overrides = [f"threads={threads}", *ENV_DEFAULTS.get(env, {}).get("em", []), *em_overrides]
        self.results: dict[str, dict[str, Any]] = {}
        self.timings: dict[str, float] = {}
        self.offline_path = self.run / "offline.jsonl"
        self.demos_path = self.run / "demos.jsonl"
        self.real_offline = self.real_demos = 0

    def stage(self, name: str) -> Callable[[], None]:
        t0 = time.time()
        print(f"\n== {name}", flush=True)
        return lambda: self.timings.__setitem__(name, time.time() - t0)

    # -- shared artefacts -----------------------------------------------------------------------------
    def collect_offline(self, episodes: int, mix: str, sft_policy: str) -> None:
        from dreamgym.collect import collect, parse_mix
        from dreamgym.data import load_trajectories, write_jsonl

        done = self.stage(f"collect {episodes} offline real trajectories ({mix})")
        collect(self.env, parse_mix(mix), episodes, self.offline_path, split="train", seed=self.seed, resume=True,
                progress=self.progress)
        trajs = load_trajectories(self.offline_path)
        demos = [t for t in trajs if t.policy == sft_policy and t.won]
        write_jsonl(self.demos_path, demos)
        self.real_offline = sum(len(t.steps) for t in trajs)
        self.real_demos = sum(len(t.steps) for t in demos)
        done()

    def experience_model(self, name: str = "em", epochs: float = 3, overrides: Sequence[str] = ()) -> Path:
        from dreamgym import experience_model

        out = self.run / name
        if not (out / experience_model.EM_CONFIG_FILE).is_file():
            done = self.stage(f"train the experience model {name} (tiny, from scratch)")
            cfg = load_config(experience_model.TrainEMConfig, None,
                              [f"env={self.env}", f"data={self.offline_path}", "preset=tiny", f"out={out}",
                               f"epochs={epochs}", f"seed={self.seed}", *self.em_overrides, *overrides])
            experience_model.train(cfg)
            done()
        return out

    def evaluate(self, backend: Any) -> Any:
        from dreamgym.evaluate import EvalConfig, evaluate_policy

        ecfg = EvalConfig(temperature=self.eval_temperature, sample_seed=self.seed, agent=self.base.agent,
                          rollout=self.base.rollout)
        return evaluate_policy(backend, lambda: self.family.make_env("test"), self.test_tasks, self.eval_seeds, ecfg)

    def record(self, name: str, res: Any, *, real_steps: int, real_data: int, wall: float,
               curve: list[tuple[int, float]] | None = None) -> None:
        self.results[name] = {**res.to_dict(), "real_steps": real_steps, "real_data": real_data,
                              "wall_time_s": wall, "curve": curve or []}
        print(f"[{name}] {res}", flush=True)

    def sft(self, epochs: int = 3, lr: float = 1e-3, batch_size: int | None = None) -> Path:
        """The SFT baseline on the oracle demonstrations; every RL method starts from it."""
        from dreamgym.train import build_backend, build_trainer

        out = self.run / "sft" / "final"
        done = self.stage("SFT policy on the demonstrations")
        t0 = time.time()
        sft_cfg = dataclasses.replace(self.base.sft, epochs=epochs, batch_size=batch_size or self.base.sft.batch_size)
        cfg = dataclasses.replace(self.base, algo="sft", sft=sft_cfg,
                                  optim=dataclasses.replace(self.base.optim, lr=lr))
        if (out / "trainer_state.json").is_file():
            backend = build_backend(cfg, str(out))
        else:
            from dreamgym.data import load_trajectories

            backend = build_backend(cfg)
            lg = MetricsLogger(self.run / "sft", tensorboard=False)
            trainer = build_trainer("sft", backend, cfg, logger=lg, admissible_fn=self.family.admissible_from_state)
            trainer.fit(load_trajectories(self.demos_path), progress=self.progress)
            trainer.save(out)
            lg.close()
        self.record("SFT", self.evaluate(backend), real_steps=0, real_data=self.real_demos, wall=time.time() - t0)
        done()
        return out

    def dpo(self, epochs: int = 2, lr: float = 1e-4) -> None:
        """DPO from the SFT policy on (won, failed) pairs of the same task from the offline data."""
        from dreamgym.data import load_trajectories
        from dreamgym.train import build_backend, build_trainer

        done = self.stage("DPO from SFT on success/failure pairs")
        t0 = time.time()
        cfg = dataclasses.replace(self.base, algo="dpo", init=str(self.run / "sft" / "final"),
                                  dpo=dataclasses.replace(self.base.dpo, epochs=epochs),
                                  optim=dataclasses.replace(self.base.optim, lr=lr))
        backend = build_backend(cfg, cfg.init)
        lg = MetricsLogger(self.run / "dpo", tensorboard=False)
        trainer = build_trainer("dpo", backend, cfg, logger=lg, admissible_fn=self.family.admissible_from_state)
        trainer.fit(load_trajectories(self.offline_path), progress=self.progress)
        lg.close()
        self.record("DPO", self.evaluate(backend), real_steps=0, real_data=self.real_offline, wall=time.time() - t0)
        done()

    # -- one RL row -----------------------------------------------------------------------------------
    def run_method(self, name: str, *, algo: str, mode: str, budget: int = 0, dream_iterations: int = 0,
                   real_iterations: int = 0, em: Path | None = None, dream: DreamConfig | None = None,
                   tasks_per_iteration: int = 8, group_size: int = 4, lr: float = 1e-4, eval_every: int = 0,
                   from_method: str | None = None) -> Any:
        """Train `algo` in `mode` (real | dream | s2r) and evaluate it. It starts from the SFT policy, or from
        the final policy of the earlier row `from_method` (whose real data and wall time it then inherits: S2R
        continuing a dream run). Real phases stop at `real_iterations` or when the hard real-step `budget` is
        spent, whichever comes first."""
        from dreamgym.rollout import RealStepBudget
        from dreamgym.train import build_backend, build_trainer

        done = self.stage(f"{name}: {algo} {mode}, real budget {budget}")
        t0 = time.time()
        init = self.run / self._slug(from_method) / "final" if from_method else self.run / "sft" / "final"
        cfg = dataclasses.replace(
            self.base, algo=algo, init=str(init), real_step_budget=budget,
            grpo=dataclasses.replace(self.base.grpo, group_size=group_size, tasks_per_iteration=tasks_per_iteration),
            ppo=dataclasses.replace(self.base.ppo, tasks_per_iteration=tasks_per_iteration,
                                    episodes_per_task=group_size),
            optim=dataclasses.replace(self.base.optim, lr=lr))
        method_dir = self.run / self._slug(name)
        lg = MetricsLogger(method_dir, tensorboard=False)
        budget_obj = RealStepBudget(0 if mode == "dream" else budget)
        trainer = build_trainer(algo, build_backend(cfg, cfg.init), cfg, logger=lg, budget=budget_obj)
        curve: list[tuple[int, float]] = []

        def evaluate(tag: str, step: int) -> None:
            res = self.evaluate(trainer.backend)
            curve.append((step, res.success_rate))
            lg.log(step, {"success_rate": res.success_rate, "real_steps": float(trainer.budget.used)}, prefix="eval/")

        if eval_every:
            evaluate("start", 0)
        world = None
        if mode in ("dream", "s2r"):
            dcfg = dataclasses.replace(dream or DreamConfig(), em=str(em), em_data=str(self.offline_path))
            world = DreamWorld(self.env, dcfg, method_dir, self.seed)
            train_dream(trainer, world, iterations=dream_iterations, tasks_per_iteration=tasks_per_iteration,
                        algo=algo, run_dir=method_dir, logger=lg, evaluate=evaluate, eval_every=eval_every,
                        progress=self.progress)
        if mode in ("real", "s2r"):
            # S2R (a real phase after a dream, here or in the row it continues) aims its budget at the tasks that
            # were still mixed in the dream; plain real GRPO draws from all train tasks.
            dream_dir = method_dir if mode == "s2r" else (self.run / self._slug(from_method) if from_method else None)
            pool = s2r_task_pool(self.family, dream_dir, tasks_per_iteration) if dream_dir is not None else None
            train_s2r_real(trainer, self.family, iterations=real_iterations, tasks_per_iteration=tasks_per_iteration,
                           seed=self.seed, evaluate=evaluate, eval_every=eval_every, progress=self.progress,
                           pool=pool)
        trainer.save(method_dir / "final")
        res = self.evaluate(trainer.backend)
        if eval_every and (not curve or curve[-1][0] != trainer.iteration):
            curve.append((trainer.iteration, res.success_rate))
        lg.close()
        # Real data in the paper's sense: the SFT start's demonstrations, the offline data behind the experience
        # model for dream methods, plus the real steps the method took itself.
        prior = self.real_offline if world is not None else self.real_demos
        wall = time.time() - t0
        if from_method:
            parent = self.results[from_method]
            prior, wall = parent["real_data"], wall + parent["wall_time_s"]
            offset = parent["curve"][-1][0] if parent["curve"] else 0  # iterations continue the parent's
            curve = parent["curve"] + [(offset + st, v) for st, v in curve if st > 0]
        self.record(name, res, real_steps=trainer.budget.used, real_data=prior + trainer.budget.used,
                    wall=wall, curve=curve)
        if world is not None:
            self.results[name]["curriculum"] = dataclasses.asdict(world.curriculum.stats) | {
                "valid_share": world.curriculum.stats.valid_share}
            self.results[name]["experience_model"] = {k: float(v) for k, v in world.model.stats.items()}
        done()
        return trainer

    @staticmethod
    def _slug(name: str) -> str:
        return name.lower().replace(" ", "-")

    def write_report(self, title: str, extra: str = "") -> str:
        """report.md (the table, then `extra`, then the machine it ran on) and summary.json (everything, machine
        included). The machine line is part of the result: the same recipe lands elsewhere on other kernels."""
        machine = machine_info()
        report = render_table(self.results, title) + extra + f"\nMachine: {describe_machine(machine)}.\n"
        atomic_write_text(self.run / "report.md", report)
        atomic_write_text(self.run / "summary.json", json.dumps(
            {"env": self.env, "results": self.results, "timings_s": self.timings,
             "offline_real_transitions": self.real_offline, "demo_transitions": self.real_demos,
             "machine": machine}, indent=1))
        return report


# ------------------------------------------------------------------------------------------------ quickstart
@dataclass
class QuickstartConfig:
    """`dreamgym quickstart`: the whole recipe on one environment with the tiny preset, sized for 2 CPU cores."""

    env: str = "dial"
    """Environment family. The default is the dial: with the tiny preset on 2 cores the whole recipe fits in
    minutes there, while WebShop/ALFWorld experience models need hours (see `dreamgym table`)."""
    run_dir: str = "runs/quickstart"
    """Where every artefact goes (offline data, experience model, policies, report.md)."""
    seed: int = 0
    """One seed for the whole recipe."""
    offline_episodes: int = 300
    """Offline real trajectories collected first (the only real data DreamGym itself uses)."""
    offline_mix: str = "oracle:0.4,noisy:0.4,random:0.2"
    """Scripted-policy mix of the offline data."""
    sft_policy: str = "oracle"
    """Which offline trajectories are the SFT demonstrations (won episodes of this policy)."""
    em_steps: int = 1600
    """Experience-model SFT steps. The tiny model writes the output format after ~100 steps and copies the dial's
    value into its next state only after ~1000 (an abrupt drop of the loss); at 1,600 it reaches reward accuracy
    0.996 on held-out dial episodes (measured, see README). Fewer steps give a dream with wrong rewards."""
    em_batch_size: int = 8
    """Experience-model sequences per step (small batches: more updates for the same compute)."""
    sft_epochs: int = 16
    """Policy SFT epochs on the demonstrations (~590 steps of 16 on the default data). Measured on the dial
    (sampled test success, seed 0): the tiny policy learns which way to turn early but when to submit only in a
    sharp, noisy transition — 0.31 after these 16 epochs, between 0.12 and 0.40 for 12-30 epochs, 0.98 after
    1,000 steps of 16 drawn with replacement. Float rounding moves that transition: the same 16 epochs give 0.31
    with AVX-512 kernels on 2 threads and 0.09-0.11 with AVX2 kernels or on 1 thread (README section 1). The old
    default (4 epochs of 32) gave 0.05: a policy that almost never submits at the target gives GRPO no signal
    (neither real nor dream GRPO moved it)."""
    sft_batch_size: int = 16
    """Policy SFT turns per optimiser step."""
    sft_lr: float = 1e-3
    """Policy SFT learning rate."""
    dream_iterations: int = 8
    """GRPO iterations inside the experience model."""
    budget: int = 600
    """Real-step budget of the real phase of S2R and of real GRPO (the quickstart compares at equal budget)."""
    real_iterations: int = 8
    """Most real iterations of S2R and of real GRPO (the budget usually stops them first)."""
    eval_tasks: int = 100
    """Held-out real test tasks used for every evaluation (the dial has 18)."""
    eval_seeds: list[int] = field(default_factory=lambda: list(range(10)))
    """Each test task is played once per seed."""
    eval_temperature: float = 1.0
    """Policy temperature at evaluation: 1.0 measures the sampled policy RL optimises (with several seeds this
    gives more episodes than the dial's 18 test tasks); 0 is greedy."""
    group_size: int = 8
    """GRPO group size G."""
    tasks_per_iteration: int = 8
    """Tasks per GRPO iteration."""
    lr: float = 2e-4
    """Policy learning rate for GRPO."""
    train_overrides: list[str] = field(default_factory=lambda: ["grpo.epochs=2", "grpo.minibatches=2"])
    """Extra `dreamgym train` config overrides (key=value) for every policy trainer."""
    em_overrides: list[str] = field(default_factory=list)
    """Extra `dreamgym train-em` config overrides for the experience model."""
    threads: int = 2
    """CPU threads of torch and of numpy's BLAS for every stage. Part of the result, not only of the speed: the
    float reduction order changes with it, and the dial's 16-epoch SFT lands at 31.1% with 2 threads and 9.4% with
    1 on the same machine (README section 1). Runs compare only at the same count and CPU kernels (report.md names
    both)."""

    def validate(self) -> None:
        if self.threads < 1:
            raise ConfigError(f"threads: must be >= 1, got {self.threads}")
        if self.offline_episodes < 10:
            raise ConfigError("offline_episodes: need at least 10 offline episodes")
        for name in ("em_steps", "em_batch_size", "sft_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")


def quickstart(q: QuickstartConfig, progress: bool = True) -> dict[str, Any]:
    t0 = time.time()
    r = Recipe(q.env, q.run_dir, seed=q.seed, eval_tasks=q.eval_tasks, eval_seeds=q.eval_seeds,
               eval_temperature=q.eval_temperature, progress=progress, train_overrides=q.train_overrides,
               em_overrides=q.em_overrides, threads=q.threads)
    r.collect_offline(q.offline_episodes, q.offline_mix, q.sft_policy)
    em = r.experience_model("em", overrides=[f"max_steps={q.em_steps}", f"batch_size={q.em_batch_size}"])
    r.sft(epochs=q.sft_epochs, lr=q.sft_lr, batch_size=q.sft_batch_size)
    rl = dict(algo="grpo", tasks_per_iteration=q.tasks_per_iteration, group_size=q.group_size, lr=q.lr)
    r.run_method("DreamGym GRPO", mode="dream", em=em, dream_iterations=q.dream_iterations, **rl)
    r.run_method("DreamGym-S2R GRPO", mode="real", from_method="DreamGym GRPO", budget=q.budget,
                 real_iterations=q.real_iterations, **rl)
    r.run_method("GRPO real", mode="real", budget=q.budget, real_iterations=q.real_iterations, **rl)
    wall = time.time() - t0
    report = r.write_report(f"DreamGym quickstart — {q.env}, tiny preset, {len(r.test_tasks)} held-out test tasks",
                            f"\nTotal wall time: {wall:.0f} s; offline real transitions: {r.real_offline}.\n")
    print("\n" + report)
    return {"results": r.results, "wall_time_s": wall}


def render_table(results: dict[str, dict[str, Any]], title: str) -> str:
    """A Markdown table: method, real data, success with its 95% interval, mean reward, mean steps, wall time."""
    lines = [f"### {title}", "",
             "| method | real data (transitions) | real steps in RL | success % [95% CI] | mean reward | mean steps "
             "| wall time (s) |",
             "|---|---:|---:|---|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r.get('real_data', 0)} | {r.get('real_steps', 0)} | "
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
    args = parser.parse_intermixed_args(argv)
    try:
        q = load_config(QuickstartConfig, args.config, args.overrides)
    except (ConfigError, OSError) as e:
        print(f"dreamgym quickstart: {e}", file=sys.stderr)
        return 2
    quickstart(q, progress=not args.no_progress)
    return 0
