"""Training inside the experience model: the dream world.

Owns: `DreamConfig` (the `dream.*` fields of `dreamgym train`), `DreamWorld` (a `dreamgym.rl.loop.World`: the
experience model, its co-evolving replay buffer, the curriculum and the `SyntheticEnv` factory of one run; after
each iteration the synthetic transitions are in the buffer, the episodes in the dream's log, the curriculum has
taken its step (and, with `dream.skip_won`, the strata the policy won whole are left out of the next draw), the
iteration's report is made (failure states, zero-variance groups, optimiser steps), a sample
of its episodes has been audited in the real environment where one can be run (`dreamgym.dream.audit`) and, with
`dream.guard` on, the audit guard has judged the audits so far (`dreamgym.dream.guard`: its verdict is the world's
`phase_end`, kept in its saved state so a resumed run does not play on). The paper's
loop, curriculum tasks -> rollouts inside the experience model -> GRPO/PPO update -> buffer -> curriculum, is the run
loop (`dreamgym.rl.loop.run_phases`) over a `DreamWorld`.
Must not know: trainers' internals, concrete environments (families are reached through `dreamgym.envs.family`),
how the experience model formats prompts, recipes and command lines.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dreamgym.llm.base import GENERATION_TIMEOUT_S
from dreamgym.dream import audit, guard
from dreamgym.dream.guard import AuditGuardConfig, GuardStop
from dreamgym.utils import distributed
from dreamgym.checks import SERVER_URLS, server_urls, task_source, trajectory_file
from dreamgym.config import ConfigError, checked, ranged
from dreamgym.curriculum.generator import Curriculum, CurriculumConfig, cluster_groups
from dreamgym.data import write_jsonl
from dreamgym.episode import Episode
from dreamgym.envs.family import EnvFamily
from dreamgym.experience.checkpoint import usable_checkpoint, usable_config_overrides
from dreamgym.curriculum.pools import (VARIANCE_LOG, check_strata, draw_tasks, iteration_tasks, task_pool,
                                       task_stratum)
from dreamgym.utils.paths import atomic_write_text
from dreamgym.utils.seeds import AUDIT_BASIS, mix_seed
from dreamgym.types import Task

if TYPE_CHECKING:
    from dreamgym.replay.buffer import ReplayBuffer
    from dreamgym.trainers.online import UpdateResult
    from dreamgym.experience import ExperienceModel
    from dreamgym.dream.synthetic_env import SyntheticEnv

DREAM_STATE_FILE = "dream_state.json"
"""The curriculum's state (generated tasks, counters, RNG) at the checkpoint's iteration, in the run folder."""
DREAM_EPISODES_DIR = "dream_episodes"
"""One trajectory file per dream iteration (`it-00001.jsonl`, ...): every synthetic episode the policy trained on,
with its provenance (source synthetic, seed, policy version), so a dream can be read back exactly (`dreamgym view`)."""


@dataclass
class DreamConfig:
    em: str = checked("", usable_checkpoint, "an experience-model checkpoint folder (from dreamgym train-em)")
    """Experience-model checkpoint directory (from `dreamgym train-em`); required for mode=dream and mode=s2r."""
    em_data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """Offline real trajectories that seed the replay buffer (default: the experience model's training data)."""
    iterations: int = ranged(20, ge=0)
    """RL iterations inside the synthetic environment."""
    s2r_iterations: int = ranged(10, ge=0)
    """mode=s2r: most real-environment iterations after the dream phase (the real-step budget may end it first)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Curriculum task generator (curriculum.enabled=false is the no-task-generation ablation)."""
    initial_state: Literal["auto", "real", "model"] = "auto"
    """Where synthetic episodes start: 'auto' (the real env's initial state when it can reset to the task, else
    the model's), 'real' or 'model'."""
    clusters: int = ranged(8, ge=1)
    """With one episode per task per iteration (`group_size=1`), the curriculum measures reward variance over this
    many embedding clusters of similar tasks instead of each task's own episodes."""
    reward_from: Literal["auto", "model", "state"] = "auto"
    """A synthetic step's reward and end: 'model' (the experience model's), 'state' (the family's reward rule on the
    written states, `grounded_outcome`) or 'auto' ('state' for families that have one, else 'model')."""
    ground_states: bool = True
    """Write into each answer the parts of the next state its action alone fixes, with the family's `ground_state`
    (MiniWoB++: the text a fill types, the box a click checks, the focus) and what it leaves as it was (element
    names, the other fields' text); false keeps the model's answers as written."""
    skip_won: bool = False
    """Leave out of each iteration's draw of base tasks the strata (values of `task_strata`; without it, the tasks)
    whose every episode the policy won the last time they were drawn; all of them when none would be left."""
    shared_noise: bool = True
    """With a sampled experience model, the members of a GRPO group draw the model's sampling noise from
    (episode, action), so the same action meets the same sampled world in each (`SyntheticEnv.shared_noise`)."""
    task_pool: str = checked("all", task_source, "all, data or a trajectory file")
    """The dream's base tasks: 'all' train tasks, 'data' (those the offline real data played) or those a trajectory
    file played; curriculum variants are added to any pool."""
    em_overrides: list[str] = checked([], usable_config_overrides,
                                      "key=value settings of the experience model's config")
    """Experience-model config overrides at load time, e.g. [use_retrieval=false] (the no-replay ablation)."""
    em_url: str = checked("", server_urls, SERVER_URLS)
    """Run the experience model (and the curriculum's task writer) on OpenAI-compatible servers serving `em` as
    exported by `dreamgym export-em`; prompts are still fitted here by its tokenizer. Empty: in this process."""
    em_timeout_s: float = ranged(GENERATION_TIMEOUT_S, gt=0)
    """Seconds an `em_url` server may take to answer one generation request; one that takes longer fails its batch
    (the dream episodes waiting on it end, their error naming this field) and is not sent again."""
    audit_episodes: int = ranged(4, ge=0)
    """Dream episodes per iteration replayed action by action in the real environment to measure the dream's outcome
    agreement (`dream/audit/*`, `dream_audit.jsonl`); their real steps are counted apart, never charged to the
    real-step budget. 0: no audit."""
    guard: AuditGuardConfig = field(default_factory=AuditGuardConfig)
    """The audit guard: stop the dream when the audit's false successes exceed a share of its dreamt wins, and roll
    the policy back (`dreamgym.dream.guard`; off by default)."""

    def validate(self) -> None:
        if self.guard.on and self.audit_episodes == 0:
            raise ConfigError("guard.max_false_success_rate", "the guard judges the audit, and audit_episodes=0 "
                              "turns it off", "null with audit_episodes=0, else 0 to 1")


def _rewards_by_task(episodes: Sequence[Episode]) -> tuple[dict[str, list[float]], dict[str, Task]]:
    rewards: dict[str, list[float]] = defaultdict(list)
    tasks: dict[str, Task] = {}
    for e in episodes:
        if e.trainable:
            rewards[e.task.id].append(float(e.reward))
            tasks[e.task.id] = e.task
    return dict(rewards), tasks


def _page_variants(env_family: EnvFamily, pages: dict[str, str]) -> Callable[[Task, int, random.Random], list[str]]:
    """The curriculum's family writer: the family's variants of a task on the page its episodes started from
    (`pages`, task id -> initial state). Not a bound method of the world: the curriculum would then hold the world,
    and the cycle would keep its replay buffer open after a run until the garbage collector ran."""
    return lambda task, n, rng: env_family.hooks.task_variants(task, pages.get(task.id, ""), n, rng)


class DreamWorld:
    """The synthetic side of a run (a `dreamgym.rl.loop.World`): the experience model, its co-evolving replay buffer,
    the curriculum and a `SyntheticEnv` factory. Built once per run; the trainer never sees it, and it never knows
    which algorithm trains (the curriculum reads every episode's reward)."""

    name = "dream"
    real = False

    def __init__(self, env_name: str, dream: DreamConfig, run_dir: Path, seed: int, device: str | None = None,
                 strata: str = ""):
        from dreamgym.envs import family
        from dreamgym.experience import ExperienceModel, checkpoint_buffer

        if not dream.em:
            raise ConfigError("dream.em", "a dream needs an experience-model checkpoint (from dreamgym train-em)")
        self.family_name = env_name
        self.family: EnvFamily = family(env_name)
        self.config = dream
        self.run_dir = Path(run_dir)
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
                                                           url=dream.em_url or None,
                                                           timeout_s=dream.em_timeout_s,
                                                           timeout_field="dream.em_timeout_s")
        self.base_tasks = task_pool(self.family.tasks("train"), dream.task_pool, name="dream.task_pool", env=env_name,
                                    buffer=self.buffer)
        self.strata = strata  # the run's `task_strata`: base tasks drawn evenly over its values
        if strata:
            check_strata(self.base_tasks, strata)
        if dream.curriculum.writer == "family" and "task_variants" not in self.family.hooks.defined:
            raise ConfigError("dream.curriculum.writer", f"the {env_name} family writes no task variants "
                              "(its `task_variants` hook)", "model")
        self._pages: dict[str, str] = {}  # task id -> the initial state its latest episodes started from
        # M_task shares M_exp's parameters: the curriculum talks to the very same LLM backend (or the family writes).
        self.curriculum = Curriculum(self.base_tasks, self.family.parse_goal, self.model.llm, dream.curriculum,
                                     seed=seed, log_path=run_dir / VARIANCE_LOG if main else None,
                                     write_variants=_page_variants(self.family, self._pages))
        self._known: set[str] = set()  # several processes: the buffer's transitions before this iteration's steps
        self.seed = seed
        self._failures = 0  # the model's failure count when this iteration's rollouts began
        # "unchecked" until the first audit starts the real environment; "off" when it cannot (or audit_episodes=0)
        self._audit = "unchecked" if dream.audit_episodes > 0 else "off"
        try:
            dream.validate()
        except ConfigError as e:
            raise e.under("dream.") from None
        self._audits: list[tuple[int, dict[str, float]]] = []  # the guard's window: (iteration, audit summary)
        self._stop: GuardStop | None = None  # the guard's verdict, once it stopped the dream
        # dream.skip_won: stratum (or task id) -> whether the policy won every episode of its latest draw
        self._all_won: dict[str, bool] = {}

    # -- the World a run loop plays in
    def start(self, iteration: int) -> None:
        """A resumed dream continues the curriculum from the state saved beside its checkpoint."""
        state_file = self.run_dir / DREAM_STATE_FILE
        if iteration and state_file.is_file():
            state = json.loads(state_file.read_text())
            if state.get("iteration") != iteration:
                print(f"warning: {state_file} is from iteration {state.get('iteration')}, the checkpoint from "
                      f"{iteration}; the curriculum continues from the older state")
            self.load_state_dict(state)
            # A verdict or audits from after the checkpoint's iteration (a kill between the world's save and the
            # checkpoint's): the run redoes those iterations, and the guard judges them again.
            self._audits = [(it, a) for it, a in self._audits if it <= iteration]
            if self._stop is not None and self._stop.stopped_at > iteration:
                self._stop = None

    @property
    def keeps_policies(self) -> int:
        """How many of the latest policies the run loop keeps restorable for this world: the guard's window + 1 when
        it is on (a verdict restores the policy that played the iteration before its window), else 0."""
        return self.config.guard.window + 1 if self.config.guard.on else 0

    def phase_end(self) -> GuardStop | None:
        """The guard's verdict once it stopped the dream (None: the dream goes on)."""
        return self._stop

    def tasks(self, iteration: int, n: int) -> list[Task]:
        """`n` tasks from the curriculum: base tasks and, at most a share λ of them, generated variants; with
        `dream.skip_won`, base tasks only from the strata the policy has not won whole (`unwon_tasks`)."""
        base = self.unwon_tasks() if self.config.skip_won else self.base_tasks
        if self.strata:
            return self.curriculum.sample(n, lambda k: iteration_tasks(base, k, self.seed, iteration, self.strata))
        # the curriculum's own draw (its stream, `draw_tasks`), over the pool left
        return self.curriculum.sample(n, lambda k: draw_tasks(self.curriculum.rng, base, k))

    def task_key(self, task: Task) -> str:
        """What `dream.skip_won` judges a task by: its stratum (goal field `task_strata`), else its id."""
        return task_stratum(task, self.strata) if self.strata else task.id

    def unwon_tasks(self) -> list[Task]:
        """The base tasks whose stratum's latest draw the policy did not win in every episode (all base tasks when
        that leaves none). A group it wins whole has zero GRPO advantage and trains nothing; on MiniWoB++ 7-11 of
        16 groups an iteration were such (docs/results/miniwob.md)."""
        kept = [t for t in self.base_tasks if not self._all_won.get(self.task_key(t), False)]
        return kept or list(self.base_tasks)

    def note_outcomes(self, episodes: Sequence[Episode]) -> None:
        """Record, for each stratum (or task) this iteration's base-task episodes played, whether the policy won them
        all; generated variants are the curriculum's, not the draw's, and are left out."""
        base_ids = {t.id for t in self.base_tasks}
        won: dict[str, bool] = {}
        for e in episodes:
            if e.trainable and e.task.id in base_ids:
                key = self.task_key(e.task)
                won[key] = won.get(key, True) and e.won
        self._all_won.update(won)

    def envs(self, policy_version: str) -> Callable[[], SyntheticEnv]:
        from dreamgym.dream.synthetic_env import SyntheticEnv

        self._known = self.known_transitions() if distributed.active() else set()
        self._failures = self.model.stats["failures"]

        def make() -> SyntheticEnv:
            return SyntheticEnv(self.model, self.buffer, tasks=self.base_tasks, env=self.family_name,
                                initial_state=self.config.initial_state,
                                policy_version=policy_version, reward_from=self.config.reward_from,
                                shared_noise=self.config.shared_noise, ground_states=self.config.ground_states)
        return make

    def after_iteration(self, iteration: int, episodes: Sequence[Episode], policy_version: str,
                        update: UpdateResult) -> dict[str, float]:
        """Every rank gets the others' new transitions; the episodes go to `dream_episodes/it-<iteration>.jsonl`
        (whole and atomic: a resumed run that redoes an iteration replaces its file); the curriculum takes its step
        on their rewards; a sample of the episodes is audited (`audit_iteration`) and, with `dream.guard` on, the
        guard judges the audits of its window (`judge`: `phase_end` then holds its verdict). Returns the
        curriculum's, the experience model's and the buffer's figures, the iteration's report (`failure_states`: the
        model's answers that fell to the failure state, and from `update` the trainer's `zero_variance_groups` and
        `optimizer_steps`; with `dream.skip_won`, `skipped_won`: the strata the next draw leaves out) and the
        audit's (`audit/...`)."""
        self.share_new_transitions(self._known)
        if distributed.is_main():
            write_jsonl(self.run_dir / DREAM_EPISODES_DIR / f"it-{iteration:05d}.jsonl",
                        [e.to_trajectory(policy=policy_version) for e in episodes])
        cm = self.curriculum_step(iteration - 1, episodes)
        if self.config.skip_won:
            self.note_outcomes(episodes)
        em_stats = {f"em/{k}": float(v) for k, v in self.model.stats.items()}
        failures = float(self.model.stats["failures"] - self._failures)
        if distributed.active():  # each process counts its own model's answers
            failures = distributed.sum_floats([failures])[0]
        report = {"failure_states": failures}
        if update.zero_variance_groups is not None:
            report["zero_variance_groups"] = float(update.zero_variance_groups)
        report["optimizer_steps"] = float(update.optimizer_steps)
        if self.config.skip_won:
            keys = {self.task_key(t) for t in self.base_tasks}
            report["skipped_won"] = float(len(keys) - len({self.task_key(t) for t in self.unwon_tasks()}))
        audited = self.audit_iteration(iteration, episodes, policy_version) if distributed.is_main() else {}
        if self.config.guard.on:
            self.judge(iteration, audited)
        return {**cm, **em_stats, "buffer/size": float(len(self.buffer)), **report,
                **{f"audit/{k}": v for k, v in audited.items()}}

    def audit_iteration(self, iteration: int, episodes: Sequence[Episode], policy_version: str) -> dict[str, float]:
        """Replay `audit_episodes` of the iteration's `episodes` (a seeded draw) in the family's real train
        environment, write their rows to the run folder's `dream_audit.jsonl` and return their summary
        (`dreamgym.dream.audit.summarize`); nothing when the audit is off. A family whose real environment cannot be
        started is reported once and not audited again in this run."""
        if self._audit == "off":
            return {}
        if self._audit == "unchecked":
            try:
                self.family.make_env("train").close()
            except Exception as e:  # noqa: BLE001 - e.g. a browser or a server the real environment needs is missing
                print(f"warning: dream audit off for this run: the {self.family_name} real environment does not "
                      f"start ({type(e).__name__}: {e})")
                self._audit = "off"
                return {}
            self._audit = "on"
        # A family that shows a variant's goal on its parent's page (`show_goal`) has no real page asking it.
        chosen = audit.sample(episodes, self.config.audit_episodes, mix_seed(self.seed, iteration, basis=AUDIT_BASIS),
                              variants="show_goal" not in self.family.hooks.defined)
        replays = [audit.replay(episodes[i], lambda: self.family.make_env("train"), i) for i in chosen]
        where = {"iteration": iteration, "policy_version": policy_version, "env": self.family_name,
                 "em": str(self.config.em), "dream_file": f"{DREAM_EPISODES_DIR}/it-{iteration:05d}.jsonl",
                 "reset_seed": audit.REPLAY_SEED}
        audit.write_rows(self.run_dir / audit.AUDIT_FILE, iteration, [r.to_row(**where) for r in replays])
        return audit.summarize(r.to_row() for r in replays)

    def judge(self, iteration: int, audited: dict[str, float]) -> GuardStop | None:
        """The guard's turn after `iteration`: its audit summary `audited` (none when the audit is off or another
        rank ran it) joins the window and the rule (`dreamgym.dream.guard.check`) is applied; rank 0's verdict is
        every rank's. Returns it (None: go on)."""
        if audited:
            self._audits = [*self._audits, (iteration, dict(audited))][-self.config.guard.window:]
        stop = guard.check(self._audits, self.config.guard) if distributed.is_main() else None
        if distributed.active():
            stop = distributed.gather(stop)[0]
        self._stop = stop
        return stop

    def audit_real_steps(self) -> int:
        """The real steps every audit of this run folder took (its `dream_audit.jsonl`; a resumed run's redone
        iterations counted once), 0 without an audit."""
        return audit.real_steps(self.run_dir / audit.AUDIT_FILE)

    def save(self, iteration: int) -> None:
        # Beside the checkpoint, not inside it: `trainer.save` replaces the whole checkpoint folder, and the
        # end-of-run save did, so a finished run's curriculum state was lost and `--resume` restarted it from scratch.
        if distributed.is_main():
            atomic_write_text(self.run_dir / DREAM_STATE_FILE, json.dumps({"iteration": iteration,
                                                                           **self.state_dict()}))

    # -- its parts
    def known_transitions(self) -> set[str]:
        """Content hashes of the buffer's transitions (what `share_new_transitions` compares against)."""
        from dreamgym.replay.buffer import content_hash

        return {content_hash(t) for t in self.buffer.transitions()}

    def share_new_transitions(self, known: set[str]) -> int:
        """Several processes: each rank's transitions not in `known` (added by its own synthetic steps since) go to
        every other rank's buffer, rank 0's persisting them; returns how many this rank received. One process:
        nothing to do. Every rank ends an iteration with the same transitions (inserted in a different order)."""
        from dreamgym.replay.buffer import content_hash

        if not distributed.active():
            return 0
        mine = [t for t in self.buffer.transitions() if content_hash(t) not in known]
        received = 0
        for r, part in enumerate(distributed.gather(mine)):
            if r != distributed.rank():
                received += self.buffer.add(part)
        return received

    def curriculum_step(self, iteration: int, episodes: Sequence[Episode]) -> dict[str, float]:
        """The curriculum's step on every trainable episode's reward, by task: V_τ over the episodes each task
        played this iteration, whatever algorithm trains on them. With one episode per task (`group_size=1`) a
        task's own outcomes cannot vary, so V_τ is taken over an embedding cluster of similar tasks
        (docs/concepts.md#curriculum)."""
        rewards, tasks = _rewards_by_task(episodes)
        self._pages.update((e.task.id, e.initial_state) for e in episodes if e.initial_state)
        if rewards and all(len(r) == 1 for r in rewards.values()):
            ids = list(rewards)
            emb = self.buffer.embedder.encode([tasks[i].instruction for i in ids])
            rewards = cluster_groups(ids, [rewards[i] for i in ids], emb, self.config.clusters, seed=iteration)
        return self.curriculum.update(iteration, rewards, tasks)

    def state_dict(self) -> dict[str, Any]:
        """The curriculum's state and, with the guard on, the guard's (its window's audits and its verdict)."""
        d: dict[str, Any] = {"generated": [t.to_dict() for t in self.curriculum.generated],
                             "stats": dataclasses.asdict(self.curriculum.stats), "rng": self.curriculum.rng.getstate()}
        if self.config.skip_won:
            d["all_won"] = dict(self._all_won)
        if self.config.guard.on:
            d["guard"] = {"audits": [[it, a] for it, a in self._audits],
                          "stop": self._stop.to_dict() if self._stop is not None else None}
        return d

    def load_state_dict(self, d: dict[str, Any]) -> None:
        from dreamgym.curriculum.generator import CurriculumStats

        self.curriculum.generated = [Task.from_dict(t) for t in d["generated"]]
        self.curriculum.stats = CurriculumStats(**d["stats"])
        rng = d["rng"]
        self.curriculum.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
        self.curriculum.remember(self.curriculum.generated)
        self._all_won = {str(k): bool(v) for k, v in (d.get("all_won") or {}).items()}
        g = d.get("guard") or {}
        self._audits = [(int(it), dict(a)) for it, a in g.get("audits", [])]
        self._stop = GuardStop.from_dict(g["stop"]) if g.get("stop") else None
