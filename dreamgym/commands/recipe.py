"""Recipes: the comparisons DreamGym is judged by, each artefact built once and reused from disk, and the
quickstart that runs the whole recipe on one environment.

Owns: `ENV_DEFAULTS` (each environment's small-scale settings, typed; `env_train_config`), `Recipe` (offline real data,
experience models, the SFT/DPO baselines and `run_method`, which trains and evaluates one RL row: real, dream or S2R;
each finished row kept in `<row>/result.json` with its episodes and a hash of its settings, and read back instead of run
again), the results table (`render_table`, report.md, summary.json), `QuickstartConfig`, `quickstart` and
`quickstart_main` (collect -> train the experience model -> SFT -> dream GRPO -> S2R -> real GRPO at the same budget;
with several seeds, `quickstart_seeds` through `dreamgym.commands.seeds`, which also owns the `--seeds` / `--workers`
options; what a row's hash holds is `dreamgym.commands.row_hash`'s; a row with `dream_guard` on counts its audit's real
steps as its own); the text under the quickstart's table ends with `dreamgym.commands.recorded`'s note. Configs are
built typed (`dataclasses.replace`); only a user's own `train_overrides`/`em_overrides` are text.
Must not know: trainers' internals, how the loop runs (a row is a config and a list of phases for
`dreamgym.rl.loop.run_phases`), concrete environments (families are reached through `dreamgym.envs.family`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.checks import POLICY_MIX, env_family, family_choices
from dreamgym.agent import AgentConfig
from dreamgym.config import (CommandParser, ConfigError, apply_overrides, checked, default_of, describe, fail,
                             load_config, parse_overrides, ranged, to_dict, validate_config)
from dreamgym.data import DataError
from dreamgym.dream.guard import AuditGuardConfig
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.rl.modes import online_phases
from dreamgym.episode import RolloutConfig
from dreamgym.rl.evaluate import EvalConfig, EvalResult, episode_rows
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.train import TrainEMConfig
from dreamgym.rl.builders import (Evaluation, build_backend, build_offline_trainer, build_online_trainer,
                            close_backend)
from dreamgym.utils.metrics import MetricsLogger, describe_machine, machine_info, pin_threads, resolve_threads
from dreamgym.utils.paths import atomic_write_text, crash_point
from dreamgym.rl.loop import LoopSettings, RunState, run_phases
from dreamgym.commands.seeds import (SeedRunError, add_seeds_options, check_seeds, row_findings, run_seeds,
                                     seeds_overrides, write_seeds_report)
from dreamgym.commands.recorded import recorded_note
from dreamgym.commands.row_hash import dream_settings, row_config, row_hash
from dreamgym.commands.train import TrainConfig
from dreamgym.trainers.common import ModelConfig, TrainerConfig

@dataclass(frozen=True)
class EnvDefaults:
    """Where an environment's small-scale runs start from, before the caller's own overrides."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    """The policy's prompt."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout settings of every policy run."""
    em: ExperienceModelConfig = field(default_factory=ExperienceModelConfig)
    """The experience model's settings."""


ENV_DEFAULTS: dict[str, EnvDefaults] = {
    # The dial is Markov and its state lists its buttons: no history, no admissible list, ~8-token replies keep
    # the tiny policy's prompts short (the trainers' learning tests use the same settings).
    "dial": EnvDefaults(agent=AgentConfig(history=0, show_admissible=False, system_prompt="You are an agent."),
                        rollout=RolloutConfig(max_new_tokens=10),
                        em=ExperienceModelConfig(embedder="hashing")),
    # Page states are long: the hashing embedder keeps buffer seeding and retrieval cheap on CPU.
    "webshop": EnvDefaults(rollout=RolloutConfig(max_new_tokens=48), em=ExperienceModelConfig(embedder="hashing")),
    # The experience model writes the observation only and the state is derived
    # (docs/log/07-observation-only.md: whole-state agreement 0.01 -> 0.50 on held-out steps).
    "alfworld": EnvDefaults(rollout=RolloutConfig(max_new_tokens=32),
                            em=ExperienceModelConfig(embedder="hashing", write_observation=True)),
}
"""Settings each environment's small-scale runs start from (other environments: the configs' defaults)."""


def env_train_config(env: str, **fields: Any) -> TrainConfig:
    """`dreamgym train`'s defaults with `env`'s small-scale settings (`ENV_DEFAULTS`) and `fields` on top."""
    defaults = ENV_DEFAULTS.get(env, EnvDefaults())
    return dataclasses.replace(TrainConfig(), env=env, agent=defaults.agent, rollout=defaults.rollout, **fields)


class Recipe:
    """The artefacts one environment's comparison shares, built once each and reused from disk: offline real
    data, the SFT demonstrations, experience models (full and ablated), the SFT policy every RL method starts
    from, and `run_method` which trains and evaluates one row of the results table.

    Every evaluation runs the policy at `eval_temperature` on the same held-out real test tasks, seeds and
    sampling seed; `results[name]` records success with its Wilson 95% interval, mean reward and steps, the real
    steps the method itself took, its real data in the paper's sense (see `real_data`), wall time and the
    learning curve."""

    def __init__(self, env: str, run_dir: str | Path, *, seed: int = 0, eval_tasks: int = 100,
                 eval_seeds: Sequence[int] = (0,), eval_temperature: float = 0.0, progress: bool = True,
                 train_overrides: Sequence[str] = (), em_overrides: Sequence[str] = (), threads: int = 0):
        from dreamgym.envs import family

        # One thread count for every stage, set here and given to the experience model, whose training used to set
        # it as a side effect: a resumed recipe (experience model on disk) then ran SFT at the torch default and a
        # fresh one at the model's 2, which alone moved the dial's SFT start (docs/decisions.md, "Threads are part of
        # the result").
        # numpy's BLAS (retrieval scores) too, which otherwise follows OPENBLAS_NUM_THREADS / OMP_NUM_THREADS.
        self.threads = threads = resolve_threads(threads)  # 0: the rule of every command (OMP_NUM_THREADS, ...)
        pin_threads(threads)
        self.env, self.run, self.seed, self.progress = env, Path(run_dir), seed, progress
        self.run.mkdir(parents=True, exist_ok=True)
        self.offline_path = self.run / "offline.jsonl"
        self.demos_path = self.run / "demos.jsonl"
        self.family = family(env)
        self.test_tasks = list(self.family.tasks("test"))[:eval_tasks]
        self.eval_seeds = list(eval_seeds)
        # Per-environment defaults first (ENV_DEFAULTS), then the caller's overrides, all validated at once.
        self.base = apply_overrides(env_train_config(env, seed=seed, tensorboard=False), train_overrides)
        self.em_base = TrainEMConfig(env=env, data=str(self.offline_path), model=ModelConfig(preset="tiny"),
                                     seed=seed, threads=threads, em=ENV_DEFAULTS.get(env, EnvDefaults()).em)
        self.em_overrides = list(em_overrides)  # the caller's text, checked by `check_recipe` at start-up
        # One evaluation for every row and every point of its curve: the same tasks, seeds and sampling seed.
        self.evaluate = Evaluation(self.family, "test", self.test_tasks, self.eval_seeds, EvalConfig(
            temperature=eval_temperature, sample_seed=seed, agent=self.base.agent, rollout=self.base.rollout))
        self.results: dict[str, dict[str, Any]] = {}
        self.episodes: dict[str, list[dict[str, Any]]] = {}  # each row's evaluation, episode by episode (pairing)
        self.fingerprints: dict[str, str] = {}  # each row's settings, hashed: a row on disk is reused only if equal
        self.resumed: list[str] = []  # rows read back from disk instead of run
        self.timings: dict[str, float] = {}
        self.real_offline = self.real_demos = 0
        self.data_settings: dict[str, Any] = {}
        self.machine: dict[str, Any] = {}
        self.em_settings: dict[str, dict[str, Any]] = {}

    def stage(self, name: str) -> Callable[[], None]:
        t0 = time.time()
        print(f"\n== {name}", flush=True)
        return lambda: self.timings.__setitem__(name, time.time() - t0)

    # -- shared artefacts -----------------------------------------------------------------------------
    def collect_offline(self, episodes: int, mix: str, sft_policy: str) -> None:
        from dreamgym.commands.collect import collect, parse_mix
        from dreamgym.data import load_trajectories, write_jsonl

        done = self.stage(f"collect {episodes} offline real trajectories ({mix})")
        collect(self.env, parse_mix(mix), episodes, self.offline_path, split="train", seed=self.seed, resume=True,
                progress=self.progress)
        self.data_settings = {"episodes": episodes, "mix": mix, "sft_policy": sft_policy, "seed": self.seed}
        trajs = load_trajectories(self.offline_path)
        demos = [t for t in trajs if t.policy == sft_policy and t.won]
        write_jsonl(self.demos_path, demos)
        self.real_offline = sum(len(t.steps) for t in trajs)
        self.real_demos = sum(len(t.steps) for t in demos)
        done()

    def experience_model(self, name: str = "em", epochs: float = 3,
                         adjust: Callable[[TrainEMConfig], TrainEMConfig] | None = None) -> Path:
        """The experience model `name` (tiny, trained from scratch on the offline data for `epochs`, then the
        caller's `em_overrides`, then `adjust`), trained once and reused from disk."""
        from dreamgym.experience.checkpoint import is_trained
        from dreamgym.experience.train import train_em

        out = self.run / name
        cfg = apply_overrides(dataclasses.replace(self.em_base, out=str(out), epochs=epochs), self.em_overrides)
        if adjust is not None:
            cfg = adjust(cfg)
        self.em_settings[str(out)] = to_dict(cfg)  # part of the settings of every row that dreams with it
        if not is_trained(out):  # an unfinished run resumes from its checkpoint
            done = self.stage(f"train the experience model {name} (tiny, from scratch)")
            validate_config(cfg)
            train_em(cfg)
            done()
        return out

    def resumed_note(self) -> str:
        """What a report's wall time leaves out: the rows read back from an earlier run took their time there."""
        return (f" ({', '.join(self.resumed)} read back from an earlier run: their wall times are that run's)"
                if self.resumed else "")

    def record(self, name: str, res: EvalResult, *, real_steps: int, real_data: int, wall: float,
               curve: list[tuple[int, float]] | None = None, audit_real_steps: int | None = None) -> None:
        """Row `name`'s record; `audit_real_steps`: those of `real_steps` a guarded dream's audit took."""
        self.results[name] = {**res.to_dict(), "real_steps": real_steps, "real_data": real_data,
                              "wall_time_s": wall, "curve": curve or []}
        if audit_real_steps is not None:
            self.results[name]["audit_real_steps"] = audit_real_steps
        self.episodes[name] = episode_rows(res.episodes)
        print(f"[{name}] {res}", flush=True)

    # -- rows on disk: a recipe interrupted and run again does not redo the rows it finished ------------------------
    def row_file(self, name: str) -> Path:
        """Where row `name`'s record, episodes and settings are kept once it is finished."""
        return self.run / self._slug(name) / "result.json"

    def fingerprint(self, **settings: Any) -> str:
        """The hash of what a row's figures depend on (`dreamgym.commands.row_hash`): its own `settings` and this
        recipe's evaluation, threads and offline data."""
        evaluation = {"tasks": [t.id for t in self.test_tasks], "seeds": self.eval_seeds,
                      "config": to_dict(self.evaluate.config)}
        return row_hash(settings, evaluation, self.threads, self.data_settings)

    def resume_row(self, name: str, fingerprint: str) -> bool:
        """Row `name` read back from disk when it finished before with these settings (True). Otherwise False, and the
        caller removes the folder an unfinished or differently-set run left (`_fresh_folder`), so the row starts as
        a fresh run would (a dream row's replay buffer persists in it and would otherwise carry into the new run)."""
        self.fingerprints[name] = fingerprint
        path = self.row_file(name)
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved.get("fingerprint") == fingerprint:
                self.results[name], self.episodes[name] = saved["result"], saved["episodes"]
                self.resumed.append(name)
                r = saved["result"]
                print(f"[{name}] finished in an earlier run with these settings, read from {path}: success "
                      f"{r['success_rate']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] (n={r['n']})", flush=True)
                return True
            print(f"[{name}] {path} was run with other settings: the row runs again", flush=True)
        return False

    def save_row(self, name: str) -> None:
        """Row `name` finished: its record (everything `results` holds), its episodes and its settings' hash."""
        atomic_write_text(self.row_file(name), json.dumps(
            {"fingerprint": self.fingerprints[name], "result": self.results[name], "episodes": self.episodes[name]}))
        crash_point("recipe.row_saved")  # the resume tests kill a recipe here, between two rows

    def _fresh_folder(self, folder: Path) -> None:
        if folder.exists():
            print(f"removing {folder}, left by an unfinished run of its row", flush=True)
            shutil.rmtree(folder)

    def sft(self, epochs: int = 3, lr: float = 1e-3, batch_size: int | None = None, stop_at: float | None = None,
            check_every: int | None = None) -> Path:
        """The SFT baseline on the oracle demonstrations; every RL method starts from it. `stop_at` (with
        `check_every`) ends it once it replays its demonstrations with that probability (`SFTConfig.stop_at`),
        `epochs` being then only a cap; the step and value it stopped at go to `results["SFT"]["sft_stop"]`."""
        out = self.run / "sft" / "final"
        done = self.stage("SFT policy on the demonstrations")
        t0 = time.time()
        sft_cfg = dataclasses.replace(self.base.sft, epochs=epochs, batch_size=batch_size or self.base.sft.batch_size)
        if stop_at is not None:
            sft_cfg = dataclasses.replace(sft_cfg, stop_at=stop_at, check_every=check_every or sft_cfg.check_every)
        cfg = dataclasses.replace(self.base, algo="sft", sft=sft_cfg,
                                  optim=dataclasses.replace(self.base.optim, lr=lr))
        if self.resume_row("SFT", self.fingerprint(config=row_config(cfg))):
            done()
            return out
        trained = (out / "trainer_state.json").is_file()  # an earlier run of this recipe saved it: evaluated only
        if not trained:
            self._fresh_folder(self.run / "sft")
        backend = build_backend(cfg, str(out) if trained else "")
        try:
            if not trained:
                from dreamgym.data import load_trajectories
                from dreamgym.trainers.sft import SFTTrainer

                lg = MetricsLogger(self.run / "sft", tensorboard=False)
                trainer = build_offline_trainer(backend, cfg, cfg.sft, logger=lg,
                                                admissible_fn=self.family.admissible_from_state)
                demos = load_trajectories(self.demos_path)
                assert isinstance(trainer, SFTTrainer)  # an SFTConfig builds one; its stop record is SFT's own
                trainer.fit(demos, progress=self.progress)
                stop = {"step": trainer.global_step, "replay_success": trainer.replay_success(demos),
                        "criterion_met": bool(trainer.stopped_at),
                        **({"kept_best": trainer.kept_best} if trainer.kept_best else {})}
                trainer.save(out)
                atomic_write_text(self.run / "sft" / "stop.json", json.dumps(stop))
                lg.close()
            self.record("SFT", self.evaluate(backend), real_steps=0, real_data=self.real_demos, wall=time.time() - t0)
        finally:
            close_backend(backend)
        stop_file = self.run / "sft" / "stop.json"
        if stop_file.is_file():
            self.results["SFT"]["sft_stop"] = json.loads(stop_file.read_text())
        self.save_row("SFT")
        done()
        return out

    def dpo(self, epochs: int = 2, lr: float = 1e-4) -> None:
        """DPO from the SFT policy on (won, failed) pairs of the same task from the offline data."""
        from dreamgym.data import load_trajectories

        done = self.stage("DPO from SFT on success/failure pairs")
        t0 = time.time()
        cfg = dataclasses.replace(self.base, algo="dpo", init=str(self.run / "sft" / "final"),
                                  dpo=dataclasses.replace(self.base.dpo, epochs=epochs),
                                  optim=dataclasses.replace(self.base.optim, lr=lr))
        if self.resume_row("DPO", self.fingerprint(config=row_config(cfg, from_row=True),
                                                   start=self.fingerprints.get("SFT"))):
            done()
            return
        self._fresh_folder(self.run / "dpo")
        backend = build_backend(cfg, cfg.init)
        lg = MetricsLogger(self.run / "dpo", tensorboard=False)
        trainer = build_offline_trainer(backend, cfg, cfg.dpo, logger=lg,
                                        admissible_fn=self.family.admissible_from_state)
        try:
            trainer.fit(load_trajectories(self.offline_path), progress=self.progress)
            lg.close()
            self.record("DPO", self.evaluate(backend), real_steps=0, real_data=self.real_offline,
                        wall=time.time() - t0)
        finally:
            close_backend(backend)
        self.save_row("DPO")
        done()

    # -- one RL row -----------------------------------------------------------------------------------
    def run_method(self, name: str, *, algo: Literal["grpo", "ppo"], mode: str, tasks_per_iteration: int,
                   group_size: int, budget: int | None = None, dream_iterations: int = 0, real_iterations: int = 0,
                   em: Path | None = None, dream: DreamConfig | None = None, lr: float = 1e-4, eval_every: int = 0,
                   from_method: str | None = None) -> dict[str, Any]:
        """Train `algo` (grpo or ppo) in `mode` and evaluate it: 'real' (RL in the real environment on all train
        tasks), 'dream' (RL inside the experience model `em` only) or 's2r' (sim-to-real: a dream, then real RL on
        the train tasks the dream left with mixed outcomes: `dreamgym.rl.modes.online_phases`). It starts from the SFT
        policy, or from the final policy of the earlier row `from_method` (whose real data and wall time it then
        inherits); an S2R row continuing a dream row runs only the real phase, on that row's dream log. Real phases
        stop at `real_iterations` or when the hard real-step `budget` is spent, whichever comes first; a row with a
        real phase and no budget is refused (it would play nothing). `tasks_per_iteration` and `group_size` are the
        caller's (its config's, whose defaults are `TrainerConfig`'s). Returns the
        row's record (`results[name]`); a row that finished in an earlier run with the same settings is read back
        from its folder, not run again."""
        if mode not in ("real", "dream", "s2r"):
            raise ValueError(f"run_method: mode {mode!r} is not real, dream or s2r")
        if mode != "dream" and not budget:
            raise ConfigError("budget", f"{name}: a {mode} row plays real steps and needs a real-step budget > 0")
        done = self.stage(f"{name}: {algo} {mode}, real budget {budget}")
        t0 = time.time()
        init = self.run / self._slug(from_method) / "final" if from_method else self.run / "sft" / "final"
        # The run's one real-step budget: none for a dream row, whatever `budget` says.
        cfg = dataclasses.replace(
            self.base, algo=algo, init=str(init), real_step_budget=0 if mode == "dream" else budget,
            group_size=group_size, tasks_per_iteration=tasks_per_iteration,
            optim=dataclasses.replace(self.base.optim, lr=lr))
        method_dir = self.run / self._slug(name)
        # The row's figures follow from these and from the rows it starts from (their own hashes): with all of them
        # unchanged, a finished row on disk is this row.
        fingerprint = self.fingerprint(
            config=row_config(cfg, from_row=True), mode=mode, dream_iterations=dream_iterations,
            real_iterations=real_iterations,
            eval_every=eval_every, em=self.em_settings.get(str(em)) if em is not None else None,
            dream=dream_settings(dream),
            start=self.fingerprints.get(from_method or "SFT"))
        if self.resume_row(name, fingerprint):
            done()
            return self.results[name]
        self._fresh_folder(method_dir)
        lg = MetricsLogger(method_dir, tensorboard=False)
        trainer = build_online_trainer(build_backend(cfg, cfg.init), cfg, cfg.online_config(),
                                       admissible_fn=self.family.admissible_from_state)
        state = RunState.new(cfg.real_step_budget)
        curve: list[tuple[int, float]] = []

        def evaluate(tag: str, step: int) -> None:
            res = self.evaluate(trainer.backend)
            curve.append((step, res.success_rate))
            lg.log(step, {"success_rate": res.success_rate, "real_steps": float(state.budget.used)}, prefix="eval/")

        try:
            if eval_every:
                evaluate("start", 0)
            world = None
            if mode != "real" and not from_method:
                dcfg = dataclasses.replace(dream or DreamConfig(), em=str(em), em_data=str(self.offline_path))
                world = DreamWorld(self.env, dcfg, method_dir, self.seed, strata=cfg.task_strata)
            phases = online_phases(mode, self.family, self.env, self.seed, world=world, strata=cfg.task_strata,
                                   real_iterations=real_iterations, dream_iterations=dream_iterations,
                                   tasks_per_iteration=tasks_per_iteration,
                                   dream_log=self.run / self._slug(from_method) if from_method else None)
            run_phases(trainer, phases, state, LoopSettings(cfg, eval_every=eval_every, run_dir=method_dir,
                                                            progress=self.progress),
                       logger=lg, evaluate=evaluate)
            trainer.save(method_dir / "final", state.state_dict())
            res = self.evaluate(trainer.backend)
        finally:
            close_backend(trainer.backend)  # a served policy's adapter off its servers once the row is scored
        if eval_every and (not curve or curve[-1][0] != state.iteration):
            curve.append((state.iteration, res.success_rate))
        lg.close()
        # Real data in the paper's sense: the SFT start's demonstrations, the offline data behind the experience
        # model for dream methods, plus the real steps the method took itself: a guarded dream's audit steps too
        # (they chose its policy); an unguarded audit's are measurement, kept apart (its dream_audit.jsonl).
        prior = self.real_offline if world is not None else self.real_demos
        audited = world.audit_real_steps() if world is not None and world.config.guard.on else None
        wall = time.time() - t0
        if from_method:
            parent = self.results[from_method]
            prior, wall = parent["real_data"], wall + parent["wall_time_s"]
            offset = parent["curve"][-1][0] if parent["curve"] else 0  # iterations continue the parent's
            curve = parent["curve"] + [(offset + st, v) for st, v in curve if st > 0]
        own = state.budget.used + (audited or 0)
        self.record(name, res, real_steps=own, real_data=prior + own, wall=wall, curve=curve,
                    audit_real_steps=audited)
        if world is not None:
            self.results[name]["curriculum"] = dataclasses.asdict(world.curriculum.stats) | {
                "valid_share": world.curriculum.stats.valid_share}
            self.results[name]["experience_model"] = {k: float(v) for k, v in world.model.stats.items()}
        self.save_row(name)
        done()
        return self.results[name]

    @staticmethod
    def _slug(name: str) -> str:
        return name.lower().replace(" ", "-")

    def write_report(self, title: str, extra: str = "") -> str:
        """report.md (the table, then `extra`, then the machine it ran on) and summary.json (everything, machine
        included). The machine line is part of the result: the same recipe lands elsewhere on other kernels."""
        machine = self.machine = machine_info()
        report = render_table(self.results, title) + extra + f"\nMachine: {describe_machine(machine)}.\n"
        atomic_write_text(self.run / "report.md", report)
        atomic_write_text(self.run / "summary.json", json.dumps(
            {"env": self.env, "results": self.results, "timings_s": self.timings,
             "offline_real_transitions": self.real_offline, "demo_transitions": self.real_demos,
             "machine": machine}, indent=1))
        return report


# ------------------------------------------------------------------------------------------------ quickstart
@dataclass
class RecipeConfig:
    """What the recipe commands (`dreamgym quickstart`, `dreamgym table`) share, each knob with one default (the
    quickstart's scale): the environment, seeds and run folder, the offline data, the SFT start, the RL rows' batch,
    budget and iterations, the evaluation, the overrides and threads. Each command adds its own fields; the table's
    configs (configs/*/table*.yaml) set its larger scale."""

    env: str = checked("dial", env_family, family_choices)
    """Environment family (the dial fits in minutes on 2 cores; WebShop/ALFWorld need hours)."""
    run_dir: str = ""
    """Where every artefact goes (offline data, experience models, policies, report.md); empty: runs/quickstart
    for the quickstart, runs/table-<env> for the table."""
    seed: int = ranged(0, ge=0, le=2**32 - 1)
    """One seed for the whole recipe."""
    seeds: list[int] = ranged([], ge=0, le=2**32 - 1)
    """Several seeds (`--seeds 0,1,2`): every row runs once per seed, each seed a whole run of the recipe (its own
    offline data, experience models and SFT start) in run_dir/seed-<s>/, and run_dir gets the report over seeds
    (empty or one seed: one run in run_dir, at `seed` or that seed, as with no seeds)."""
    workers: int = ranged(1, ge=1)
    """With several `seeds`: how many seeds run at a time, each in its own process with `threads` threads."""
    offline_episodes: int = ranged(300, ge=10)
    """Offline real trajectories collected first: the experience models' training data (the only real data
    DreamGym itself uses) and the DPO pairs."""
    offline_mix: str = "oracle:0.4,noisy:0.4,random:0.2"
    """Scripted-policy mix of the offline data, e.g. oracle:0.5,random:0.5."""
    sft_policy: str = "oracle"
    """Scripted policy of `offline_mix` whose won episodes are the SFT (and start) demonstrations (WebShop:
    'shopper')."""
    sft_epochs: int = ranged(64, ge=1)
    """Most policy SFT epochs on the demonstrations (`sft_stop_at` usually ends SFT well before)."""
    sft_stop_at: float = ranged(0.2, ge=0, le=1)
    """Stop SFT once the policy replays its demonstrations with this mean probability (`sft.stop_at`; 0: run
    every `sft_epochs`)."""
    sft_check_every: int = ranged(5, ge=1)
    """SFT optimiser steps between two checks of `sft_stop_at`."""
    dream_iterations: int = ranged(8, ge=1)
    """RL iterations inside the experience model of each DreamGym row."""
    budget: int = ranged(600, ge=1)
    """B: the real-step budget of every real RL row (real GRPO/PPO, the quickstart's S2R real phase, which compare
    at equal budget); the table's S2R rows get B/16 (so the table needs B >= 16)."""
    real_iterations: int = ranged(8, ge=1)
    """Most iterations of a real RL row (the budget usually stops it first)."""
    group_size: int = ranged(default_of(TrainerConfig, "group_size"), ge=1)
    """Episodes of each task per iteration of every RL row, GRPO and PPO alike, the group G (`dreamgym train`'s
    group_size)."""
    tasks_per_iteration: int = ranged(default_of(TrainerConfig, "tasks_per_iteration"), ge=1)
    """Tasks per iteration of every RL row (`dreamgym train`'s tasks_per_iteration)."""
    lr: float = ranged(2e-4, gt=0)
    """Policy learning rate of the RL rows."""
    eval_tasks: int = ranged(100, ge=1)
    """Held-out real test tasks used for every evaluation (the dial has 18)."""
    eval_seeds: list[int] = ranged(list(range(10)), ge=0)
    """Each held-out test task is played once per seed."""
    eval_temperature: float = ranged(1.0, ge=0)
    """Policy temperature at evaluation: 1.0 measures the sampled policy RL optimises; 0 is greedy."""
    train_overrides: list[str] = field(default_factory=lambda: ["grpo.epochs=2", "grpo.minibatches=2"])
    """Extra `dreamgym train` config overrides (key=value) for every policy trainer."""
    em_overrides: list[str] = field(default_factory=list)
    """Extra `dreamgym train-em` config overrides for the experience models (e.g. max_steps=1200)."""
    threads: int = ranged(0, ge=0)
    """CPU threads of torch and of numpy's BLAS for every stage (part of the result: the report names it); 0:
    OMP_NUM_THREADS when it is set, else torch's own count (the rule of every command)."""
    dream_guard: AuditGuardConfig = field(default_factory=AuditGuardConfig)
    """The audit guard of every DreamGym row (`dream.guard` of `dreamgym train`; off by default); a guarded row
    counts its audit's real steps as its own."""

    def validate(self) -> None:
        check_recipe(self.eval_seeds, self.offline_mix, self.sft_policy, self.train_overrides, self.em_overrides)
        check_seeds(self.seeds, self.workers, self.threads)

    def dream(self, base: DreamConfig | None = None) -> DreamConfig | None:
        """A DreamGym row's DreamConfig: `base` (None: the defaults) with `dream_guard`; None for the defaults."""
        return dataclasses.replace(base or DreamConfig(), guard=self.dream_guard) if self.dream_guard.on else base


@dataclass
class QuickstartConfig(RecipeConfig):
    """`dreamgym quickstart`: the whole recipe on one environment with the tiny preset, sized for 2 CPU cores (the
    shared recipe fields in `RecipeConfig`)."""

    em_steps: int = ranged(1600, ge=1)
    """Experience-model SFT steps."""
    em_batch_size: int = ranged(8, ge=1)
    """Experience-model sequences per step (small batches: more updates for the same compute)."""
    sft_batch_size: int = ranged(16, ge=1)
    """Policy SFT turns per optimiser step."""
    sft_lr: float = ranged(1e-3, gt=0)
    """Policy SFT learning rate."""
    dream_guard: AuditGuardConfig = field(default_factory=lambda: AuditGuardConfig(max_false_success_rate=0.5))
    """The audit guard of the DreamGym rows (`dream.guard` of `dreamgym train`; on here, at 0.5); a guarded row
    counts its audit's real steps as its own. `dream_guard.max_false_success_rate=null` turns it off."""


RECIPE_OWN_KEYS = ("group_size", "tasks_per_iteration")
"""`dreamgym train` fields a recipe sets for every RL row from its own fields of the same names."""


def check_recipe(eval_seeds: Sequence[int], offline_mix: str, sft_policy: str, train_overrides: Sequence[str],
                 em_overrides: Sequence[str]) -> None:
    """The rules a recipe's config (quickstart, table) shares: some evaluation seed, an SFT policy that is part of the
    offline mix, and `dreamgym train` / `dreamgym train-em` overrides checked against their configs now, not when
    the stage that uses them starts (an hour later)."""
    from dreamgym.commands.collect import parse_mix

    if not eval_seeds:
        raise ConfigError("eval_seeds", "need at least one evaluation seed", "a list of seeds >= 0")
    try:
        mix = parse_mix(offline_mix)
    except ValueError as e:
        raise ConfigError("offline_mix", str(e), POLICY_MIX) from None
    if sft_policy not in mix:
        raise ConfigError("sft_policy", f"{sft_policy!r} is not a policy of offline_mix {offline_mix!r}")
    for name, cls, overrides in (("train_overrides", TrainConfig, train_overrides),
                                 ("em_overrides", TrainEMConfig, em_overrides)):
        try:
            load_config(cls, None, list(overrides))
        except ConfigError as e:
            raise ConfigError(name, str(e)) from None
    for key in RECIPE_OWN_KEYS:  # each RL row sets these from the recipe's own field: an override would be lost
        if key in parse_overrides(list(train_overrides)):
            raise ConfigError("train_overrides", f"{key} is the recipe's own field {key}, not a train override")


def quickstart(q: QuickstartConfig, progress: bool = True) -> dict[str, Any]:
    """The quickstart: one run in `q.run_dir` (at `q.seed`, or at the one seed `q.seeds` holds), or with several
    `q.seeds` one run per seed (`quickstart_seeds`). Returns the rows' records and episodes, the wall time and the
    machine record."""
    q = dataclasses.replace(q, run_dir=q.run_dir or "runs/quickstart")
    if len(q.seeds) > 1:
        return quickstart_seeds(q, progress)
    if q.seeds:
        q = dataclasses.replace(q, seed=q.seeds[0], seeds=[])
    t0 = time.time()
    r = Recipe(q.env, q.run_dir, seed=q.seed, eval_tasks=q.eval_tasks, eval_seeds=q.eval_seeds,
               eval_temperature=q.eval_temperature, progress=progress, train_overrides=q.train_overrides,
               em_overrides=q.em_overrides, threads=q.threads)
    r.collect_offline(q.offline_episodes, q.offline_mix, q.sft_policy)
    em = r.experience_model("em", adjust=lambda c: dataclasses.replace(c, max_steps=q.em_steps,
                                                                        batch_size=q.em_batch_size))
    r.sft(epochs=q.sft_epochs, lr=q.sft_lr, batch_size=q.sft_batch_size, stop_at=q.sft_stop_at,
          check_every=q.sft_check_every)
    rl: dict[str, Any] = dict(algo="grpo", tasks_per_iteration=q.tasks_per_iteration, group_size=q.group_size, lr=q.lr)
    r.run_method("DreamGym GRPO", mode="dream", em=em, dream=q.dream(), dream_iterations=q.dream_iterations, **rl)
    r.run_method("DreamGym-S2R GRPO", mode="s2r", from_method="DreamGym GRPO", budget=q.budget,
                 real_iterations=q.real_iterations, **rl)
    r.run_method("GRPO real", mode="real", budget=q.budget, real_iterations=q.real_iterations, **rl)
    wall = time.time() - t0
    report = r.write_report(f"DreamGym quickstart — {q.env}, tiny preset, {len(r.test_tasks)} held-out test tasks",
                            f"\nTotal wall time: {wall:.0f} s{r.resumed_note()}; offline real transitions: "
                            f"{r.real_offline}.\n\n"
                            + sft_start_note(r.results["SFT"].get("sft_stop", {}), q) + "\n"
                            + row_findings("SFT", results=r.results) + recorded_note(q.env))
    print("\n" + report)
    return {"results": r.results, "episodes": r.episodes, "wall_time_s": wall, "machine": r.machine}


def quickstart_seeds(q: QuickstartConfig, progress: bool = True) -> dict[str, Any]:
    """The quickstart once per seed of `q.seeds`, each a whole one-seed quickstart in `<run_dir>/seed-<s>/`,
    `q.workers` at a time; then the report over seeds at `q.run_dir`."""
    t0 = time.time()
    per_seed = run_seeds(quickstart, q, seeds=q.seeds, run_dir=q.run_dir, workers=q.workers, progress=progress)
    wall = time.time() - t0
    stops = [per_seed[s]["results"]["SFT"].get("sft_stop", {}) for s in q.seeds]
    met = sum(bool(st.get("criterion_met")) for st in stops)
    extra = (f"\nTotal wall time: {wall:.0f} s. The SFT starts stopped at steps "
             f"{' / '.join(str(st.get('step', '?')) for st in stops)}; {met} of {len(stops)} met "
             f"sft_stop_at={q.sft_stop_at} (each seed's report.md says more).\n" + recorded_note(q.env))
    report = write_seeds_report(q.run_dir, f"DreamGym quickstart — {q.env}, tiny preset, seeds "
                                           f"{', '.join(map(str, q.seeds))}", q.env, per_seed, extra,
                                workers=q.workers)
    print("\n" + report)
    return {"per_seed": per_seed, "wall_time_s": wall}


def sft_start_note(stop: dict[str, Any], q: QuickstartConfig) -> str:
    """Where the SFT start stopped and why: the line of the report that says which start every RL row began from."""
    if not stop:
        return "The SFT start was trained by an earlier version of the recipe (no stop record)."
    if stop.get("criterion_met"):
        return (f"The SFT start stopped at step {stop['step']}, the first check (every {q.sft_check_every} steps) at "
                f"which the policy replayed its demonstrations with probability {stop['replay_success']:.3f} >= "
                f"sft_stop_at={q.sft_stop_at}.")
    kept = stop.get("kept_best")
    weights = (f" It ends with the weights of its best check, step {int(kept['step'])} (the last weights replayed "
               f"them with probability {kept['last_replay_success']:.3f})." if kept else "")
    return (f"The SFT start ran to its cap ({stop['step']} steps, sft_epochs={q.sft_epochs}) and replays its "
            f"demonstrations with probability {stop['replay_success']:.3f}, short of sft_stop_at={q.sft_stop_at}: "
            f"a weaker start than the defaults intend, from which RL may not move.{weights}")


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
    parser = CommandParser(prog="dreamgym quickstart",
                           description="The full DreamGym recipe on one environment (tiny preset).",
                           epilog="Config fields (key=value):\n" + describe(QuickstartConfig),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="YAML file with QuickstartConfig fields")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_seeds_options(parser)
    parser.add_argument("overrides", nargs="*", help="e.g. env=dial dream_iterations=10")
    args = parser.parse_intermixed_args(argv)
    if args.no_progress:
        from dreamgym.utils.quiet import quiet_progress_bars

        quiet_progress_bars()  # other libraries' bars too
    try:
        q = load_config(QuickstartConfig, args.config, args.overrides + seeds_overrides(args))
    except ConfigError as e:
        return fail("quickstart", e)
    try:
        quickstart(q, progress=not args.no_progress)
    except (DataError, SeedRunError) as e:  # a damaged file in the run folder (named with its line), a seed's run
        return fail("quickstart", e)
    return 0
