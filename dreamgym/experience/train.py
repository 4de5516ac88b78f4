"""Supervised training of the experience model, and the `dreamgym train-em` command.

Owns: `TrainEMConfig`, the SFT loop that teaches a preset the output format (length-bucketed batches of
training examples, the schedule of optimiser steps, resume), the curriculum's task-writing examples mixed into
the data, the held-out split (`HeldOutConfig`: trajectories set aside by the seed, never trained on, listed in
`heldout.json`) scored by the report function the caller passes (`dreamgym train-em` passes the fidelity gate,
`dreamgym.experience.fidelity.heldout_report`), and the run's outputs: the experience-model checkpoint
(`dreamgym.experience.checkpoint`) and summary.
The training step itself is the agent trainers' (`dreamgym.trainers.common`): the same model and optimiser configs
(`ModelConfig`, `OptimConfig`: `model.*` and `optim.*`, as on `dreamgym train`), model preparation (LoRA or full
fine-tuning in float32), AdamW, warm-up/cosine schedule, micro-batched completion-only loss under bf16 autocast on
CUDA, and the same atomic, resumable checkpoint in `checkpoint/`.
Must not know: agent trainers' algorithms, the synthetic environment, any concrete environment (the family's
reasoning teacher is reached through `dreamgym.experience.reasoning`).
transformers and peft are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.checks import env_family, family_choices, trajectory_file
from dreamgym.config import CommandParser, ConfigError, checked, describe, fail, load_config, ranged, renamed, to_dict
from dreamgym.experience.checkpoint import CHECKPOINT_SUBDIR, EM_CONFIG_FILE, MODEL_SUBDIR
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.data import balance_outcomes, buffer_for, em_transitions, encode_chat_examples, encode_examples
from dreamgym.experience.format import FORMAT_VERSION, RESET_ACTION
from dreamgym.experience.model import ExperienceModel
from dreamgym.utils.metric_names import EM
from dreamgym.utils.paths import atomic_write_text
from dreamgym.trainers.common import ModelConfig, OptimConfig
from dreamgym.types import Trajectory, Transition

log = logging.getLogger(__name__)


def _em_optim() -> OptimConfig:
    """train-em's optimiser defaults: a learning rate by the kind of training, a 30-step warm-up, then cosine decay
    to 10% of the peak at the last step."""
    return OptimConfig(lr=None, beta2=0.98, warmup_steps=30, schedule="cosine", min_lr_ratio=0.1,
                       micro_batch_tokens=8192)


RENAMED_KEYS = {
    **{f"model.{f.name}": f"em.{f.name}" for f in dataclasses.fields(ExperienceModelConfig)},
    **{key: f"model.{key}" for key in ("preset", "lora", "lora_r", "lora_alpha", "quantize", "fsdp",
                                       "gradient_checkpointing")},
    **{key: f"optim.{key}" for key in ("lr", "weight_decay", "warmup_steps", "micro_batch_tokens")},
}
"""Keys of earlier versions: the experience model's own settings moved from `model.*` to `em.*`, and `model.*` and
`optim.*` are now `dreamgym train`'s model and optimiser configs. Refused naming the new key."""


HELDOUT_FILE = "heldout.json"
"""The run folder's record of the held-out split: the data file, the seed, the held-out trajectories' indices in
it and their ids."""


@dataclass
class HeldOutConfig:
    """The held-out split `dreamgym train-em` scores the trained model on, and the fidelity gate's thresholds (why
    each value: docs/decisions.md). A threshold of 0 is off; a figure the split cannot measure (no reward 1 in it)
    is reported as such and not gated."""

    share: float = ranged(0.1, ge=0, lt=1)
    """Share of the trajectories held out (chosen by the run's seed), never trained on; 0: no held-out report."""
    max_steps: int = ranged(200, ge=1)
    """Held-out steps scored at most (sampled by the seed), which bounds the report's time."""
    batch_size: int = ranged(16, ge=1)
    """Predictions per generate call while scoring."""
    every: int = ranged(0, ge=0)
    """Also score the split every N optimiser steps (the fidelity curve: `heldout_curve` in the summary, `em/heldout/*`
    in the metrics); 0: only at the end."""
    patience: int = ranged(0, ge=0)
    """Stop training once next-state F1 has not beaten its best by `min_delta` for this many scorings in a row (needs
    `every`); 0: train every step."""
    min_delta: float = ranged(0.005, ge=0)
    """Least rise of next-state F1 over its best that counts as an improvement for `patience`."""
    min_format_validity: float = ranged(0.95, ge=0, le=1)
    """Least share of answers parsed without the failure state."""
    min_state_f1: float = ranged(0.5, ge=0, le=1)
    """Least next-state token F1."""
    min_state_em: float = ranged(0.0, ge=0, le=1)
    """Least next-state exact match."""
    min_reward1_recall: float = ranged(0.5, ge=0, le=1)
    """Least share of the real reward-1 steps predicted as reward 1."""
    min_reward1_precision: float = ranged(0.5, ge=0, le=1)
    """Least share of the predicted reward-1 steps that are real ones."""
    min_done_acc: float = ranged(0.9, ge=0, le=1)
    """Least accuracy of the predicted episode end."""
    min_distinct_share: float = ranged(0.5, ge=0, le=1)
    """Least ratio of predicted to real distinct next states per distinct (state, action): the collapse detector."""
    reward_from: Literal["auto", "model", "state"] = "auto"
    """Where the dream this model is for takes a step's reward and end (the dream's `dream.reward_from`): the gate
    judges reward-1 recall and precision and done accuracy only when that is the model ('model', or 'auto' for a
    family without `grounded_outcome`); otherwise they are reported and not gated."""

    def thresholds(self) -> dict[str, float]:
        """Each gated figure's least value, by the figure's name (the field is `min_<name>`)."""
        return {"format_validity": self.min_format_validity, "state_f1": self.min_state_f1,
                "state_em": self.min_state_em, "reward1_recall": self.min_reward1_recall,
                "reward1_precision": self.min_reward1_precision, "done_acc": self.min_done_acc,
                "distinct_share": self.min_distinct_share}


HeldOutReport = Callable[[ExperienceModel, list[Transition], HeldOutConfig], dict[str, Any]]
"""Scores the trained model on held-out transitions against the thresholds; returns the report (the summary's
`heldout`), which carries `fit` (bool) and the figures to log (`metrics`)."""


@renamed(RENAMED_KEYS)
@dataclass
class TrainEMConfig:
    """`dreamgym train-em`: SFT of the experience model on annotated real transitions."""

    env: str = checked("dial", env_family, family_choices)
    """Environment family of the data (dial, webshop, alfworld, ...)."""
    data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """Offline real trajectories (JSONL or Parquet); required to train."""
    out: str = ""
    """Run directory for the checkpoint (default runs/em-<env>-<model.preset name>)."""
    em: ExperienceModelConfig = field(default_factory=ExperienceModelConfig)
    """Prompt/output settings of the experience model (saved with the checkpoint)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model trained and how (the same fields as `dreamgym train`'s; `policy_url` does not apply)."""
    optim: OptimConfig = field(default_factory=_em_optim)
    """Optimiser, schedule and gradient accumulation (the same fields as `dreamgym train`'s)."""
    teacher: Literal["env", "keep"] = "env"
    """Reasoning traces: 'env' (family explain, fills only missing traces) or 'keep' (use stored traces)."""
    batch_size: int = ranged(16, ge=1)
    """Sequences per optimizer step."""
    epochs: float = ranged(2.0, gt=0)
    """Passes over the data (ignored when max_steps > 0)."""
    max_steps: int = ranged(0, ge=0)
    """Optimizer steps; 0: derived from epochs."""
    max_transitions: int = ranged(0, ge=0)
    """Use at most this many transitions (0: all), sampled with the seed."""
    balance_outcomes: int = ranged(4, ge=1)
    """Repeat the final transitions of the rarer outcome (won vs not won) up to this many times so both outcomes
    weigh alike (1: off)."""
    context_dropout: float = ranged(0.1, ge=0, le=1)
    """Share of training prompts without their retrieved examples (and, independently, without history)."""
    seed: int = ranged(0, ge=0, le=2**32 - 1)
    """Seed for data order and dropout."""
    threads: int = ranged(0, ge=0)
    """CPU threads of torch and of numpy's BLAS (retrieval scores); both change the trained weights. 0: OMP_NUM_THREADS
    when it is set, else torch's own count (the rule of every command)."""
    device: str | None = None
    """'cpu', 'cuda' or None (pick automatically)."""
    log_every: int = ranged(20, ge=1)
    """Log the loss every N steps."""
    save_every: int = ranged(500, ge=0)
    """Write the resumable checkpoint (`out`/checkpoint) every N steps; 0: only at the end."""
    resume: bool = True
    """Continue from `out`/checkpoint when one exists (false: train from the start, replacing it)."""
    heldout: HeldOutConfig = field(default_factory=HeldOutConfig)
    """The held-out split `dreamgym train-em` ends with a fidelity report on, and the report's thresholds."""
    task_writing: int = ranged(2000, ge=0)
    """Also teach the curriculum's two prompts (write harder variants of a task; pick one) with at most this many
    examples each, built from the tasks the data shows solved (`curriculum.writing_examples`). 0: none."""

    def resolved_out(self) -> Path:
        """The checkpoint's folder: `out`, or runs/em-<env>-<preset>."""
        return Path(self.out or f"runs/em-{self.env}-{Path(self.model.preset).name}")

    def validate(self) -> None:
        if self.model.policy_url:
            raise ConfigError("model.policy_url", "train-em samples no rollouts", "empty")
        if self.heldout.patience and not self.heldout.every:
            raise ConfigError("heldout.patience", "stopping early needs a held-out score during training",
                              "0, or heldout.every > 0")


def _batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (sorted within windows of 50 batches) to cut padding."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    window = batch_size * 50
    batches = []
    for w in range(0, len(idx), window):
        chunk = sorted(idx[w:w + window], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def split_heldout(trajectories: list[Trajectory], share: float, seed: int) -> list[int]:
    """Indices of the held-out trajectories: `share` of them (at least one, and never all), drawn by `seed`, in
    order. Whole trajectories, so no step of a held-out episode is trained on."""
    n = len(trajectories)
    k = min(n - 1, max(1, round(share * n))) if share > 0 else 0
    return sorted(random.Random(f"heldout-{seed}").sample(range(n), k)) if k > 0 else []


def train_em(cfg: TrainEMConfig, trajectories: list[Trajectory] | None = None,
             progress: Callable[[str], None] | None = None,
             heldout_report: HeldOutReport | None = None) -> dict[str, Any]:
    """SFT of the experience model; writes the checkpoint to `cfg.out` and returns a summary.

    With `heldout_report` and `cfg.heldout.share` > 0, that share of the trajectories is held out (by the seed,
    recorded in `heldout.json`), never trained on, and the trained model is scored on at most
    `cfg.heldout.max_steps` of its steps at the end; the report is the summary's `heldout`. Without one, every
    trajectory is trained on.

    Loss (the paper's joint loss in our format): mean token cross-entropy over the whole completion,
    -log P(R*, s_{t+1}, r, done | task, H, s_t, a_t, D_k), prompt tokens not trained. Inputs are the
    transitions' own histories and the k neighbours retrieved from a buffer of the training data, excluding
    each transition's own trajectory (so the model learns to use examples it did not come from) but not the
    identical steps of other episodes: a synthetic step retrieves those too, and in a deterministic
    environment copying them is right (excluding them taught the model that the nearest example's outcome is
    usually wrong; measured on the dial: trained that way, the model gave every submit the same reward).

    Shapes: an optimiser step takes `batch_size` (prompt, completion) rows of similar length, packed into
    micro-batches of [b, T] padded tokens (b x T <= micro_batch_tokens) by `trainers.common.supervised_step`.

    The steps, in order: `_open_run` (processes, threads, the checkpoint to resume), `_prepare_data` (held-out
    split, transitions, retrieved examples), `_EMRun` (the model, its encoded examples and the optimiser), its
    `train` (the loop, with held-out scoring during training) and its `finish` (the checkpoint, the final held-out
    report, the summary).
    """
    say = progress or (lambda m: log.info(m))
    t_start = time.perf_counter()
    opened = _open_run(cfg)
    data = _prepare_data(cfg, opened.out, trajectories, heldout_report is not None, say)
    run = _EMRun(cfg, opened, data, heldout_report, say)
    run.train()
    return run.finish(t_start)


@dataclass
class _OpenedRun:
    """Where a train-em run writes and what it continues (`_open_run`)."""

    device: Any
    """Where the model trains (a device name or a `torch.device`)."""
    threads: int
    out: Path
    ckpt: Path | None
    """The checkpoint to resume from (None: a fresh run)."""
    resumed_lora: bool
    """Whether that checkpoint trained a LoRA adapter."""


def _open_run(cfg: TrainEMConfig) -> _OpenedRun:
    """The run's processes, threads and folder, and the checkpoint it resumes; fails before any data or model loads
    when that checkpoint cannot be resumed (CheckpointError) or was trained otherwise (ConfigError)."""
    from dreamgym.llm.presets import pick_device
    from dreamgym.trainers.checkpoint import read_meta, resumable_checkpoint
    from dreamgym.utils import distributed
    from dreamgym.utils.metrics import pin_threads, resolve_threads

    # Both pools at the one count: numpy's BLAS scores the retrieved examples of every training prompt, and would
    # otherwise follow OPENBLAS_NUM_THREADS whatever torch runs on; the count changes the trained weights.
    # Several processes (torchrun): each takes its share of every step's micro-batches; rank 0 alone writes.
    distributed.init()
    if cfg.heldout.every and distributed.world() > 1:
        raise ConfigError("heldout.every", f"scoring during training runs in one process, not {distributed.world()}",
                          "0 with torchrun (the final report still runs)")
    device = cfg.device or (distributed.device() if distributed.launched() else pick_device())
    threads = resolve_threads(cfg.threads)
    pin_threads(threads, torch_threads=not str(device).startswith("cuda"))
    out = cfg.resolved_out()
    out.mkdir(parents=True, exist_ok=True)
    # A checkpoint that cannot be resumed fails here, before data or model load (CheckpointError names the problem).
    # Rank 0 first: opening a checkpoint can repair an interrupted switch, which must happen once.
    ckpt = resumable_checkpoint(out / CHECKPOINT_SUBDIR) if cfg.resume and distributed.is_main() else None
    distributed.barrier("opening the checkpoint")
    if cfg.resume and not distributed.is_main():
        ckpt = resumable_checkpoint(out / CHECKPOINT_SUBDIR)
    resumed_lora = ckpt is not None and read_meta(ckpt).get("kind") == "lora"
    if ckpt is not None and cfg.model.lora is not None and cfg.model.lora != resumed_lora:
        raise ConfigError(f"model.lora={cfg.model.lora} but the run in {out} trained "
                          f"{'a LoRA adapter' if resumed_lora else 'all weights'}; resume with the same setting")
    return _OpenedRun(device, threads, out, ckpt, resumed_lora)


@dataclass
class _PreparedData:
    """The transitions a train-em run learns from, with their retrieved examples (`_prepare_data`)."""

    trajectories: list[Trajectory]
    """The trajectories trained on (the held-out ones removed)."""
    held_trajectories: list[Trajectory]
    transitions: list[Transition]
    examples: list[list[Transition]]
    """Each transition's retrieved neighbours."""
    buffer: Any
    """The retrieval buffer of the training data (None without retrieval)."""
    retrieval_time_s: float


def _prepare_data(cfg: TrainEMConfig, out: Path, trajectories: list[Trajectory] | None, hold_out: bool,
                  say: Callable[[str], None]) -> _PreparedData:
    """The held-out split (kept in `heldout.json`, with `hold_out`), the training transitions (sampled down to
    `max_transitions`, annotated by the environment teacher), each one's retrieved examples, context dropout and
    outcome balancing."""
    from dreamgym.utils import distributed

    mcfg = cfg.em
    if trajectories is None:
        from dreamgym.data import load_trajectories

        trajectories = load_trajectories(cfg.data)
    held_idx = split_heldout(trajectories, cfg.heldout.share, cfg.seed) if hold_out else []
    held_trajectories = [trajectories[i] for i in held_idx]
    if held_idx:
        chosen = set(held_idx)
        trajectories = [t for i, t in enumerate(trajectories) if i not in chosen]
        if distributed.is_main():
            atomic_write_text(out / HELDOUT_FILE, json.dumps(
                {"data": cfg.data, "seed": cfg.seed, "share": cfg.heldout.share, "trajectories": held_idx,
                 "ids": [t.id for t in held_trajectories]}, indent=1))
        say(f"{len(held_idx)} trajectories held out for the fidelity report ({out / HELDOUT_FILE})")
    transitions = em_transitions(trajectories, history=mcfg.history, binary_reward=mcfg.binary_reward)
    rng = random.Random(cfg.seed)
    if cfg.max_transitions and len(transitions) > cfg.max_transitions:
        transitions = rng.sample(transitions, cfg.max_transitions)
    if mcfg.use_reasoning and cfg.teacher == "env":
        from dreamgym.experience.reasoning import EnvTeacher, annotate

        transitions = annotate(transitions, EnvTeacher(cfg.env))
    say(f"{len(trajectories)} trajectories -> {len(transitions)} transitions")

    t0 = time.perf_counter()
    buf = None
    if mcfg.use_retrieval and mcfg.k > 0:
        buf = buffer_for(transitions, mcfg.embedder)
        examples: list[list[Transition]] = []
        for i in range(0, len(transitions), 512):
            examples += buf.retrieve(transitions[i:i + 512], k=mcfg.k, env=None, real_only=False,
                                     mmr_lambda=mcfg.mmr_lambda, exclude_same_trajectory=True,
                                     exclude_twins=False)
    else:
        examples = [[] for _ in transitions]
    t_retrieval = time.perf_counter() - t0
    if cfg.context_dropout > 0:
        drop = random.Random(cfg.seed + 1)
        examples = [[] if drop.random() < cfg.context_dropout else ex for ex in examples]
        transitions = [dataclasses.replace(t, history=[]) if t.history and drop.random() < cfg.context_dropout
                       else t for t in transitions]

    transitions, examples = balance_outcomes(transitions, examples, cfg.balance_outcomes)
    return _PreparedData(trajectories, held_trajectories, transitions, examples, buf, t_retrieval)


class _EMRun:
    """One train-em run from its prepared data: the model and its encoded examples, the optimiser (resumed from the
    checkpoint), the training loop (`train`), held-out scoring (`score`) and the end (`finish`)."""

    def __init__(self, cfg: TrainEMConfig, opened: _OpenedRun, data: _PreparedData,
                 heldout_report: HeldOutReport | None, say: Callable[[str], None]):
        from dreamgym.llm.hf import HFBackend
        from dreamgym.llm.presets import load_preset
        from dreamgym.trainers.checkpoint import is_peft, load_optimizer_state, read_checkpoint_state
        from dreamgym.trainers.common import (make_optimizer, model_device, prepare_policy, set_rng_state,
                                              trainable_parameters)

        self.cfg, self.opened, self.data, self.heldout_report, self.say = cfg, opened, data, heldout_report, say
        mcfg = cfg.em
        model, tokenizer = load_preset(cfg.model.preset, device=opened.device, quantize=cfg.model.quantize)
        model = prepare_policy(model, dataclasses.replace(cfg.model, lora=opened.resumed_lora
                                                          if opened.ckpt is not None else cfg.model.lora))
        self.model, self.tokenizer = model, tokenizer
        self.use_lora = is_peft(model)
        backend = HFBackend(model, tokenizer)
        max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if max_pos and mcfg.max_prompt_tokens + mcfg.max_new_tokens > max_pos:
            raise ConfigError(f"em.max_prompt_tokens + em.max_new_tokens = "
                              f"{mcfg.max_prompt_tokens + mcfg.max_new_tokens} exceeds the model's {max_pos} "
                              "positions")
        self._encode(backend)
        self.optim = cfg.optim.resolved(self.use_lora)
        self.params = trainable_parameters(model)
        self.opt = make_optimizer(self.params, self.optim)
        self.step = 0
        self.curve: list[dict[str, Any]] = []  # the held-out scorings so far: {"step", "time_s", figures}, saved
        self.stopped_early = False  # saved too: a run that stopped early is finished, and resuming it trains no more
        if opened.ckpt is not None:
            state = read_checkpoint_state(opened.ckpt, model)
            load_optimizer_state(model, self.opt, state)
            self.step = int(state["global_step"])
            set_rng_state(state["rng"])
            self.curve = list(state.get("heldout_curve", []))  # absent in checkpoints of earlier versions
            self.stopped_early = bool(state.get("stopped_early", False))
            say(f"resuming from step {self.step}")
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.torch_device = model_device(model)
        self.metrics: Any = None
        self.held_steps = self._held_steps()
        self.last_report: dict[str, Any] | None = None
        self.last_loss = float("nan")
        self.train_start = time.perf_counter()

    def _encode(self, backend: Any) -> None:
        """The training rows: each transition's (prompt, completion) ids, and the task-writing examples."""
        cfg, mcfg = self.cfg, self.cfg.em
        self.stats: Counter[str] = Counter()
        t0 = time.perf_counter()
        data = encode_examples(self.data.transitions, self.data.examples, mcfg, backend, self.stats)
        if cfg.task_writing > 0:
            from dreamgym.curriculum.generator import CurriculumConfig, solved_task_steps, writing_examples

            pairs = writing_examples(solved_task_steps(self.data.trajectories),
                                     n_variants=CurriculumConfig().n_variants, max_examples=cfg.task_writing,
                                     seed=cfg.seed)
            writing = encode_chat_examples(pairs, backend, mcfg.max_new_tokens, self.stats)
            self.stats["task_writing_examples"] += len(writing)
            data += writing
        self.encode_time_s = time.perf_counter() - t0
        if not data:
            raise ValueError("no training examples (empty data, or every completion longer than max_new_tokens)")
        self.n_examples = len(data)
        self.rows = [(seq[:plen], seq[plen:]) for seq, plen in data]  # (prompt ids, completion ids)
        self.lengths = [len(seq) for seq, _ in data]
        self.n_batches = math.ceil(len(data) / cfg.batch_size)
        self.total = cfg.max_steps or max(1, int(round(cfg.epochs * self.n_batches)))
        self.say(f"{len(data)} examples (mean {sum(self.lengths) / len(self.lengths):.0f} tokens, max "
                 f"{max(self.lengths)}), {self.total} steps of {cfg.batch_size}; counts {dict(self.stats)}")

    def _held_steps(self) -> list[Transition]:
        """The held-out steps scored (at most `heldout.max_steps`, a seeded sample), none without a report."""
        cfg = self.cfg
        if self.heldout_report is None or not self.data.held_trajectories:
            return []
        held = em_transitions(self.data.held_trajectories, history=cfg.em.history,
                              binary_reward=cfg.em.binary_reward)
        held_steps = [t for t in held if t.action != RESET_ACTION]
        if len(held_steps) > cfg.heldout.max_steps:
            held_steps = random.Random(f"heldout-steps-{cfg.seed}").sample(held_steps, cfg.heldout.max_steps)
        return held_steps

    def save_state(self) -> dict[str, Any] | None:
        """Write the resumable checkpoint; returns a sharded model's gathered weights (None unsharded). Every rank:
        a sharded model's weights and optimizer state are gathered to rank 0, which writes."""
        from dreamgym.trainers.checkpoint import optimizer_state, write_checkpoint
        from dreamgym.trainers.common import rng_state
        from dreamgym.utils import distributed, fsdp

        cfg, step = self.cfg, self.step
        weights = fsdp.full_state(self.model) if fsdp.is_sharded(self.model) else None
        opt_state = optimizer_state(self.model, self.opt)
        if not distributed.is_main():
            return weights
        write_checkpoint(self.opened.out / CHECKPOINT_SUBDIR, self.model, self.tokenizer,
                         {**opt_state, "rng": rng_state(), "iteration": step // self.n_batches, "global_step": step,
                          "heldout_curve": self.curve, "stopped_early": self.stopped_early},
                         {"algo": "experience-model", "base": cfg.model.preset, "iteration": step // self.n_batches,
                          "global_step": step, "config": to_dict(cfg)}, weights)
        return weights

    def schedule(self, epoch: int) -> list[list[int]]:
        """The batches of `epoch`: a pure function of (seed, epoch), so a resumed run sees the same batches."""
        return _batches(self.lengths, self.cfg.batch_size, random.Random(self.cfg.seed * 1000 + epoch))

    def score(self) -> dict[str, Any]:
        """The held-out report of the model as it is now. Scored as a dream would use the model (its buffer holds
        the training data only), in eval mode and with the RNG states put back after, so a run that scores during
        training trains exactly the weights of one that does not."""
        from dreamgym.llm.hf import HFBackend
        from dreamgym.trainers.common import rng_state, set_rng_state

        assert self.heldout_report is not None
        cfg, model, curve = self.cfg, self.model, self.curve
        saved, was_training = rng_state(), model.training
        model.eval()
        t = time.perf_counter()
        try:
            em = ExperienceModel(HFBackend(model, self.tokenizer, batch_size=cfg.heldout.batch_size),
                                 buffer=self.data.buffer, config=cfg.em, env=cfg.env)
            report = self.heldout_report(em, self.held_steps, cfg.heldout)
        finally:
            set_rng_state(saved)
            model.train(was_training)
        report["time_s"] = time.perf_counter() - t
        point = {"step": self.step, "time_s": report["time_s"], **report["metrics"]}
        if curve and curve[-1]["step"] == self.step:  # a resumed finished run re-scoring its last weights: logged
            curve[-1] = point
        else:
            curve.append(point)
            if self.metrics is not None:
                self.metrics.log(self.step, report["metrics"], prefix=EM + "heldout/")
        validity = report["format_validity"]
        self.say(f"held-out at step {self.step}: next-state F1 {report['state_f1']:.3f}, exact match "
                 f"{report['state_em']:.3f} (copying the state: {report['copy_state_em']:.3f}), format validity "
                 f"{'-' if validity is None else f'{validity:.3f}'}, done accuracy {report['done_acc']:.3f} "
                 f"({report['time_s']:.0f}s)")
        return report

    def stalled(self) -> bool:
        """Whether next-state F1 has not beaten its best by `min_delta` for `patience` scorings in a row."""
        f1 = [p["state_f1"] for p in self.curve]
        k = self.cfg.heldout.patience
        return 0 < k < len(f1) and max(f1[-k:]) < max(f1[:-k]) + self.cfg.heldout.min_delta

    def train(self) -> None:
        """The training loop, from the checkpoint's step to `total` (or until held-out scoring stops it early),
        logging every `log_every` steps and saving every `save_every`."""
        from dreamgym.trainers.common import set_lr, supervised_step
        from dreamgym.utils import distributed
        from dreamgym.utils.metrics import MetricsLogger

        cfg, total, heldout = self.cfg, self.total, self.cfg.heldout
        self.metrics = MetricsLogger(self.opened.out, tensorboard=False) if distributed.is_main() else None
        if self.metrics is not None:
            # rows logged after the checkpoint are logged again
            self.metrics.resume(self.step if self.opened.ckpt is not None else None)
        self.model.train()
        self.train_start = t0 = time.perf_counter()
        tokens_seen, loss_sum, loss_n = 0, 0.0, 0
        epoch_batches: tuple[int, list[list[int]]] = (-1, [])
        try:
            while self.step < total and not self.stopped_early:
                epoch, pos = divmod(self.step, self.n_batches)
                if epoch_batches[0] != epoch:
                    epoch_batches = (epoch, self.schedule(epoch))
                batch = epoch_batches[1][pos]
                lr = set_lr(self.opt, self.optim, self.step, total)
                st = supervised_step(self.model, self.opt, self.params, self.optim, [self.rows[i] for i in batch],
                                     self.pad, self.torch_device)
                self.step += 1
                step = self.step
                tokens_seen += sum(self.lengths[i] for i in batch)
                loss_sum, loss_n = loss_sum + st["loss"], loss_n + 1
                if step % cfg.log_every == 0 or step == total:
                    self.last_loss = loss_sum / loss_n
                    el = time.perf_counter() - t0
                    if self.metrics is not None:
                        self.metrics.log(step, {"loss": self.last_loss, "lr": lr, "grad_norm": st["grad_norm"],
                                                "tokens_per_s": tokens_seen / max(el, 1e-9)}, prefix="em/")
                    self.say(f"step {step}/{total} loss {self.last_loss:.4f} ({el:.0f}s)")
                    loss_sum, loss_n = 0.0, 0
                if self.held_steps and heldout.every and step % heldout.every == 0 and step < total:
                    self.last_report = self.score()
                    if heldout.patience and self.stalled():
                        self.say(f"held-out next-state F1 has not improved by {heldout.min_delta} for "
                                 f"{heldout.patience} scorings: stopping at step {step} of {total}")
                        self.stopped_early = True
                        break
                if cfg.save_every and step % cfg.save_every == 0 and step < total:
                    self.save_state()
        finally:
            if self.metrics is not None:
                self.metrics.close()

    def finish(self, t_start: float) -> dict[str, Any]:
        """The final resumable state first (a later run with more steps continues from it), then the experience
        model: its weights switched atomically, and em_config.json, which makes the folder a finished checkpoint,
        last; then the final held-out report and train_summary.json. Returns the summary."""
        from dreamgym.trainers.checkpoint import atomic_dir
        from dreamgym.utils import distributed
        from dreamgym.utils.metrics import MetricsLogger

        cfg, out, step = self.cfg, self.opened.out, self.step
        self.model.eval()
        weights = self.save_state()
        summary = {"out": str(out), "steps": step, "examples": self.n_examples,
                   "transitions": len(self.data.transitions), "final_loss": self.last_loss,
                   "train_time_s": time.perf_counter() - self.train_start,
                   "retrieval_time_s": self.data.retrieval_time_s, "encode_time_s": self.encode_time_s,
                   "total_time_s": time.perf_counter() - t_start, "lora": self.use_lora, "counts": dict(self.stats),
                   "processes": distributed.world(), "stopped_early": self.stopped_early,
                   "threads": self.opened.threads}
        final = {} if weights is None else {"state_dict": weights}  # a sharded model's, gathered by save_state
        if not distributed.is_main():
            return summary
        with atomic_dir(out / MODEL_SUBDIR) as tmp:
            self.model.save_pretrained(str(tmp), **final)  # type: ignore[operator]  # a transformers or PEFT method
            self.tokenizer.save_pretrained(str(tmp))
        # "model" is the experience model's config (the checkpoint format's name for it), "train" the rest of the
        # run's.
        meta = {"env": cfg.env, "preset": cfg.model.preset, "lora": self.use_lora, "model": to_dict(cfg.em),
                "train": {k: v for k, v in to_dict(cfg).items() if k != "em"}, "format_version": FORMAT_VERSION,
                "steps": step, "final": True}
        atomic_write_text(out / EM_CONFIG_FILE, json.dumps(meta, indent=1))
        if self.heldout_report is not None and self.data.held_trajectories:
            # The last scoring when it was of these weights (a stop after scoring), else a new one.
            if self.last_report is None or self.curve[-1]["step"] != step:
                self.metrics = MetricsLogger(out, tensorboard=False)
                try:
                    self.last_report = self.score()
                finally:
                    self.metrics.close()
            summary["heldout"] = self.last_report
            if cfg.heldout.every:
                summary["heldout_curve"] = self.curve
        atomic_write_text(out / "train_summary.json", json.dumps(summary, indent=1))
        return summary


def closing_lines(summary: dict[str, Any], out: Path) -> str:
    """What `dreamgym train-em` prints at the end: the run in a few lines, the held-out verdict and where the whole
    summary is (the JSON on the terminal was ~90 lines, the figures a user looks for lost in it)."""
    lines = [f"trained {summary['steps']} steps on {summary['examples']} examples ({summary['transitions']} "
             f"transitions) in {summary['total_time_s']:.0f}s, final loss {summary['final_loss']:.4f}, "
             f"{summary.get('threads')} thread(s): {out}"]
    held = summary.get("heldout")
    if held:
        figures = ", ".join(f"{k} {held[k]:.3f}" for k in ("format_validity", "state_f1", "reward1_recall",
                                                           "reward1_precision", "done_acc", "distinct_share")
                            if isinstance(held.get(k), (int, float)))
        verdict = "fit to dream in" if held["fit"] else "NOT fit to dream in"
        lines.append(f"held-out ({held['n']} steps): {figures}: {verdict}")
        if held.get("not_gated"):
            lines.append(f"  not gated: {', '.join(held['not_gated'])}: {held.get('not_gated_reason')}")
        lines += ["  " + line for line in held.get("reward1_worst") or []]
    lines.append(f"summary: {out / 'train_summary.json'}")
    return "\n".join(lines)


def check_inputs(cfg: TrainEMConfig) -> None:
    """Start-up checks before any model loads: the checkpoint folder can be written and, when the run continues
    one there (`resume`), it is this family's experience model; every record of the data reads and is of this
    family. Raises ValueError naming the problem."""
    from dreamgym import provenance
    from dreamgym.utils.filecheck import output_path

    out = cfg.resolved_out()
    output_path(out, "folder")
    if cfg.resume:
        if (out / EM_CONFIG_FILE).is_file():
            provenance.require(provenance.of_em_checkpoint(out), family=cfg.env)
        if (out / CHECKPOINT_SUBDIR / "trainer_state.json").is_file():
            provenance.require(provenance.of_trainer_checkpoint(out / CHECKPOINT_SUBDIR), family=cfg.env,
                               algo=provenance.EM_ALGO)
    provenance.check_trajectories(cfg.data, cfg.env)


def main(argv: list[str] | None = None, heldout_report: HeldOutReport | None = None) -> int:
    """`dreamgym train-em --env dial --data traj.jsonl [--preset tiny] [--out dir] [--config y.yaml] key=value…`"""
    p = CommandParser(prog="dreamgym train-em", description=main.__doc__,
                      epilog="config fields (key=value):\n" + describe(TrainEMConfig),
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", help="environment family")
    p.add_argument("--data", help="offline trajectories (JSONL)")
    p.add_argument("--preset", help="model preset, path or HF id (default tiny; model.preset)")
    p.add_argument("--out", help="checkpoint directory")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (loading and writing weights)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. em.k=2 model.lora_r=8 optim.lr=1e-4")
    a = p.parse_intermixed_args(argv)
    if a.no_progress:
        from dreamgym.utils.quiet import quiet_progress_bars

        quiet_progress_bars()
    over = list(a.overrides) + [f"{k}={v}" for k in ("env", "data", "out") if (v := getattr(a, k)) is not None]
    over += [f"model.preset={a.preset}"] if a.preset is not None else []
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from dreamgym.llm.presets import PresetError
    from dreamgym.trainers.checkpoint import CheckpointError
    from dreamgym.utils import distributed

    try:
        cfg = load_config(TrainEMConfig, a.config, over)
        if not cfg.data:
            raise ConfigError("data", "give the offline trajectories with --data or data=", "a trajectory file")
        check_inputs(cfg)
        summary = train_em(cfg, progress=print, heldout_report=heldout_report)
    except (FileNotFoundError, ValueError, PresetError, CheckpointError) as e:
        return fail("train-em", e)
    if not distributed.is_main():
        return distributed.leave(0)  # after rank 0's last write (train_em returns on the other ranks before it)
    print(closing_lines(summary, cfg.resolved_out()))
    warning = summary.get("heldout", {}).get("warning")
    if warning:  # last, where it is seen: the run succeeded, but its model should not be dreamt in
        print(warning, file=sys.stderr, flush=True)
    return distributed.leave(0)
