"""Training inside the experience model: the dream loop and sim-to-real (S2R).

Owns: `DreamConfig` (the `dream.*` fields of `dreamgym train`), `DreamWorld` (the experience model, its
co-evolving replay buffer, the curriculum and the `SyntheticEnv` factory of one run), `train_dream` (the paper's
loop: curriculum tasks -> agent rollouts inside `SyntheticEnv` -> GRPO/PPO update -> the buffer grows with the
synthetic transitions -> curriculum step) and the one way to run S2R: `train_s2r` (the dream phase, then
`train_s2r_real`, the real loop of `dreamgym.loops` on the train tasks the dream left undecided, under the
trainer's hard real-step budget).
Must not know: trainers' internals (only `dreamgym.trainers.protocols`), concrete environments (families are
reached through `dreamgym.envs.family`), how the experience model formats prompts, recipes and command lines.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dreamgym import distributed
from dreamgym.checks import SERVER_URLS, em_checkpoint, em_config_overrides, server_urls, task_source, trajectory_file
from dreamgym.config import ConfigError, checked, ranged
from dreamgym.data import write_jsonl
from dreamgym.curriculum import Curriculum, CurriculumConfig, cluster_groups
from dreamgym.loops import DREAM_VARIANCE_LOG, EnvFamily, PeriodicEvaluation, task_pool, train_real
from dreamgym.metrics import MetricsLogger
from dreamgym.paths import atomic_write_text
from dreamgym.rollout import Episode
from dreamgym.trainers.protocols import OnlineTrainer
from dreamgym.types import Task

if TYPE_CHECKING:
    from dreamgym.buffer import ReplayBuffer
    from dreamgym.experience import ExperienceModel
    from dreamgym.synthetic_env import SyntheticEnv

DREAM_STATE_FILE = "dream_state.json"
"""The curriculum's state (generated tasks, counters, RNG) at the checkpoint's iteration, in the run folder."""
DREAM_EPISODES_DIR = "dream_episodes"
"""One trajectory file per dream iteration (`it-00001.jsonl`, ...): every synthetic episode the policy trained on,
with its provenance (source synthetic, seed, policy version), so a dream can be read back exactly (`dreamgym view`)."""


@dataclass
class DreamConfig:
    em: str = checked("", em_checkpoint, "an experience-model checkpoint folder (from dreamgym train-em)")
    """Experience-model checkpoint directory (from `dreamgym train-em`); required for mode=dream and mode=s2r."""
    em_data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """Offline real trajectories that seed the replay buffer (default: the experience model's training data)."""
    iterations: int = ranged(20, ge=0)
    """RL iterations inside the synthetic environment."""
    s2r_iterations: int = ranged(10, ge=0)
    """mode=s2r: most real-environment iterations after the dream phase (the real-step budget may end it first)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Curriculum task generator (curriculum.enabled=false is the no-task-generation ablation)."""
    max_steps: int = ranged(0, ge=0)
    """Step limit of a synthetic episode (0: the real environment's own limit)."""
    initial_state: Literal["auto", "real", "model"] = "auto"
    """Where synthetic episodes start: 'auto' (the real env's initial state when it can reset to the task, else
    the model's), 'real' or 'model'."""
    clusters: int = ranged(8, ge=1)
    """PPO has one rollout per task: the curriculum groups tasks into this many embedding clusters."""
    reward_from: Literal["auto", "model", "state"] = "auto"
    """A synthetic step's reward and end: 'model' (the experience model's), 'state' (the family's reward rule on the
    written states, `grounded_outcome`) or 'auto' ('state' for families that have one, else 'model')."""
    shared_noise: bool = True
    """With a sampled experience model, the members of a GRPO group draw the model's sampling noise from
    (episode, action), so the same action meets the same sampled world in each (`SyntheticEnv.shared_noise`)."""
    task_pool: str = checked("all", task_source, "all, data or a trajectory file")
    """The dream's base tasks: 'all' train tasks, 'data' (those the offline real data played) or those a trajectory
    file played; curriculum variants are added to any pool."""
    em_overrides: list[str] = checked([], em_config_overrides, "key=value settings of the experience model's config")
    """Experience-model config overrides at load time, e.g. [use_retrieval=false] (the no-replay ablation)."""
    em_url: str = checked("", server_urls, SERVER_URLS)
    """Run the experience model (and the curriculum's task writer) on OpenAI-compatible servers serving `em` as
    exported by `dreamgym export-em`; prompts are still fitted here by its tokenizer. Empty: in this process."""


def _rewards_by_task(episodes: Sequence[Episode]) -> tuple[dict[str, list[float]], dict[str, Task]]:
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
        from dreamgym.experience import ExperienceModel, checkpoint_buffer

        if not dream.em:
            raise ConfigError("dream.em", "a dream needs an experience-model checkpoint (from dreamgym train-em)")
        self.family_name = env_name
        self.family: EnvFamily = family(env_name)
        self.config = dream
        # Several processes: rank 0 owns the persistent buffer (and fills the embedding cache first); the others
        # keep the same transitions in memory, and `share_new_transitions` gives every rank what the others added.
        main = distributed.is_main()
        device = device or (distributed.device() if distributed.launched() else None)  # each rank its own GPU
        if not main:
            distributed.barrier("rank 0 opening the replay buffer")
        self.buffer: ReplayBuffer = checkpoint_buffer(dream.em, data=dream.em_data or None,
                                                      path=run_dir / "buffer" if main else None)
        if main:
            distributed.barrier("rank 0 opening the replay buffer")
        self.model: ExperienceModel = ExperienceModel.load(dream.em, buffer=self.buffer, device=device,
                                                           config_overrides=dream.em_overrides,
                                                           url=dream.em_url or None)
        self.base_tasks = task_pool(self.family.tasks("train"), dream.task_pool, name="dream.task_pool", env=env_name,
                                    buffer=self.buffer)
        # M_task shares M_exp's parameters: the curriculum talks to the very same LLM backend.
        self.curriculum = Curriculum(self.base_tasks, self.family.parse_goal, self.model.llm, dream.curriculum,
                                     seed=seed, log_path=run_dir / DREAM_VARIANCE_LOG if main else None)
        self.policy_version = ""

    def env_factory(self) -> Callable[[], SyntheticEnv]:
        from dreamgym.synthetic_env import SyntheticEnv

        def make() -> SyntheticEnv:
            return SyntheticEnv(self.model, self.buffer, tasks=self.base_tasks, env=self.family_name,
                                max_steps=self.config.max_steps or None, initial_state=self.config.initial_state,
                                policy_version=self.policy_version, reward_from=self.config.reward_from,
                                shared_noise=self.config.shared_noise)
        return make

    def known_transitions(self) -> set[str]:
        """Content hashes of the buffer's transitions (what `share_new_transitions` compares against)."""
        from dreamgym.buffer import content_hash

        return {content_hash(t) for t in self.buffer.transitions()}

    def share_new_transitions(self, known: set[str]) -> int:
        """Several processes: each rank's transitions not in `known` (added by its own synthetic steps since) go to
        every other rank's buffer, rank 0's persisting them; returns how many this rank received. One process:
        nothing to do. Every rank ends an iteration with the same transitions (inserted in a different order)."""
        from dreamgym.buffer import content_hash

        if not distributed.active():
            return 0
        mine = [t for t in self.buffer.transitions() if content_hash(t) not in known]
        received = 0
        for r, part in enumerate(distributed.gather(mine)):
            if r != distributed.rank():
                received += self.buffer.add(part)
        return received

    def curriculum_step(self, iteration: int, episodes: Sequence[Episode], algo: str) -> dict[str, float]:
        rewards, tasks = _rewards_by_task(episodes)
        if algo == "ppo" and rewards:
            # One rollout per task: V_τ over an embedding cluster of similar tasks (docs/concepts.md#curriculum).
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


def train_dream(trainer: OnlineTrainer, world: DreamWorld, *, iterations: int, tasks_per_iteration: int, algo: str,
                run_dir: Path, logger: MetricsLogger | None, evaluate: PeriodicEvaluation | None = None,
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
        if distributed.is_main():
            atomic_write_text(state_file, json.dumps({"iteration": trainer.iteration, **world.state_dict()}))
    factory = world.env_factory()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        job = bar.add_task(f"dream {algo}", total=iterations, completed=trainer.iteration)
        while trainer.iteration < iterations:
            world.policy_version = version = trainer.policy_version()
            tasks = world.curriculum.sample(tasks_per_iteration)
            known = world.known_transitions() if distributed.active() else set()
            episodes, m = trainer.train_iteration(tasks, factory)
            world.share_new_transitions(known)
            if distributed.is_main():
                # Whole and atomic per iteration: a resumed run that redoes an iteration replaces its file.
                write_jsonl(run_dir / DREAM_EPISODES_DIR / f"it-{trainer.iteration:05d}.jsonl",
                            [e.to_trajectory(policy=version) for e in episodes])
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


def train_s2r_real(trainer: OnlineTrainer, family: EnvFamily, dream_dir: Path, *, env: str, iterations: int,
                   tasks_per_iteration: int, group_size: int, max_turns: int, seed: int,
                   evaluate: PeriodicEvaluation | None = None, eval_every: int = 0,
                   progress: bool = True) -> list[dict[str, Any]]:
    """The real phase of S2R: the policy a dream at `dream_dir` trained continues RL in the real environment for
    `iterations` more iterations, or until the trainer's real-step budget (a hard cap enforced by the rollout
    engine) is spent, on the train tasks whose latest dream group had mixed outcomes (all train tasks when the
    dream left fewer than one iteration's worth). Evaluations are tagged s2r-it<N>; no checkpoint is written (the
    caller saves the end)."""
    distributed.barrier("rank 0 finishing the dream's log")  # the other ranks read what rank 0 wrote
    pool = task_pool(family.tasks("train"), dream_dir, name="s2r", env=env, fall_back_below=tasks_per_iteration)
    return train_real(trainer, family, pool, iterations=iterations, tasks_per_iteration=tasks_per_iteration,
                      group_size=group_size, max_turns=max_turns, seed=seed, label="s2r real",
                      counted_from=trainer.iteration, evaluate=evaluate, eval_every=eval_every, eval_tag="s2r-it",
                      progress=progress)


def train_s2r(trainer: OnlineTrainer, world: DreamWorld, *, dream_iterations: int, real_iterations: int,
              tasks_per_iteration: int, group_size: int, max_turns: int, algo: str, seed: int, run_dir: Path,
              logger: MetricsLogger | None,
              evaluate: PeriodicEvaluation | None = None, eval_every: int = 0, save_every: int = 0,
              progress: bool = True) -> None:
    """Sim-to-real: `train_dream` in `world` (saving every `save_every` iterations), then `train_s2r_real` from the
    dream's own log in `run_dir`. The budget is the trainer's: the dream spends none of it."""
    train_dream(trainer, world, iterations=dream_iterations, tasks_per_iteration=tasks_per_iteration, algo=algo,
                run_dir=run_dir, logger=logger, evaluate=evaluate, eval_every=eval_every, save_every=save_every,
                progress=progress)
    train_s2r_real(trainer, world.family, run_dir, env=world.family_name, iterations=real_iterations,
                   tasks_per_iteration=tasks_per_iteration, group_size=group_size, max_turns=max_turns, seed=seed,
                   evaluate=evaluate, eval_every=eval_every, progress=progress)
