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
    """
    from dreamgym.llm.hf import HFBackend
    from dreamgym.utils import distributed, fsdp
    from dreamgym.utils.metrics import MetricsLogger, pin_threads, resolve_threads
    from dreamgym.llm.presets import load_preset, pick_device
    from dreamgym.trainers.checkpoint import (atomic_dir, is_peft, load_optimizer_state, optimizer_state,
                                              read_checkpoint_state, read_meta, resumable_checkpoint, write_checkpoint)
    from dreamgym.trainers.common import (make_optimizer, model_device, prepare_policy, rng_state, set_lr,
                                          set_rng_state, supervised_step, trainable_parameters)

    say = progress or (lambda m: log.info(m))
    t_start = time.perf_counter()
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
    mcfg = cfg.em
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

    if trajectories is None:
        from dreamgym.data import load_trajectories

        trajectories = load_trajectories(cfg.data)
    held_idx = split_heldout(trajectories, cfg.heldout.share, cfg.seed) if heldout_report is not None else []
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

    model, tokenizer = load_preset(cfg.model.preset, device=device, quantize=cfg.model.quantize)
    model = prepare_policy(model, dataclasses.replace(cfg.model, lora=resumed_lora if ckpt is not None
                                                      else cfg.model.lora))
    use_lora = is_peft(model)
    backend = HFBackend(model, tokenizer)
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if max_pos and mcfg.max_prompt_tokens + mcfg.max_new_tokens > max_pos:
        raise ConfigError(f"em.max_prompt_tokens + em.max_new_tokens = "
                          f"{mcfg.max_prompt_tokens + mcfg.max_new_tokens} exceeds the model's {max_pos} positions")

    stats: Counter[str] = Counter()
    t0 = time.perf_counter()
    data = encode_examples(transitions, examples, mcfg, backend, stats)
    if cfg.task_writing > 0:
        from dreamgym.curriculum.generator import CurriculumConfig, solved_task_steps, writing_examples

        pairs = writing_examples(solved_task_steps(trajectories), n_variants=CurriculumConfig().n_variants,
                                 max_examples=cfg.task_writing, seed=cfg.seed)
        writing = encode_chat_examples(pairs, backend, mcfg.max_new_tokens, stats)
        stats["task_writing_examples"] += len(writing)
        data += writing
    t_encode = time.perf_counter() - t0
    if not data:
        raise ValueError("no training examples (empty data, or every completion longer than max_new_tokens)")
    rows = [(seq[:plen], seq[plen:]) for seq, plen in data]  # (prompt ids, completion ids)
    lengths = [len(seq) for seq, _ in data]
    n_batches = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps or max(1, int(round(cfg.epochs * n_batches)))
    say(f"{len(data)} examples (mean {sum(lengths) / len(lengths):.0f} tokens, max {max(lengths)}), "
        f"{total} steps of {cfg.batch_size}; counts {dict(stats)}")

    optim = cfg.optim.resolved(use_lora)
    params = trainable_parameters(model)
    opt = make_optimizer(params, optim)
    step = 0
    curve: list[dict[str, Any]] = []  # the held-out scorings so far: {"step", "time_s", figures}, saved and resumed
    stopped_early = False  # saved too: a run that stopped early is finished, and resuming it trains no further
    if ckpt is not None:
        state = read_checkpoint_state(ckpt, model)
        load_optimizer_state(model, opt, state)
        step = int(state["global_step"])
        set_rng_state(state["rng"])
        curve = list(state.get("heldout_curve", []))  # absent in checkpoints of earlier versions
        stopped_early = bool(state.get("stopped_early", False))
        say(f"resuming from step {step}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch_device = model_device(model)

    def save_state() -> dict[str, Any] | None:
        """Write the resumable checkpoint; returns a sharded model's gathered weights (None unsharded). Every rank:
        a sharded model's weights and optimizer state are gathered to rank 0, which writes."""
        weights = fsdp.full_state(model) if fsdp.is_sharded(model) else None
        opt_state = optimizer_state(model, opt)
        if not distributed.is_main():
            return weights
        write_checkpoint(out / CHECKPOINT_SUBDIR, model, tokenizer,
                         {**opt_state, "rng": rng_state(), "iteration": step // n_batches, "global_step": step,
                          "heldout_curve": curve, "stopped_early": stopped_early},
                         {"algo": "experience-model", "base": cfg.model.preset, "iteration": step // n_batches,
                          "global_step": step, "config": to_dict(cfg)}, weights)
        return weights

    # The batch schedule is a pure function of (seed, epoch), so a resumed run sees the same batches.
    def schedule(epoch: int) -> list[list[int]]:
        return _batches(lengths, cfg.batch_size, random.Random(cfg.seed * 1000 + epoch))

    metrics = MetricsLogger(out, tensorboard=False) if distributed.is_main() else None
    if metrics is not None:
        metrics.resume(step if ckpt is not None else None)  # rows logged after the checkpoint are logged again

    held_steps: list[Transition] = []
    if heldout_report is not None and held_trajectories:
        held = em_transitions(held_trajectories, history=mcfg.history, binary_reward=mcfg.binary_reward)
        held_steps = [t for t in held if t.action != RESET_ACTION]
        if len(held_steps) > cfg.heldout.max_steps:
            held_steps = random.Random(f"heldout-steps-{cfg.seed}").sample(held_steps, cfg.heldout.max_steps)

    def score() -> dict[str, Any]:
        """The held-out report of the model as it is now. Scored as a dream would use the model (its buffer holds
        the training data only), in eval mode and with the RNG states put back after, so a run that scores during
        training trains exactly the weights of one that does not."""
        assert heldout_report is not None
        saved, was_training = rng_state(), model.training
        model.eval()
        t = time.perf_counter()
        try:
            em = ExperienceModel(HFBackend(model, tokenizer, batch_size=cfg.heldout.batch_size), buffer=buf,
                                 config=mcfg, env=cfg.env)
            report = heldout_report(em, held_steps, cfg.heldout)
        finally:
            set_rng_state(saved)
            model.train(was_training)
        report["time_s"] = time.perf_counter() - t
        point = {"step": step, "time_s": report["time_s"], **report["metrics"]}
        if curve and curve[-1]["step"] == step:  # a resumed finished run re-scoring its last weights: logged already
            curve[-1] = point
        else:
            curve.append(point)
            if metrics is not None:
                metrics.log(step, report["metrics"], prefix=EM + "heldout/")
        validity = report["format_validity"]
        say(f"held-out at step {step}: next-state F1 {report['state_f1']:.3f}, exact match {report['state_em']:.3f} "
            f"(copying the state: {report['copy_state_em']:.3f}), format validity "
            f"{'-' if validity is None else f'{validity:.3f}'}, done accuracy {report['done_acc']:.3f} "
            f"({report['time_s']:.0f}s)")
        return report

    def stalled() -> bool:
        """Whether next-state F1 has not beaten its best by `min_delta` for `patience` scorings in a row."""
        f1 = [p["state_f1"] for p in curve]
        k = cfg.heldout.patience
        return 0 < k < len(f1) and max(f1[-k:]) < max(f1[:-k]) + cfg.heldout.min_delta

    last_report: dict[str, Any] | None = None
    model.train()
    t0 = time.perf_counter()
    tokens_seen, loss_sum, loss_n = 0, 0.0, 0
    last_loss = float("nan")
    epoch_batches: tuple[int, list[list[int]]] = (-1, [])
    try:
        while step < total and not stopped_early:
            epoch, pos = divmod(step, n_batches)
            if epoch_batches[0] != epoch:
                epoch_batches = (epoch, schedule(epoch))
            batch = epoch_batches[1][pos]
            lr = set_lr(opt, optim, step, total)
            st = supervised_step(model, opt, params, optim, [rows[i] for i in batch], pad, torch_device)
            step += 1
            tokens_seen += sum(lengths[i] for i in batch)
            loss_sum, loss_n = loss_sum + st["loss"], loss_n + 1
            if step % cfg.log_every == 0 or step == total:
                last_loss = loss_sum / loss_n
                el = time.perf_counter() - t0
                if metrics is not None:
                    metrics.log(step, {"loss": last_loss, "lr": lr, "grad_norm": st["grad_norm"],
                                       "tokens_per_s": tokens_seen / max(el, 1e-9)}, prefix="em/")
                say(f"step {step}/{total} loss {last_loss:.4f} ({el:.0f}s)")
                loss_sum, loss_n = 0.0, 0
            if held_steps and cfg.heldout.every and step % cfg.heldout.every == 0 and step < total:
                last_report = score()
                if cfg.heldout.patience and stalled():
                    say(f"held-out next-state F1 has not improved by {cfg.heldout.min_delta} for "
                        f"{cfg.heldout.patience} scorings: stopping at step {step} of {total}")
                    stopped_early = True
                    break
            if cfg.save_every and step % cfg.save_every == 0 and step < total:
                save_state()
    finally:
        if metrics is not None:
            metrics.close()
    model.eval()
    # The final resumable state first (a later run with more steps continues from it), then the experience model:
    # its weights switched atomically, and em_config.json, which makes the folder a finished checkpoint, last.
    weights = save_state()
    summary = {"out": str(out), "steps": step, "examples": len(data), "transitions": len(transitions),
               "final_loss": last_loss, "train_time_s": time.perf_counter() - t0,
               "retrieval_time_s": t_retrieval, "encode_time_s": t_encode,
               "total_time_s": time.perf_counter() - t_start, "lora": use_lora, "counts": dict(stats),
               "processes": distributed.world(), "stopped_early": stopped_early, "threads": threads}
    final = {} if weights is None else {"state_dict": weights}  # a sharded model's, gathered by save_state
    if not distributed.is_main():
        return summary
    with atomic_dir(out / MODEL_SUBDIR) as tmp:
        model.save_pretrained(str(tmp), **final)  # type: ignore[operator]  # a transformers or PEFT method
        tokenizer.save_pretrained(str(tmp))
    # "model" is the experience model's config (the checkpoint format's name for it), "train" the rest of the run's.
    meta = {"env": cfg.env, "preset": cfg.model.preset, "lora": use_lora, "model": to_dict(mcfg),
            "train": {k: v for k, v in to_dict(cfg).items() if k != "em"}, "format_version": FORMAT_VERSION,
            "steps": step, "final": True}
    atomic_write_text(out / EM_CONFIG_FILE, json.dumps(meta, indent=1))
    if heldout_report is not None and held_trajectories:
        # The last scoring when it was of these weights (a stop after scoring), else a new one.
        if last_report is None or curve[-1]["step"] != step:
            metrics = MetricsLogger(out, tensorboard=False)
            try:
                last_report = score()
            finally:
                metrics.close()
        summary["heldout"] = last_report
        if cfg.heldout.every:
            summary["heldout_curve"] = curve
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

    try:
        cfg = load_config(TrainEMConfig, a.config, over)
        if not cfg.data:
            raise ConfigError("data", "give the offline trajectories with --data or data=", "a trajectory file")
        check_inputs(cfg)
        summary = train_em(cfg, progress=print, heldout_report=heldout_report)
    except (FileNotFoundError, ValueError, PresetError, CheckpointError) as e:
        return fail("train-em", e)
    print(closing_lines(summary, cfg.resolved_out()))
    warning = summary.get("heldout", {}).get("warning")
    if warning:  # last, where it is seen: the run succeeded, but its model should not be dreamt in
        print(warning, file=sys.stderr, flush=True)
    return 0
