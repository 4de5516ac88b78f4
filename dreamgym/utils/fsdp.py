"""Sharded data parallelism (FSDP2, `torch.distributed.fsdp.fully_shard`) for the policy and the experience model:
each rank keeps 1/N of every trained weight, its gradient and its AdamW state, so a model whose full training state
does not fit one device trains on several (or, with one process, runs through the same code path).

Owns: sharding a Hugging Face (or PEFT-wrapped) causal LM by decoder layer (`shard`); whether a model is sharded;
the context in which its full weights stay gathered so ranks can generate different numbers of tokens
(`gathered`); the gradient norm and clipping of sharded gradients (`clip_grad_norm`); full state dicts of sharded
models and optimizers for rank 0 to write, and loading them back (`full_state`, `load_full_state`,
`optimizer_state`, `load_optimizer_state`); a frozen sharded copy (`frozen_copy`).
Must not know: trainers, algorithms, environments, files or checkpoint layout (callers write what `full_state`
returns).

How it fits the data-parallel scheme of `dreamgym.utils.distributed` (same data and seeds on every rank, each rank
back-propagates its share of a step's micro-batches scaled by the *global* step's tokens, gradients summed):
- Gradients are reduce-scattered by FSDP in every backward with a plain sum (divide factor 1, sum reductions, which
  gloo also supports), so a sharded gradient already is the sum over ranks that `distributed.sum_gradients`
  computes for replicated weights.
- Every forward and backward of a sharded model is a collective (its layers are all-gathered), so all ranks must
  run the same number of them: the trainers pad a rank's share of micro-batches with zero-weighted repeats
  (`distributed.share(..., lockstep=True)`), which run the same code and therefore the same collectives.
- Generation takes a different number of forwards on each rank (episodes end at different turns): rollouts and
  evaluations run inside `gathered`, which all-gathers every layer once on entry and keeps it gathered, so the
  forwards inside need no collective. Memory during generation is then that of an unsharded copy of the weights
  (as in verl's hybrid engine); training steps run sharded.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from dreamgym.utils import distributed

T = TypeVar("T")


def _fsdp() -> Any:
    from torch.distributed import fsdp

    return fsdp


def is_sharded(model: Any) -> bool:
    """Whether `model` is the root of an FSDP2-sharded module tree."""
    return isinstance(model, nn.Module) and isinstance(model, _fsdp().FSDPModule)


def is_dtensor(t: torch.Tensor | None) -> bool:
    """Whether `t` is a sharded tensor (an FSDP parameter or its gradient)."""
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def any_sharded(params: Sequence[torch.Tensor]) -> bool:
    return any(is_dtensor(p) for p in params)


def _units(model: nn.Module) -> list[Any]:
    """Every FSDP module under `model`, the root included (each holds one group of parameters)."""
    return [m for m in model.modules() if isinstance(m, _fsdp().FSDPModule)]


def check_config(enabled: bool, quantize: str, field: str) -> None:
    """The start-up checks of a config's sharding switch `field`: not on a 4-bit base, and on whenever `accelerate
    launch` was given an FSDP config (DreamGym shards its models itself, so the config must ask for it)."""
    from dreamgym.config import ConfigError

    if enabled and quantize != "none":
        raise ConfigError(field, "a 4-bit base cannot be sharded", f"{field}=false with quantize=4bit")
    if distributed.accelerate_fsdp() and not enabled:
        raise ConfigError(field, "accelerate launched this run with an FSDP config (ACCELERATE_USE_FSDP)",
                          f"{field}=true")


def layer_classes(model: nn.Module) -> set[str]:
    """Class names of the decoder layers to shard one by one: the Hugging Face model's `_no_split_modules`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
    names = set(getattr(base, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(base).__name__} does not name its decoder layers (_no_split_modules); FSDP shards "
                         "Hugging Face causal LMs by decoder layer")
    return names


def shard(model: nn.Module) -> nn.Module:
    """Shard `model` in place over all ranks: one FSDP unit per decoder layer, then the root (embeddings, final
    norm, head; tied weights stay together there). Gradients are summed over ranks, never averaged. Needs an
    initialised process group (`distributed.init(fsdp=True)`), one process included."""
    from torch.distributed.device_mesh import init_device_mesh

    fsdp = _fsdp()
    if not torch.distributed.is_initialized():
        raise RuntimeError("FSDP needs a process group: call dreamgym.utils.distributed.init(fsdp=True) first")
    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    names = layer_classes(model)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"no module of {sorted(names)} in {type(model).__name__}")
    for layer in layers:
        fsdp.fully_shard(layer, mesh=mesh)
    fsdp.fully_shard(model, mesh=mesh)
    for unit in _units(model):
        # Not recursive in torch: set on every unit. Sum reductions: gloo has no PREMUL_SUM.
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return model


def as_forward(model: Any, fn: Callable[[], T]) -> T:
    """`fn()` run as a forward of `model`: for a sharded model, with its root's forward hooks around it (the root's
    own weights gathered, its backward hooked), for code that calls the model's submodules directly (its decoder
    trunk, then its head on some positions only). Just `fn()` for a model that is not sharded."""
    if not is_sharded(model):
        return fn()
    if "_dreamgym_forward" not in vars(model):
        model._dreamgym_forward = lambda f: f()
        _fsdp().register_fsdp_forward_method(model, "_dreamgym_forward")
    out: T = model._dreamgym_forward(fn)
    return out


@contextlib.contextmanager
def gathered(model: Any) -> Iterator[None]:
    """Keep every layer of a sharded `model` gathered (full weights on every rank) inside the block, so forwards
    need no collective and ranks may run different numbers of them (generation). All ranks must enter together;
    re-entrant; nothing for a model that is not sharded. No backward inside: the weights are read-only copies."""
    if not is_sharded(model) or model in _GATHERED:
        yield  # not sharded, or already gathered by an enclosing block
        return
    units = _units(model)
    # Private FSDP2 state, read and restored exactly: the root decides at its lazy init (its first forward) that it
    # does not reshard after forward; run that first so the saved settings are the ones training uses.
    model._get_fsdp_state()._lazy_init()
    groups = [g for unit in units for g in unit._get_fsdp_state()._fsdp_param_groups]
    saved = [g.post_forward_mesh_info for g in groups]
    _GATHERED.add(model)
    try:
        for g in groups:
            g.post_forward_mesh_info = None  # no reshard after a forward: the next needs no all-gather
        for unit in units:
            distributed.guard("gathering the sharded weights", unit.unshard)
        yield
    finally:
        _GATHERED.discard(model)
        for g, info in zip(groups, saved):
            g.post_forward_mesh_info = info
        for unit in units:
            unit.reshard()


_GATHERED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""Sharded models inside a `gathered` block."""


def clip_grad_norm(params: Sequence[nn.Parameter], max_norm: float) -> float:
    """The global L2 norm of the step's gradients, sharded (DTensor, summed by FSDP) and replicated alike (already
    summed over ranks), and, when `max_norm` > 0, every gradient scaled so that it is at most `max_norm`."""
    grads = [p.grad for p in params if p.grad is not None]
    sharded = [g.to_local() for g in grads if is_dtensor(g)]  # type: ignore[attr-defined]  # disjoint shards: their squares add over ranks
    plain = [g for g in grads if not is_dtensor(g)]
    dev = (sharded or plain)[0].device if grads else torch.device("cpu")
    sq = torch.zeros((), dtype=torch.float64, device=dev)
    for g in sharded:
        sq += g.detach().double().pow(2).sum()
    if distributed.active():
        distributed.guard("summing the gradient norm", torch.distributed.all_reduce, sq)
    for g in plain:
        sq += g.detach().double().pow(2).sum()
    norm = float(sq.sqrt())
    if max_norm > 0 and norm > max_norm:
        coef = max_norm / (norm + 1e-6)
        for g in sharded + plain:
            g.mul_(coef)
    return norm


def _options(cpu_offload: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict of a sharded `model`, on the CPU on rank 0 and empty on the others; every rank
    must call it (it all-gathers). Keys are the model's own parameter names."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    out: dict[str, torch.Tensor] = distributed.guard("gathering the model's state", get_model_state_dict, model,
                                                     options=_options(True))
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            out.pop(name, None)  # a tied parameter (embeddings and head): gathered into two copies, saved once
        seen.add(id(p))
    return out


def load_full_state(model: nn.Module, state: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Load a full state dict (every rank passes the same one) into a sharded `model`; (missing, unexpected) keys."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    res = set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True, strict=False))
    return list(res.missing_keys), list(res.unexpected_keys)


def adapter_keys(model: nn.Module, adapter_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A PEFT adapter file's state dict renamed to `model`'s parameter names (the file omits the adapter name)."""
    names = {re.sub(r"\.default(?=\.)", "", k): k for k in model.state_dict()}
    out = {}
    for k, v in adapter_state.items():
        if k not in names:
            raise RuntimeError(f"adapter weight {k} matches no parameter of the model")
        out[names[k]] = v
    return out


def optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The full optimizer state keyed by parameter names under `modules` (which must hold every parameter the
    optimizer steps), on the CPU on rank 0; every rank must call it. Loads back at any world size."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    out: dict[str, Any] = distributed.guard("gathering the optimizer's state", get_optimizer_state_dict, modules,
                                            optimizer, options=_options(True))
    return out


def load_optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what `optimizer_state` returned (every rank passes the same full state) into `optimizer`."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(modules, optimizer, state, options=StateDictOptions(full_state_dict=True))


def frozen_copy(model: nn.Module) -> nn.Module:
    """A frozen, sharded copy of a sharded Hugging Face `model`'s current weights (a full fine-tune's reference
    policy): rebuilt from its config, filled from the gathered state, sharded like it. Every rank must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from transformers import AutoModelForCausalLM

    state = distributed.guard("gathering the model's state", get_model_state_dict, model, options=_options(False))
    device = next(iter(state.values())).device
    copy = AutoModelForCausalLM.from_config(model.config).to(device=device, dtype=next(iter(state.values())).dtype)
    missing, unexpected = copy.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"frozen copy: missing {missing}, unexpected {unexpected}")
    if missing:
        copy.tie_weights()
    copy.eval()
    for p in copy.parameters():
        p.requires_grad_(False)
    return shard(copy)
