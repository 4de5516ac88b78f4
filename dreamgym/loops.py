"""What every way of training builds on: `dreamgym train`, the run loop (`dreamgym.run`), the dream
(`dreamgym.dream`) and the recipe's rows (`dreamgym.recipe`).

Owns: the two trainer surfaces the loops may use (`OnlineTrainer`, `OfflineTrainer`), building a policy backend and
a trainer of either kind (`build_backend` and its undoing, `close_backend`; `build_online_trainer`,
`build_offline_trainer`), the offline loop
(`train_offline`), the one evaluation path (`Evaluation`), which train tasks a run draws from (`task_pool`) and how
one iteration draws them (`iteration_tasks`).
Must not know: trainers' internals (only the two protocols), the synthetic environment or the experience model,
concrete environments (a family is reached through the `EnvFamily` contract, `dreamgym.envs.family`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dreamgym.config import ConfigError
from dreamgym.curriculum import draw_tasks, informative_task_ids
from dreamgym.data import iter_jsonl_records
from dreamgym.envs.family import EnvFamily
from dreamgym.episode import Episode
from dreamgym.evaluate import EvalConfig, EvalResult, evaluate_policy, load_policy
from dreamgym.jsonl import JsonlAppender
from dreamgym.metrics import MetricsLogger
from dreamgym.rollout import PolicyBackend
from dreamgym.seeds import mix_seed
from dreamgym.trainers.common import TrainerConfig
from dreamgym.types import Task, Trajectory

if TYPE_CHECKING:
    from dreamgym.buffer import ReplayBuffer
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.http import HTTPPolicyBackend
    from dreamgym.trainers.dpo import DPOConfig
    from dreamgym.trainers.grpo import GRPOConfig
    from dreamgym.trainers.ppo import PPOConfig
    from dreamgym.trainers.sft import SFTConfig

DREAM_VARIANCE_LOG = "curriculum.jsonl"
"""A dream run's curriculum log (in its run folder): per iteration its stats, new tasks and each task's reward
variance. Named here because `task_pool` reads it to aim real RL at the tasks a dream left undecided."""

PeriodicEvaluation = Callable[[str, int], object]
"""`evaluate(tag, iteration)`: what the run loop calls every `eval_every` iterations of a phase (tags it<N>,
dream-it<N>, s2r-it<N>)."""


# ------------------------------------------------------------------------------------------------ trainers
class Trainer(Protocol):
    """What every trainer offers the loops: the policy's backend, the optimiser-step count and exact checkpoints."""

    backend: PolicyBackend
    global_step: int
    """Optimiser steps."""

    def save(self, directory: str | Path, run: Mapping[str, Any] | None = None) -> Path:
        """A checkpoint of the trainer with `run`, the state of the loop that drives it, which `load` returns."""
        ...

    def load(self, directory: str | Path) -> dict[str, Any]: ...


class OnlineTrainer(Trainer, Protocol):
    """GRPO and PPO: the update of one iteration, on the episodes the run loop played (`dreamgym.run`)."""

    algo: str
    """Its name in the policy versions of the episodes it learns from (`grpo-seed0-it3`)."""

    def update(self, episodes: Sequence[Episode]) -> dict[str, float]: ...


class OfflineTrainer(Trainer, Protocol):
    """SFT and DPO: epochs over stored trajectories."""

    iteration: int
    """Completed epochs."""

    def fit(self, trajectories: Sequence[Trajectory], *, epochs: int | None = None, progress: bool = False,
            on_step: Callable[[int], bool] | None = None) -> dict[str, float]: ...


# ------------------------------------------------------------------------------------------------ building
def build_backend(cfg: TrainerConfig, init: str = "", device: str | None = None) -> HFBackend | HTTPPolicyBackend:
    """The policy backend: `init` (a checkpoint or model dir) when given, else the preset, on CUDA when present;
    sampling in this process, or on the server `cfg.model.policy_url` names (the model stays here, for training)."""
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.http import HTTPPolicyBackend, split_urls

    from dreamgym import distributed

    device = device or (distributed.device() if distributed.launched() else None)  # each rank its own GPU
    model, tok, meta = load_policy(init or cfg.model.preset, device=device, quantize=cfg.model.quantize)
    if meta.get("kind") == "lora" and cfg.model.lora is not False:
        # Continue training the same adapters (the PEFT model loads them frozen by default).
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)
    elif meta.get("kind") == "lora":
        model = model.merge_and_unload()
    if cfg.model.policy_url:
        urls, served = split_urls(cfg.model.policy_url)
        return HTTPPolicyBackend(urls, model, tok, served_model=served, timeout=cfg.model.policy_timeout_s,
                                 timeout_field="model.policy_timeout_s")
    return HFBackend(model, tok, batch_size=cfg.model.generation_batch_size)


def close_backend(backend: object) -> None:
    """Undo what `build_backend` set up outside this process: a served policy's adapter taken off its servers and its
    temporary folder deleted. An in-process backend (or None: nothing was built) holds nothing to release."""
    from dreamgym.llm.http import HTTPPolicyBackend

    if isinstance(backend, HTTPPolicyBackend):
        backend.close()


def build_online_trainer(backend: HFBackend | HTTPPolicyBackend, cfg: TrainerConfig,
                         algo: GRPOConfig | PPOConfig) -> OnlineTrainer:
    """A GRPO or PPO trainer (by the type of `algo`, its own settings) over `backend` with the shared settings
    `cfg`."""
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer
    from dreamgym.trainers.ppo import PPOTrainer

    if isinstance(algo, GRPOConfig):
        return GRPOTrainer(backend, algo, cfg)
    return PPOTrainer(backend, algo, cfg)


def build_offline_trainer(backend: HFBackend | HTTPPolicyBackend, cfg: TrainerConfig, algo: SFTConfig | DPOConfig, *,
                          logger: MetricsLogger | None = None,
                          admissible_fn: Callable[[str], list[str]] | None = None) -> OfflineTrainer:
    """An SFT or DPO trainer (by the type of `algo`, its own settings) over `backend` with the shared settings
    `cfg`; `admissible_fn` lists the actions a stored state offers, for the demonstrations' prompts."""
    from dreamgym.trainers.dpo import DPOTrainer
    from dreamgym.trainers.sft import SFTConfig, SFTTrainer

    if isinstance(algo, SFTConfig):
        return SFTTrainer(backend, algo, cfg, logger=logger, admissible_fn=admissible_fn)
    return DPOTrainer(backend, algo, cfg, logger=logger, admissible_fn=admissible_fn)


# ------------------------------------------------------------------------------------------------ tasks
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
        log = src / DREAM_VARIANCE_LOG
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


def iteration_tasks(pool: Sequence[Task], n: int, seed: int, iteration: int) -> list[Task]:
    """The tasks of one iteration: a seeded sample without replacement (with it when the pool is smaller)."""
    return draw_tasks(random.Random(mix_seed(seed, iteration, 11)), pool, n)


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass
class Evaluation:
    """One evaluation protocol, fixed for a whole run so that its evaluations compare: a policy plays `tasks` of
    `split` once per seed in `seeds`, sampled as `config` says. With `log` (a run's eval.jsonl) each evaluation
    is appended there under its tag and printed; with `logger` its numbers also go to the metrics as eval/*."""

    family: EnvFamily
    split: str
    tasks: list[Task]
    seeds: list[int]
    config: EvalConfig
    log: Path | None = None
    logger: MetricsLogger | None = None

    def __call__(self, backend: PolicyBackend, tag: str = "", step: int = 0) -> EvalResult:
        res = evaluate_policy(backend, lambda: self.family.make_env(self.split), self.tasks, self.seeds, self.config)
        if self.log is not None:
            with JsonlAppender(self.log, ensure_ascii=True) as out:  # sets aside a row a kill left torn
                out.append({"tag": tag, "step": step, **res.to_dict()})
        if self.logger is not None:
            self.logger.log(step, res.to_dict(), prefix="eval/")
        if self.log is not None:
            print(f"[eval {tag}] {res}")
        return res

    def recorded_at(self, step: int) -> EvalResult | None:
        """The periodic evaluation `log` already holds for iteration `step`, if the last one was there: the same
        policy on the same tasks, seeds and sampling seed, so evaluating again would repeat it exactly (an ALFWorld
        evaluation of 120 episodes costs ~8 minutes of one core). None when there is none, or it covered other
        tasks."""
        if self.log is None or not self.log.is_file():
            return None
        rows = [rec for _, rec in iter_jsonl_records(self.log, skip_torn_tail=True)]
        if not rows or rows[-1].get("step") != step or rows[-1].get("tag") == "start" or \
                rows[-1].get("n", 0) + rows[-1].get("n_failed", 0) != len(self.tasks) * len(self.seeds):
            return None
        names = {f.name for f in dataclasses.fields(EvalResult)} - {"episodes"}
        print(f"[eval final] = [eval {rows[-1]['tag']}], the evaluation at this iteration")
        return EvalResult(**{k: v for k, v in rows[-1].items() if k in names})


# ------------------------------------------------------------------------------------------------ the offline loop
def train_offline(trainer: OfflineTrainer, data: Sequence[Trajectory], *, save_every: int = 0,
                  checkpoint: Path | None = None, progress: bool = True) -> dict[str, float]:
    """SFT/DPO over `data`, saving to `checkpoint` every `save_every` x 10 optimiser steps."""
    def on_step(step: int) -> bool:
        if save_every and checkpoint is not None and step % (save_every * 10) == 0:
            trainer.save(checkpoint)
        return False

    return trainer.fit(data, progress=progress, on_step=on_step)
