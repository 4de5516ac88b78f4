"""Supervised training of the experience model, and the `dreamgym train-em` command.

Owns: `TrainEMConfig`, the SFT loop that teaches a preset the output format (completion-only loss, AdamW with
linear warm-up and cosine decay to 10% of the peak, length-bucketed batches, full fine-tuning or LoRA), the
curriculum's task-writing examples mixed into the data, periodic checkpoints with resume, and the run's summary.
Must not know: trainers of the agent, the synthetic environment, any concrete environment (the family's reasoning
teacher is reached through `dreamgym.reasoning`).
torch, transformers and peft are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.checks import env_family, family_choices, model_source, trajectory_file
from dreamgym.config import CommandParser, ConfigError, checked, describe, fail, load_config, ranged, to_dict
from dreamgym.experience.checkpoint import EM_CONFIG_FILE, MODEL_SUBDIR, TRAIN_STATE_FILE
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.data import balance_outcomes, buffer_for, em_transitions, encode_chat_examples, encode_examples
from dreamgym.experience.format import FORMAT_VERSION
from dreamgym.paths import atomic_write_bytes, atomic_write_text
from dreamgym.types import Trajectory, Transition

log = logging.getLogger(__name__)


@dataclass
class TrainEMConfig:
    """`dreamgym train-em`: SFT of the experience model on annotated real transitions."""

    env: str = checked("dial", env_family, family_choices)
    """Environment family of the data (dial, webshop, alfworld, ...)."""
    data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """Offline real trajectories (JSONL or Parquet); required to train."""
    preset: str = checked("tiny", model_source, "a preset, a model folder or a Hugging Face id")
    """Model preset, local path or Hugging Face id to start from."""
    out: str = ""
    """Run directory for the checkpoint (default runs/em-<env>-<preset>)."""
    model: ExperienceModelConfig = field(default_factory=ExperienceModelConfig)
    """Prompt/output settings (saved with the checkpoint)."""
    teacher: Literal["env", "keep"] = "env"
    """Reasoning traces: 'env' (family explain, fills only missing traces) or 'keep' (use stored traces)."""
    lora: bool | None = None
    """LoRA via PEFT; None: full fine-tuning below `presets.FULL_FT_MAX_PARAMS` parameters (tiny), LoRA above."""
    lora_r: int = ranged(16, ge=1)
    """LoRA rank."""
    lora_alpha: int = ranged(32, ge=1)
    """LoRA scaling numerator."""
    lr: float | None = ranged(None, gt=0)
    """Peak learning rate; None: 1e-3 for full fine-tuning, 2e-4 for LoRA."""
    weight_decay: float = ranged(0.0, ge=0)
    """AdamW weight decay."""
    batch_size: int = ranged(16, ge=1)
    """Sequences per optimizer step."""
    epochs: float = ranged(2.0, gt=0)
    """Passes over the data (ignored when max_steps > 0)."""
    max_steps: int = ranged(0, ge=0)
    """Optimizer steps; 0: derived from epochs."""
    warmup_steps: int = ranged(30, ge=0)
    """Linear warm-up before the cosine decay."""
    max_transitions: int = ranged(0, ge=0)
    """Use at most this many transitions (0: all), sampled with the seed."""
    balance_outcomes: int = ranged(4, ge=1)
    """Repeat the final transitions of the rarer outcome (won vs not won) up to this many times so both outcomes
    weigh alike (1: off)."""
    context_dropout: float = ranged(0.1, ge=0, le=1)
    """Share of training prompts without their retrieved examples (and, independently, without history)."""
    seed: int = ranged(0, ge=0, le=2**32 - 1)
    """Seed for data order and dropout."""
    threads: int = ranged(2, ge=1)
    """CPU threads of torch and of numpy's BLAS (retrieval scores); both change the trained weights."""
    device: str | None = None
    """'cpu', 'cuda' or None (pick automatically)."""
    log_every: int = ranged(20, ge=1)
    """Log the loss every N steps."""
    save_every: int = ranged(500, ge=0)
    """Checkpoint (with optimizer and RNG state, for resume) every N steps; 0: only at the end."""
    resume: bool = True
    """Continue from the checkpoint in `out` when one exists."""
    task_writing: int = ranged(2000, ge=0)
    """Also teach the curriculum's two prompts (write harder variants of a task; pick one) with at most this many
    examples each, built from the tasks the data shows solved (`curriculum.writing_examples`). 0: none."""


def _lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to `peak` over `warmup` steps, then cosine decay to 10% of `peak` at `total`."""
    if step < warmup:
        return peak * (step + 1) / max(1, warmup)
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def completion_loss(model: Any, ids: Any, mask: Any, labels: Any) -> Any:
    """Mean next-token cross-entropy over the completion tokens only.

    ids/mask/labels: [B, T] (labels -100 on prompt and padding). The decoder runs over all positions, but the
    LM head (a [hidden, vocab] matmul, a large share of a tiny model's compute) only over the positions whose
    next token is supervised. Falls back to the model's own loss when it does not expose decoder and head.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if decoder is None or head is None:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, H]
    target = labels[:, 1:]                                               # [B, T-1]
    sel = target != -100
    logits = head(hidden[:, :-1][sel])                                    # [N, V]
    return torch.nn.functional.cross_entropy(logits.float(), target[sel])


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


def train(cfg: TrainEMConfig, trajectories: list[Trajectory] | None = None,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """SFT of the experience model; writes the checkpoint to `cfg.out` and returns a summary.

    Loss (the paper's joint loss in our format): mean token cross-entropy over the whole completion,
    -log P(R*, s_{t+1}, r, done | task, H, s_t, a_t, D_k), prompt tokens masked with -100. Inputs are the
    transitions' own histories and the k neighbours retrieved from a buffer of the training data, excluding
    each transition's own trajectory (so the model learns to use examples it did not come from) but not the
    identical steps of other episodes: a synthetic step retrieves those too, and in a deterministic
    environment copying them is right (excluding them taught the model that the nearest example's outcome is
    usually wrong; measured on the dial: trained that way, the model gave every submit the same reward).

    Shapes: a batch is input_ids/labels/attention_mask of [batch_size, longest sequence in the batch].
    """
    import torch

    from dreamgym.llm.hf import HFBackend
    from dreamgym.metrics import MetricsLogger, pin_threads
    from dreamgym.presets import load_preset, wants_lora

    say = progress or (lambda m: log.info(m))
    t_start = time.perf_counter()
    # Both pools: numpy's BLAS scores the retrieved examples of every training prompt, so the shell's
    # OMP_NUM_THREADS would otherwise change the trained weights.
    pin_threads(max(1, cfg.threads))
    out = Path(cfg.out or f"runs/em-{cfg.env}-{Path(cfg.preset).name}")
    out.mkdir(parents=True, exist_ok=True)
    mcfg = cfg.model

    if trajectories is None:
        from dreamgym.data import load_trajectories

        trajectories = load_trajectories(cfg.data)
    transitions = em_transitions(trajectories, history=mcfg.history, binary_reward=mcfg.binary_reward)
    rng = random.Random(cfg.seed)
    if cfg.max_transitions and len(transitions) > cfg.max_transitions:
        transitions = rng.sample(transitions, cfg.max_transitions)
    if mcfg.use_reasoning and cfg.teacher == "env":
        from dreamgym.reasoning import EnvTeacher, annotate

        transitions = annotate(transitions, EnvTeacher(cfg.env))
    say(f"{len(trajectories)} trajectories -> {len(transitions)} transitions")

    t0 = time.perf_counter()
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

    device = cfg.device
    state_path = out / TRAIN_STATE_FILE
    resuming = cfg.resume and state_path.is_file() and (out / MODEL_SUBDIR).is_dir()
    # A resumed full fine-tune saved whole weights (config.json); a resumed LoRA run saved an adapter.
    resumed_full = resuming and (out / MODEL_SUBDIR / "config.json").is_file()
    model, tokenizer = load_preset(str(out / MODEL_SUBDIR) if resumed_full else cfg.preset, device=device)
    if resuming and cfg.lora is not None and cfg.lora == resumed_full:
        raise ConfigError(f"lora={cfg.lora} but the run in {out} trained "
                          f"{'all weights' if resumed_full else 'a LoRA adapter'}; resume with the same setting")
    use_lora = not resumed_full and (resuming or wants_lora(cfg.lora, model))
    if use_lora:
        from peft import LoraConfig, PeftModel, get_peft_model

        if resuming:
            model = PeftModel.from_pretrained(model, str(out / MODEL_SUBDIR), is_trainable=True)
        else:
            model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    backend = HFBackend(model, tokenizer)
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if max_pos and mcfg.max_prompt_tokens + mcfg.max_new_tokens > max_pos:
        raise ConfigError(f"model.max_prompt_tokens + model.max_new_tokens = "
                          f"{mcfg.max_prompt_tokens + mcfg.max_new_tokens} exceeds the model's {max_pos} positions")

    stats: Counter[str] = Counter()
    t0 = time.perf_counter()
    data = encode_examples(transitions, examples, mcfg, backend, stats)
    if cfg.task_writing > 0:
        from dreamgym.curriculum import CurriculumConfig, solved_task_steps, writing_examples

        pairs = writing_examples(solved_task_steps(trajectories), n_variants=CurriculumConfig().n_variants,
                                 max_examples=cfg.task_writing, seed=cfg.seed)
        writing = encode_chat_examples(pairs, backend, mcfg.max_new_tokens, stats)
        stats["task_writing_examples"] += len(writing)
        data += writing
    t_encode = time.perf_counter() - t0
    if not data:
        raise ValueError("no training examples (empty data, or every completion longer than max_new_tokens)")
    lengths = [len(ids) for ids, _ in data]
    n_batches = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps or max(1, int(round(cfg.epochs * n_batches)))
    say(f"{len(data)} examples (mean {sum(lengths) / len(lengths):.0f} tokens, max {max(lengths)}), "
        f"{total} steps of {cfg.batch_size}; counts {dict(stats)}")

    peak = cfg.lr if cfg.lr is not None else (2e-4 if use_lora else 1e-3)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=peak, weight_decay=cfg.weight_decay, betas=(0.9, 0.98), foreach=True)
    step = 0
    if resuming:
        st = torch.load(state_path, map_location="cpu", weights_only=False)
        opt.load_state_dict(st["optimizer"])
        step = int(st["step"])
        torch.set_rng_state(st["torch_rng"])
        say(f"resuming from step {step}")

    meta = {"env": cfg.env, "preset": cfg.preset, "lora": use_lora, "model": to_dict(mcfg),
            "train": {k: v for k, v in to_dict(cfg).items() if k != "model"}, "format_version": FORMAT_VERSION}

    def save(final: bool) -> None:
        model.save_pretrained(str(out / MODEL_SUBDIR))
        tokenizer.save_pretrained(str(out / MODEL_SUBDIR))
        atomic_write_text(out / EM_CONFIG_FILE, json.dumps({**meta, "steps": step, "final": final}, indent=1))
        buf = io.BytesIO()
        torch.save({"optimizer": opt.state_dict(), "step": step, "torch_rng": torch.get_rng_state()}, buf)
        atomic_write_bytes(state_path, buf.getvalue())

    # The batch schedule is a pure function of (seed, epoch), so a resumed run sees the same batches.
    def schedule(epoch: int) -> list[list[int]]:
        return _batches(lengths, cfg.batch_size, random.Random(cfg.seed * 1000 + epoch))

    metrics = MetricsLogger(out, tensorboard=False)
    model.train()
    pad = tokenizer.pad_token_id
    t0 = time.perf_counter()
    tokens_seen, loss_sum, loss_n = 0, 0.0, 0
    last_loss = float("nan")
    try:
        while step < total:
            epoch, pos = divmod(step, n_batches)
            batch = schedule(epoch)[pos]
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                seq, plen = data[i]
                ids[r, :len(seq)] = torch.tensor(seq)
                labels[r, plen:len(seq)] = torch.tensor(seq[plen:])
                mask[r, :len(seq)] = 1
            dev = next(model.parameters()).device
            for g in opt.param_groups:
                g["lr"] = _lr_at(step, peak, cfg.warmup_steps, total)
            loss = completion_loss(model, ids.to(dev), mask.to(dev), labels.to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            tokens_seen += int(mask.sum())
            loss_sum, loss_n = loss_sum + float(loss.detach()), loss_n + 1
            if step % cfg.log_every == 0 or step == total:
                last_loss = loss_sum / loss_n
                el = time.perf_counter() - t0
                metrics.log(step, {"loss": last_loss, "lr": opt.param_groups[0]["lr"],
                                   "tokens_per_s": tokens_seen / max(el, 1e-9)}, prefix="em/")
                say(f"step {step}/{total} loss {last_loss:.4f} ({el:.0f}s)")
                loss_sum, loss_n = 0.0, 0
            if cfg.save_every and step % cfg.save_every == 0 and step < total:
                save(final=False)
    finally:
        metrics.close()
    model.eval()
    save(final=True)
    summary = {"out": str(out), "steps": step, "examples": len(data), "transitions": len(transitions),
               "final_loss": last_loss, "train_time_s": time.perf_counter() - t0,
               "retrieval_time_s": t_retrieval, "encode_time_s": t_encode,
               "total_time_s": time.perf_counter() - t_start, "lora": use_lora, "counts": dict(stats)}
    atomic_write_text(out / "train_summary.json", json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    """`dreamgym train-em --env dial --data traj.jsonl [--preset tiny] [--out dir] [--config y.yaml] key=value…`"""
    p = CommandParser(prog="dreamgym train-em", description=main.__doc__,
                                epilog="config fields (key=value):\n" + describe(TrainEMConfig),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", help="environment family")
    p.add_argument("--data", help="offline trajectories (JSONL)")
    p.add_argument("--preset", help="model preset, path or HF id (default tiny)")
    p.add_argument("--out", help="checkpoint directory")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.k=2 epochs=3")
    from dreamgym.presets import PresetError

    a = p.parse_intermixed_args(argv)
    over = list(a.overrides) + [f"{k}={v}" for k in ("env", "data", "preset", "out")
                                if (v := getattr(a, k)) is not None]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg = load_config(TrainEMConfig, a.config, over)
        if not cfg.data:
            raise ConfigError("data", "give the offline trajectories with --data or data=", "a trajectory file")
        summary = train(cfg, progress=print)
    except (FileNotFoundError, ValueError, PresetError) as e:
        return fail("train-em", e)
    print(json.dumps(summary, indent=1))
    return 0
