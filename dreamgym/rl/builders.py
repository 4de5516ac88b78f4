"""What every way of training builds on: `dreamgym train`, the run loop (`dreamgym.rl.loop`), its modes
(`dreamgym.rl.modes`) and the recipe's rows (`dreamgym.commands.recipe`).

Owns: the two trainer surfaces the loops may use (`OnlineTrainer`, `OfflineTrainer`), building a policy backend and
a trainer of either kind (`build_backend` and its undoing, `close_backend`; `build_online_trainer`,
`build_offline_trainer`), the offline loop
(`train_offline`), the one evaluation path (`Evaluation`).
Must not know: trainers' internals (only the two protocols), the synthetic environment or the experience model,
concrete environments (a family is reached through the `EnvFamily` contract, `dreamgym.envs.family`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dreamgym.data import iter_jsonl_records
from dreamgym.envs.family import EnvFamily
from dreamgym.episode import Episode
from dreamgym.rl.evaluate import EvalConfig, EvalResult, episode_rows, evaluate_policy, load_policy
from dreamgym.utils.jsonl import JsonlAppender
from dreamgym.utils.metrics import MetricsLogger
from dreamgym.rl.rollout import PolicyBackend
from dreamgym.trainers.common import TrainerConfig
from dreamgym.trainers.online import UpdateResult
from dreamgym.types import Task, Trajectory

if TYPE_CHECKING:
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.http import HTTPPolicyBackend
    from dreamgym.trainers.dpo import DPOConfig
    from dreamgym.trainers.grpo import GRPOConfig
    from dreamgym.trainers.ppo import PPOConfig
    from dreamgym.trainers.sft import SFTConfig

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
    """GRPO and PPO: the update of one iteration, on the episodes the run loop played (`dreamgym.rl.loop`)."""

    algo: str
    """Its name in the policy versions of the episodes it learns from (`grpo-seed0-it3`)."""

    def update(self, episodes: Sequence[Episode]) -> UpdateResult: ...


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

    from dreamgym.utils import distributed

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
                         algo: GRPOConfig | PPOConfig, *,
                         admissible_fn: Callable[[str], list[str]] | None = None) -> OnlineTrainer:
    """A GRPO or PPO trainer (by the type of `algo`, its own settings) over `backend` with the shared settings
    `cfg`; with `algo.anchor` on, its demonstrations read and tokenised (`admissible_fn` lists the actions a stored
    state offers, for their prompts)."""
    from dreamgym.data import load_trajectories
    from dreamgym.trainers.anchor import anchor_rows
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer
    from dreamgym.trainers.ppo import PPOTrainer

    trainer: GRPOTrainer | PPOTrainer = GRPOTrainer(backend, algo, cfg) if isinstance(algo, GRPOConfig) \
        else PPOTrainer(backend, algo, cfg)
    if algo.anchor.on:
        trainer.anchor_rows = anchor_rows(load_trajectories(algo.anchor.data), backend, cfg.agent,
                                          only_won=algo.anchor.only_won, admissible_fn=admissible_fn)
        print(f"anchor: {len(trainer.anchor_rows)} demonstration turns from {algo.anchor.data}, "
              f"{algo.anchor.batch_size} a step at weight {algo.anchor.coef:g}")
    return trainer


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


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass
class Evaluation:
    """One evaluation protocol, fixed for a whole run so that its evaluations compare: a policy plays `tasks` of
    `split` once per seed in `seeds`, sampled as `config` says. With `log` (a run's eval.jsonl) each evaluation
    is appended there under its tag, with one record per episode (`episode_rows`, so two runs' evaluations pair
    episode by episode: `experiments/paired_eval.py`), and printed; with `logger` its numbers also go to the
    metrics as eval/*."""

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
                out.append({"tag": tag, "step": step, **res.to_dict(), "episodes": episode_rows(res.episodes)})
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
