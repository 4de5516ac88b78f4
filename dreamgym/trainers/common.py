"""Pieces every agent trainer shares: configs, model preparation, optimiser, batching, forward passes, seeding,
and the `BaseTrainer` that ties them to a policy backend and its checkpoints (`dreamgym.trainers.checkpoint`).

Owns: `ModelConfig`/`OptimConfig`/`TrainerConfig`; LoRA-or-full-fine-tuning selection (`prepare_policy`);
AdamW; bf16 autocast on CUDA (float32 on CPU); packing (prompt, completion) token sequences into padded
batches with a loss mask over the completion tokens (`pack`); the policy forward pass that returns per-token
log-probabilities, entropies and hidden states only where they are needed (`policy_forward`); seeding and RNG
state; what a trainer's checkpoint holds (optimizer, RNG, counters, the run state of the loop that drives it).
Must not know: concrete environments, presets (the caller builds the model and the backend), any one
algorithm's loss.

Devices: the trainer follows the device of the model it is given (`dreamgym.llm.presets.load_preset` puts it on
CUDA in bf16 when a GPU is present). On CUDA the forward/backward run under bf16 autocast; trainable weights
are kept in float32 (full fine-tuning upcasts a bf16 model; PEFT keeps its adapters in float32).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from dreamgym.llm.base import GENERATION_TIMEOUT_S
from dreamgym.utils import distributed, fsdp
from dreamgym.agent import AgentConfig
from dreamgym.checks import SERVER_URLS, model_source, server_urls
from dreamgym.config import ConfigError, checked, ranged
from dreamgym.episode import RolloutConfig
# re-exported: the trainers' seeds mix through dreamgym.utils.seeds
from dreamgym.utils.seeds import mix_seed as mix_seed
from dreamgym.trainers.checkpoint import (
    is_peft,
    load_optimizer_state,
    optimizer_state,
    read_checkpoint_state,
    write_checkpoint,
)

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# ------------------------------------------------------------------------------------------------- configs
@dataclass
class ModelConfig:
    preset: str = checked("tiny", model_source, "a preset, a model folder or a Hugging Face id")
    """The model to train: a preset name (tiny, smollm2-135m), a local directory or a Hugging Face id."""
    lora: bool | None = None
    """Train LoRA adapters (PEFT) instead of all weights. None = auto: full fine-tuning below
    `presets.FULL_FT_MAX_PARAMS` parameters, LoRA above."""
    quantize: Literal["none", "4bit"] = "none"
    """'4bit': hold the frozen base in 4-bit NF4 (QLoRA; needs bitsandbytes and lora=true)."""
    lora_r: int = ranged(16, ge=1)
    """LoRA rank."""
    lora_alpha: int = ranged(32, ge=1)
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = ranged(0.0, ge=0, lt=1)
    """Dropout on the LoRA path (0 keeps runs deterministic and ratios exact)."""
    lora_targets: list[str] = field(default_factory=lambda: list(DEFAULT_LORA_TARGETS))
    """Module names that get adapters."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    generation_batch_size: int = ranged(64, ge=1)
    """Rows the policy backend decodes together."""
    policy_url: str = checked("", server_urls, SERVER_URLS)
    """Sample the policy's rollouts on OpenAI-compatible servers (`dreamgym serve-model`, vLLM) serving the same base
    model, `http://host:port/v1#MODEL` (several: comma-separated); the LoRA adapter trained here is pushed to each
    whenever it changed. Empty: sample in this process."""
    policy_timeout_s: float = ranged(GENERATION_TIMEOUT_S, gt=0)
    """Seconds a `policy_url` server may take to answer one generation request; one that takes longer fails its batch
    with an error naming this field and is not sent again (the server may still be generating it)."""

    fsdp: bool = False
    """Shard the trained weights, their gradients and AdamW state over the ranks (FSDP2, one unit per decoder
    layer) instead of holding a replica on each; a single process runs the same code path."""

    def validate(self) -> None:
        fsdp.check_config(self.fsdp, self.quantize, "fsdp")
        if self.fsdp and self.policy_url:
            raise ConfigError("fsdp", "adapters pushed to servers are not gathered from shards",
                              "fsdp=false with policy_url")
        if self.quantize != "none" and self.lora is not True:
            raise ConfigError("quantize", "only LoRA adapters train on a quantized base", "lora=true with quantize")
        if self.policy_url and self.lora is not True:
            raise ConfigError("policy_url", "a server samples only what the trainer can push to it: a LoRA adapter",
                              "lora=true with policy_url")

    def use_lora(self, model: nn.Module) -> bool:
        from dreamgym.llm.presets import wants_lora

        return wants_lora(self.lora, model)


@dataclass
class OptimConfig:
    lr: float | None = ranged(1e-5, gt=0)
    """AdamW (peak) learning rate; None: by the kind of training, 1e-3 when all weights train, 2e-4 for LoRA
    adapters."""
    weight_decay: float = ranged(0.0, ge=0)
    """AdamW weight decay."""
    beta1: float = ranged(0.9, ge=0, lt=1)
    """AdamW beta1."""
    beta2: float = ranged(0.999, ge=0, lt=1)
    """AdamW beta2."""
    eps: float = ranged(1e-8, gt=0)
    """AdamW epsilon."""
    max_grad_norm: float = ranged(1.0)
    """Gradient norm clip (<= 0 disables)."""
    micro_batch_tokens: int = ranged(4096, ge=1)
    """Padded tokens per forward/backward chunk; gradients accumulate over the chunks of one optimiser step."""
    warmup_steps: int = ranged(0, ge=0)
    """Linear learning-rate warm-up over this many optimiser steps."""
    schedule: Literal["constant", "cosine"] = "constant"
    """Learning rate after the warm-up: constant, or cosine decay to `min_lr_ratio` x lr at the run's last step."""
    min_lr_ratio: float = ranged(0.1, ge=0, le=1)
    """Where the cosine schedule ends, as a fraction of the peak learning rate."""

    def resolved(self, lora: bool) -> OptimConfig:
        """These settings with `lr` set: its own value, or when None the default for LoRA (`lora`) or full
        fine-tuning."""
        return self if self.lr is not None else dataclasses.replace(self, lr=2e-4 if lora else 1e-3)


@dataclass
class TrainerConfig:
    """What every trainer reads (seed, model, optimiser, prompt) and what the run loop of its online runs reads
    (rollout settings, real-step budget); `dreamgym.commands.train.TrainConfig` extends it with the run-level fields."""

    seed: int = ranged(0, ge=0, le=2**32 - 1)
    """Seeds model initialisation order, rollouts, sampling and data order: same seed, same metrics."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model and how it is trained."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimiser and gradient accumulation."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """The policy's prompt (history length, admissible actions)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout engine settings (the run loop's rollouts)."""
    real_step_budget: int | None = ranged(None, ge=0)
    """Hard cap on real-environment steps over the whole run (None = unlimited): the run loop's budget."""
    tasks_per_iteration: int = ranged(8, ge=1)
    """GRPO/PPO: tasks the run loop draws per iteration."""
    task_strata: str = ""
    """GRPO/PPO: draw each iteration's train tasks evenly over the values of this goal field (MiniWoB++:
    `subdomain`, ALFWorld: `task_type`), every value once before any twice across the run; empty: a uniform draw."""
    group_size: int = ranged(8, ge=1)
    """GRPO/PPO: episodes the run loop plays of each task per iteration, all from one environment seed (GRPO's group
    G, within which advantages are normalised); tasks_per_iteration x group_size episodes per iteration."""


# ------------------------------------------------------------------------------------------------- seeding
def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------------------- model
def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; nothing on CPU (bf16 matmuls are slow there and blur log-prob checks)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def prepare_policy(model: nn.Module, cfg: ModelConfig) -> nn.Module:
    """The trainable policy: `model` wrapped with LoRA adapters (PEFT) or, for full fine-tuning, `model` itself
    with float32 weights. Idempotent on an already-wrapped PEFT model."""
    if is_peft(model) or cfg.use_lora(model):
        if not is_peft(model):
            from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

            if getattr(model, "is_loaded_in_4bit", False):
                # Norms and the head to float32, input grads on: what QLoRA needs to train adapters stably.
                model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
            lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                              target_modules=list(cfg.lora_targets), task_type="CAUSAL_LM", bias="none")
            model = get_peft_model(model, lora)
    else:
        if any(p.dtype != torch.float32 for p in model.parameters()):
            model = model.float()  # master weights in float32; CUDA compute still runs in bf16 autocast
        for p in model.parameters():
            p.requires_grad_(True)
    if cfg.gradient_checkpointing:
        # PEFT / transformers methods: nn.Module.__getattr__ types them as Tensor | Module.
        base = model.get_base_model() if is_peft(model) else model  # type: ignore[operator]
        base.gradient_checkpointing_enable()  # type: ignore[operator]
        if is_peft(model):
            model.enable_input_require_grads()  # type: ignore[operator]
    if cfg.fsdp:
        distributed.init(fsdp=True)
        model = fsdp.shard(model)
    return model


def trainable_parameters(*modules: nn.Module | None) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for m in modules:
        if m is None:
            continue
        for p in m.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def make_optimizer(params: Sequence[nn.Parameter], cfg: OptimConfig,
                   extra_groups: Sequence[dict[str, Any]] = ()) -> torch.optim.Optimizer:
    """AdamW over `params` at `cfg.lr` (set: `OptimConfig.resolved`), plus optional extra groups ({"params": [...],
    "lr": x})."""
    if cfg.lr is None:
        raise ValueError("optim.lr: no learning rate (resolve the config for the model first)")
    groups = [{"params": list(params), "lr": cfg.lr}] + [dict(g) for g in extra_groups if g["params"]]
    for g in groups:
        g["base_lr"] = g["lr"]  # the schedule's peak (`set_lr`); in the state from the start, so it loads by name
    # foreach=False: the same float operations in the same order on every run, on every device.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             weight_decay=cfg.weight_decay, foreach=False)


def lr_scale(cfg: OptimConfig, step: int, total_steps: int | None = None) -> float:
    """The schedule's multiplier of the peak rate at optimiser step `step` (0-based): linear warm-up over
    `warmup_steps`, then 1 (constant) or a cosine from 1 down to `min_lr_ratio` at `total_steps`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    if total_steps is None:
        raise ValueError("the cosine schedule needs the run's total number of optimiser steps")
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac))


def set_lr(optimizer: torch.optim.Optimizer, cfg: OptimConfig, step: int, total_steps: int | None = None) -> float:
    """Apply the schedule (`lr_scale`) to every parameter group (each keeps its own base rate); returns the
    policy's lr."""
    scale = lr_scale(cfg, step, total_steps)
    for g in optimizer.param_groups:
        g["lr"] = g.setdefault("base_lr", g["lr"]) * scale
    return optimizer.param_groups[0]["lr"]


def clip_and_step(optimizer: torch.optim.Optimizer, params: Sequence[nn.Parameter], cfg: OptimConfig) -> float:
    """Sum the gradients over ranks (several processes: each back-propagated its share of the step), clip the
    gradient norm (when configured), step, zero the gradients; returns the pre-clip norm. Sharded weights' gradients
    (FSDP) arrive summed from their backward."""
    if fsdp.any_sharded(params):
        distributed.sum_gradients([p for p in params if not fsdp.is_dtensor(p)])
        norm = fsdp.clip_grad_norm(params, cfg.max_grad_norm)
    else:
        distributed.sum_gradients(params)
        grads = [p for p in params if p.grad is not None]
        if cfg.max_grad_norm > 0 and grads:
            norm = float(torch.nn.utils.clip_grad_norm_(grads, cfg.max_grad_norm, foreach=False))
        else:
            norms = [g.detach().float().norm() for p in grads if (g := p.grad) is not None]  # all of `grads` have one
            norm = float(torch.norm(torch.stack(norms))) if grads else 0.0
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


class ValueHead(nn.Module):
    """V(s): a linear map from the last hidden state of the state's prompt to a scalar (initialised to 0)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [N, H] -> [N]
        return self.proj(h.float()).squeeze(-1)


# ------------------------------------------------------------------------------------------------- batching
@dataclass
class Packed:
    """A right-padded batch of `prompt + completion` rows.

    input_ids, attention_mask: [B, T]; loss_mask: [B, L] (L = T - 1), true where the logits predict a
    completion token; prompt_lens, total_lens: [B].
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    prompt_lens: torch.Tensor
    total_lens: torch.Tensor

    @property
    def n_tokens(self) -> int:
        """Real (non-padding) tokens in the batch."""
        return int(self.total_lens.sum())

    @property
    def n_trained(self) -> int:
        return int(self.loss_mask.sum())


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
         device: torch.device | str = "cpu") -> Packed:
    """Right-pad `prompt + completion` rows; the loss mask covers exactly the completion tokens."""
    from dreamgym.trainers.algos import completion_loss_mask

    rows = [list(p) + list(c) for p, c in zip(prompts, completions)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        att[b, : len(r)] = 1
    plen = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    tlen = torch.tensor([len(r) for r in rows], dtype=torch.long)
    mask = completion_loss_mask(plen, tlen, width)
    return Packed(ids.to(device), att.to(device), mask.to(device), plen.to(device), tlen.to(device))


def per_token(packed: Packed, values: Sequence[Sequence[float]]) -> torch.Tensor:
    """Place per-completion-token values (e.g. sampling log-probs) at their loss-mask positions: [B, L]."""
    out = torch.zeros(packed.loss_mask.shape, dtype=torch.float32)
    for b, v in enumerate(values):
        start = int(packed.prompt_lens[b]) - 1
        out[b, start: start + len(v)] = torch.tensor(list(v), dtype=torch.float32)
    return out.to(packed.loss_mask.device)


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Split indices 0..n-1 (kept in the given order) into chunks whose padded size (rows x longest row) stays
    within `token_budget`; a row longer than the budget gets a chunk of its own."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if cur and max(longest, n) * (len(cur) + 1) > token_budget:
            chunks.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        chunks.append(cur)
    return chunks


@dataclass
class ForwardOut:
    logp: torch.Tensor
    """[B, L] log-probabilities of the next tokens; 0 where the loss mask is false."""
    entropy: torch.Tensor | None = None
    """[B, L] entropies (nats) of the next-token distributions; 0 off the mask."""
    state_hidden: torch.Tensor | None = None
    """[B, H] last hidden state at each row's last prompt token (the state representation for a value head)."""


def _split_lm(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(decoder trunk, output embedding) when the logits are a plain linear map of the trunk's output; None for
    models that post-process logits (soft-capping, logit scale), which then take the full forward path."""
    base = model.get_base_model() if is_peft(model) else model  # type: ignore[operator]  # PEFT method
    cfg = getattr(base, "config", None)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return None
    get_dec, get_out = getattr(base, "get_decoder", None), getattr(base, "get_output_embeddings", None)
    if get_dec is None or get_out is None:
        return None
    dec, head = get_dec(), get_out()
    return (dec, head) if dec is not None and head is not None else None


def policy_forward(model: nn.Module, packed: Packed, *, entropy: bool = False, entropy_grad: bool = False,
                   state_hidden: bool = False) -> ForwardOut:
    """Per-token log-probs (and optionally entropies and the state hidden state) of a packed batch.

    The vocabulary projection runs only at the loss-mask positions: prompts are most of the tokens, so this
    saves most of the [B, T, V] logits for small models with large vocabularies. Entropies carry a gradient
    only with `entropy_grad` (an entropy bonus); otherwise they are a detached metric.
    """
    device = packed.input_ids.device
    mask = packed.loss_mask
    split = _split_lm(model)
    with autocast(device):
        if split is not None:
            trunk, head = split

            def trunk_and_head() -> tuple[torch.Tensor, torch.Tensor]:
                h = trunk(input_ids=packed.input_ids, attention_mask=packed.attention_mask).last_hidden_state
                return h, head(h[:, :-1][mask]).float()  # [N, V] at the trained positions only

            # The trunk and head are called past the model's own forward: a sharded root gathers its weights
            # (embeddings, head) only around a call it knows is a forward.
            hidden, logits_sel = fsdp.as_forward(model, trunk_and_head)
        else:
            out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask, output_hidden_states=True)
            hidden = out.hidden_states[-1]
            logits_sel = out.logits[:, :-1][mask].float()
    targets = packed.input_ids[:, 1:][mask]
    lsm = torch.log_softmax(logits_sel, dim=-1)
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=device)
    logp = logp.masked_scatter(mask, lsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    ent = None
    if entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = torch.zeros(mask.shape, dtype=torch.float32, device=device)
            ent = ent.masked_scatter(mask, -(lsm.exp() * lsm).sum(-1))
    sh = None
    if state_hidden:
        rows = torch.arange(hidden.shape[0], device=device)
        sh = hidden[rows, packed.prompt_lens - 1].float()
    return ForwardOut(logp=logp, entropy=ent, state_hidden=sh)


def supervised_backward(model: nn.Module, rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int,
                        device: torch.device, micro_batch_tokens: int, *, scale: float = 1.0,
                        entropy: bool = False) -> tuple[float, float, float]:
    """Back-propagate `scale` x the token-level mean cross-entropy over the completion tokens of `rows` ((prompt ids,
    completion ids) pairs) into the gradients, without stepping: `supervised_step`'s loss, and the SFT anchor of
    an online update (`dreamgym.trainers.anchor`). Micro-batches and ranks as `supervised_step` says. Returns the
    whole step's (mean loss, mean entropy or 0, padded tokens), summed over ranks."""
    from dreamgym.trainers import algos

    rows = sorted(rows, key=lambda r: len(r[0]) + len(r[1]))
    n_trained = sum(len(c) for _, c in rows)
    loss_sum, ent_sum, n_tok = 0.0, 0.0, 0.0
    # A sharded model pads its share with zero-weighted repeats: every rank runs the same forwards and backwards.
    for chunk, real in distributed.share(micro_batches([len(p) + len(c) for p, c in rows], micro_batch_tokens),
                                         lockstep=fsdp.is_sharded(model)):
        packed = pack([rows[i][0] for i in chunk], [rows[i][1] for i in chunk], pad_id, device)
        out = policy_forward(model, packed, entropy=entropy)
        loss = -algos.masked_mean(out.logp, packed.loss_mask)
        share = packed.n_trained / n_trained if real else 0.0
        (loss * (share * scale)).backward()
        if not real:
            continue
        loss_sum += float(loss.detach()) * share
        if out.entropy is not None:
            ent_sum += float(algos.masked_mean(out.entropy, packed.loss_mask)) * share
        n_tok += packed.n_tokens
    loss_sum, ent_sum, n_tok = distributed.sum_floats([loss_sum, ent_sum, n_tok])
    return loss_sum, ent_sum, n_tok


def supervised_step(model: nn.Module, optimizer: torch.optim.Optimizer, params: Sequence[nn.Parameter],
                    cfg: OptimConfig, rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int,
                    device: torch.device, *, entropy: bool = False) -> dict[str, float]:
    """One optimiser step of supervised fine-tuning: token-level mean cross-entropy over the completion tokens of
    `rows` ((prompt ids, completion ids) pairs), the SFT step of the agent and of the experience model alike.

    Rows are sorted by length and cut into micro-batches of at most `cfg.micro_batch_tokens` padded tokens
    ([b, T] each); each chunk's mean loss is weighted by its share of the step's completion tokens before its
    backward, so the accumulated gradient is that of the mean over all of them. The caller sets the learning rate
    (`set_lr`) and the model's train/eval mode. Returns loss, grad_norm, tokens_per_s (and entropy, a detached
    metric, when asked). With several processes every rank passes the same `rows` and back-propagates its share of
    the micro-batches (`distributed.mine`); the figures returned are the whole step's."""
    t0 = time.perf_counter()
    loss_sum, ent_sum, n_tok = supervised_backward(model, rows, pad_id, device, cfg.micro_batch_tokens,
                                                   entropy=entropy)
    norm = clip_and_step(optimizer, params, cfg)
    dt = time.perf_counter() - t0
    stats = {"loss": loss_sum, "grad_norm": norm, "tokens_per_s": n_tok / dt if dt > 0 else 0.0}
    if entropy:
        stats["entropy"] = ent_sum
    return stats


def state_hidden_only(trunk_model: nn.Module, prompts: Sequence[Sequence[int]], pad_id: int,
                      device: torch.device) -> torch.Tensor:
    """[N, H] last-layer hidden state at the last token of each prompt (a critic's view of the state)."""
    packed = pack(prompts, [[] for _ in prompts], pad_id, device)
    split = _split_lm(trunk_model)
    with autocast(device):
        if split is not None:
            trunk = split[0]
            hidden = fsdp.as_forward(trunk_model, lambda: trunk(input_ids=packed.input_ids,
                                                                attention_mask=packed.attention_mask).last_hidden_state)
        else:
            hidden = trunk_model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                                 output_hidden_states=True).hidden_states[-1]
    rows = torch.arange(hidden.shape[0], device=device)
    return hidden[rows, packed.prompt_lens - 1].float()


# ------------------------------------------------------------------------------------------------- base trainer
class BaseTrainer:
    """State and plumbing shared by the four trainers: the policy (shared with the backend), its optimiser, the
    optimiser-step count, RNG and exact checkpoints. Subclasses add their algorithm and extend `_extra_state` /
    `_load_extra_state` / `_extra_modules`. A trainer plays nothing and counts no iterations: the run loop
    (`dreamgym.rl.loop`) or the fit loop (`dreamgym.trainers.offline`) drives it."""

    algo = "base"
    config: Any
    """The algorithm's config dataclass; each subclass sets (and types) it."""

    def __init__(self, backend: Any, common: TrainerConfig):
        self.backend = backend
        self.common = common
        set_seed(common.seed)
        backend.model = prepare_policy(backend.model, common.model)
        self.model: nn.Module = backend.model
        self.tokenizer = backend.tokenizer
        self.device = model_device(self.model)
        self.pad_id = backend.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = backend.tokenizer.eos_token_id
        self.global_step = 0  # optimiser steps
        self.optimizer: torch.optim.Optimizer | None = None  # built by the subclass once its modules exist

    @property
    def _opt(self) -> torch.optim.Optimizer:
        """`optimizer`, which every subclass builds in its `__init__`."""
        assert self.optimizer is not None, "the subclass builds the optimiser in __init__"
        return self.optimizer

    # -- helpers
    def _build_optimizer(self, extra: Sequence[nn.Module | None] = (), extra_lr: float | None = None) -> None:
        """AdamW over the policy's trainable weights, plus `extra` modules (value head, critic) at `extra_lr`."""
        policy = trainable_parameters(self.model)
        seen = {id(p) for p in policy}
        others = [p for p in trainable_parameters(*extra) if id(p) not in seen]
        self.params = policy + others
        optim = self.common.optim.resolved(is_peft(self.model))
        lr = optim.lr if extra_lr is None else extra_lr
        self.optimizer = make_optimizer(policy, optim, [{"params": others, "lr": lr}])

    def _frozen_copy(self) -> nn.Module | None:
        """A frozen reference policy: None for LoRA (the base model with adapters disabled is the reference),
        a deep copy of the current weights for full fine-tuning."""
        if is_peft(self.model):
            return None
        if fsdp.is_sharded(self.model):
            return fsdp.frozen_copy(self.model)
        ref = copy.deepcopy(self.model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    def _reference_forward(self, ref: nn.Module | None, packed: Packed) -> torch.Tensor:
        """[B, L] log-probs under the frozen reference (no gradient)."""
        with torch.no_grad():
            if ref is None:
                with self.model.disable_adapter():  # type: ignore[operator]
                    return policy_forward(self.model, packed).logp
            return policy_forward(ref, packed).logp

    def sampler_matches_learner(self) -> bool:
        """Whether the backend's sampling log-probs come from the learner's own numerics: it decodes with this very
        model object (its `sampling_model`) and the learner runs without autocast (CPU, float32 or the model's own
        dtype alike). Not so on CUDA, where the learner runs under bf16 autocast, nor for a backend that samples
        elsewhere (a server, a separate copy): then the importance ratio against the sampler's log-probs is not 1
        before the first update."""
        return getattr(self.backend, "sampling_model", None) is self.model and self.device.type != "cuda"

    def learner_logprobs(self, prompts: Sequence[Sequence[int]],
                         completions: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of each completion under the current policy, computed the way the update computes
        them (`policy_forward`, eval mode, micro-batches of `optim.micro_batch_tokens`, no gradient): the "old"
        log-probs of PPO/GRPO when the sampler's own are not the learner's (`sampler_matches_learner`)."""
        # Several processes: each computes the rows at its positions, then every rank gets all of them.
        order = sorted(distributed.mine(range(len(prompts))), key=lambda i: len(prompts[i]) + len(completions[i]))
        out: list[list[float]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        # Ranks score different numbers of rows: a sharded policy stays gathered meanwhile.
        with torch.no_grad(), fsdp.gathered(self.model):
            for chunk in micro_batches([len(prompts[i]) + len(completions[i]) for i in order],
                                       self.common.optim.micro_batch_tokens):
                idx = [order[j] for j in chunk]
                packed = pack([prompts[i] for i in idx], [completions[i] for i in idx], self.pad_id, self.device)
                logp = policy_forward(self.model, packed).logp  # [b, L]; completion token t sits at plen - 1 + t
                for b, i in enumerate(idx):
                    start = len(prompts[i]) - 1
                    out[i] = logp[b, start:start + len(completions[i])].tolist()
        self.model.train(was_training)
        if distributed.active():
            for part in distributed.gather({i: out[i] for i in order}):
                for i, lp in part.items():
                    out[i] = lp
        return out

    # -- checkpoint hooks
    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, extra: dict[str, Any], run: dict[str, Any]) -> None:
        """Restore what `_extra_state` saved (`extra`); `run` is the run state the checkpoint was saved with."""

    def _extra_modules(self) -> dict[str, nn.Module]:
        """Modules saved as state dicts beside the policy (value head, critic, full-FT reference)."""
        return {}

    # -- checkpoints
    def save(self, directory: str | Path, run: Mapping[str, Any] | None = None) -> Path:
        """Write a checkpoint: the policy (HF model folder or PEFT adapter folder, with tokenizer), optimiser, RNG
        states, the optimiser-step count, the trainer's extra state and `run`, the state of the loop that drives it
        (`dreamgym.rl.loop.RunState.state_dict()`: "iteration" and the real-step "budget"; an offline trainer's epoch),
        which `load` returns. Atomic: a crash leaves the old one. With several processes only rank 0 writes (every
        rank holds the same state; sharded weights are gathered to it first, so every rank calls this)."""
        run = dict(run or {})
        weights = fsdp.full_state(self.model) if fsdp.is_sharded(self.model) else None
        opt = optimizer_state(self._stepped_modules(), self.optimizer) if self.optimizer is not None \
            else {"optimizer": None}
        modules = {k: fsdp.full_state(m) if fsdp.is_sharded(m) else m.state_dict()
                   for k, m in self._extra_modules().items()}
        if not distributed.is_main():
            return Path(directory)
        state = {
            **opt,
            "rng": rng_state(),
            **run,
            "global_step": self.global_step,
            "modules": modules,
            "extra": self._extra_state(),
        }
        meta = {"algo": self.algo, "base": self.common.model.preset, "iteration": int(run.get("iteration", 0)),
                "global_step": self.global_step, "real_steps_used": int(run.get("budget", {}).get("used", 0)),
                "config": dataclasses.asdict(self.common) if dataclasses.is_dataclass(self.common) else {}}
        return write_checkpoint(directory, self.model, self.tokenizer, state, meta, weights)

    def _stepped_modules(self) -> nn.Module:
        """One module holding the policy and the extra modules: the names of every weight the optimizer steps."""
        return nn.ModuleDict({"policy": self.model, **self._extra_modules()})

    def load(self, directory: str | Path) -> dict[str, Any]:
        """Restore a checkpoint written by `save` into this trainer (weights in place, optimiser, RNG, counters) so
        the next update is exactly the one an uninterrupted run would have made; returns the run state it was saved
        with (for the loop to continue from)."""
        state = read_checkpoint_state(directory, self.model)
        for k, m in self._extra_modules().items():
            if fsdp.is_sharded(m):
                fsdp.load_full_state(m, state["modules"][k])
            else:
                m.load_state_dict(state["modules"][k])
        if self.optimizer is not None and state["optimizer"] is not None:
            load_optimizer_state(self._stepped_modules(), self.optimizer, state)
        self.global_step = int(state["global_step"])
        run = {k: v for k, v in state.items() if k not in TRAINER_STATE_KEYS}
        self._load_extra_state(state["extra"], run)
        set_rng_state(state["rng"])
        return run


TRAINER_STATE_KEYS = ("optimizer", "optimizer_format", "rng", "global_step", "modules", "extra")
"""The keys of a checkpoint's state a trainer owns; the others are the run state `BaseTrainer.save` was given."""
