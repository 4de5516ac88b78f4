"""Trainer checkpoints on disk: the weights (a Hugging Face model folder or a PEFT adapter folder, with the
tokenizer), the torch-saved state and the JSON meta, written atomically, recovered after a kill, and checked before
a resume.

Owns: the checkpoint layout (`STATE_FILE`, `META_FILE`, `model/` or `adapter/`), `write_checkpoint` /
`read_checkpoint_state`, the optimizer state by position or by name (`optimizer_state`), `atomic_dir` and its
recovery (`recover_dir`, `resumable_checkpoint`), and `is_peft`, which decides the weights' form. Every trainer's
checkpoint, the experience model's included, is written here.
Must not know: any trainer or algorithm: what the state and the meta hold is the caller's.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dreamgym.utils import fsdp
from dreamgym.utils.filecheck import META_FILE, STATE_FILE, checkpoint_problem
from dreamgym.utils.paths import crash_point


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")




def save_model_weights(model: nn.Module, tokenizer: Any, directory: Path,
                       state_dict: dict[str, torch.Tensor] | None = None) -> str:
    """Write the policy: a PEFT adapter folder (`adapter/`) or a full Hugging Face model (`model/`), with the
    tokenizer beside it; `state_dict` (a sharded model's gathered `fsdp.full_state`) replaces the model's own.
    Returns the kind ("lora" or "full")."""
    kw = {} if state_dict is None else {"state_dict": state_dict}
    # save_pretrained is a PEFT / transformers method: nn.Module.__getattr__ types it as Tensor | Module.
    if is_peft(model):
        model.save_pretrained(directory / "adapter", **kw)  # type: ignore[operator]
        tokenizer.save_pretrained(directory / "adapter")
        return "lora"
    model.save_pretrained(directory / "model", **kw)  # type: ignore[operator]
    tokenizer.save_pretrained(directory / "model")
    return "full"


def load_model_weights(model: nn.Module, directory: Path) -> None:
    """Load weights written by `save_model_weights` into `model` in place (the backend shares the object)."""
    from safetensors.torch import load_file

    if is_peft(model):
        adapter_sd = load_file(str(directory / "adapter" / "adapter_model.safetensors"))
        if fsdp.is_sharded(model):  # every rank reads the file and keeps its own shard
            fsdp.load_full_state(model, fsdp.adapter_keys(model, adapter_sd))
            return
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, adapter_sd)
        return
    files = sorted((directory / "model").glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory / 'model'} holds no .safetensors weights")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if fsdp.is_sharded(model):
        missing, unexpected = fsdp.load_full_state(model, {k: v for k, v in sd.items() if k not in tied})
    else:
        missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"checkpoint mismatch: missing {sorted(set(missing) - tied)}, unexpected {unexpected}")
    if tied and not fsdp.is_sharded(model):  # a sharded model keeps its tied parameter as one
        model.tie_weights()  # type: ignore[operator]  # a transformers method


class CheckpointError(RuntimeError):
    """A run folder shows a checkpoint was written, but none can be loaded; the message names what is wrong."""


def _old_dirs(final: Path) -> list[Path]:
    # `.<name>.old` now; `.<name>.old-<pid>-<ns>` from before, which a kill may have left in an existing run folder.
    return sorted(final.parent.glob(f".{glob.escape(final.name)}.old*"))


def recover_dir(final: Path) -> None:
    """Finish what a kill interrupted in `atomic_dir(final)`: the only moment `final` is missing while a checkpoint
    exists is between its two renames, when the previous one sits complete in `.<name>.old`, so that is renamed
    back; when `final` exists, an `.old` is the leftover of a finished switch (perhaps half deleted) and is removed,
    as are temporary folders that a kill left unfinished. Raises `CheckpointError` when `final` is missing and
    several `.old` folders (possible only with the old naming) leave it ambiguous which one was the checkpoint."""
    final = Path(final)
    olds = _old_dirs(final)
    if not final.exists():
        if len(olds) > 1:
            raise CheckpointError(f"{final} is missing and {len(olds)} earlier versions of it remain "
                                  f"({', '.join(o.name for o in olds)}); rename the complete one to {final.name}")
        if olds:
            os.replace(olds[0], final)
            _fsync_dir(final.parent)
        olds = []
    for o in olds:
        shutil.rmtree(o)
    for t in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        shutil.rmtree(t, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(dirpath))


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces `final`, so readers see the old or the new
    folder, never a half-written one, and a kill at any moment leaves a complete one on disk.

    Linux has no portable atomic swap of two non-empty directories (renameat2's RENAME_EXCHANGE is not supported by
    every filesystem), so the switch is two renames: `final` -> `.<name>.old`, then the new folder -> `final`. A
    kill between them leaves no `final`, but the complete previous folder under a fixed name, which `recover_dir`
    (run here before each switch, and by `resumable_checkpoint` before a resume) renames back. The old one is only
    deleted once `final` is the new folder, and its fixed name means at most one ever exists: a half-deleted one
    blocks the next `final` -> `.old` rename (non-empty target) until `recover_dir` clears it. The contents are
    fsynced before the switch so a renamed folder is never one whose files were still in the page cache."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(final)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        _fsync_tree(tmp)
        crash_point("atomic_dir.filled")
        old = final.with_name(f".{final.name}.old")
        if final.exists():
            os.replace(final, old)
            crash_point("atomic_dir.swap")
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        crash_point("atomic_dir.replaced")
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_checkpoint(directory: str | Path, model: nn.Module, tokenizer: Any, state: dict[str, Any],
                     meta: dict[str, Any], weights: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a resumable checkpoint atomically (`atomic_dir`): the weights (`save_model_weights`), `state`
    (torch-saved: optimiser, RNG, counters) in `STATE_FILE` and `meta` plus the weights' kind in `META_FILE` (JSON;
    it must hold `iteration`, which `checkpoint_problem` checks). Every trainer's checkpoint, the experience
    model's included, is written here. `weights`: a sharded model's gathered state (`fsdp.full_state`)."""
    directory = Path(directory)
    with atomic_dir(directory) as tmp:
        kind = save_model_weights(model, tokenizer, tmp, weights)
        crash_point("checkpoint.weights")
        torch.save(state, tmp / STATE_FILE)
        (tmp / META_FILE).write_text(json.dumps({"kind": kind, **meta}, indent=1, default=str))
    return directory


OPTIMIZER_BY_NAME = "names"
"""`state["optimizer_format"]` of a checkpoint whose optimizer state is keyed by parameter names
(`fsdp.optimizer_state`, written by sharded runs; it loads at any world size, sharded or not) rather than by
position (`state_dict()`)."""


def optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """{"optimizer": ..., "optimizer_format": ...} for a checkpoint: by name when `modules` holds sharded weights
    (every rank must call it then), else the optimizer's own `state_dict()`. `modules` holds every stepped weight."""
    if any(fsdp.is_sharded(m) for m in modules.modules()):
        return {"optimizer": fsdp.optimizer_state(modules, optimizer), "optimizer_format": OPTIMIZER_BY_NAME}
    return {"optimizer": optimizer.state_dict()}


def load_optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Restore what `optimizer_state` wrote (a by-name state into a sharded or unsharded optimizer alike)."""
    if state.get("optimizer_format") == OPTIMIZER_BY_NAME:
        fsdp.load_optimizer_state(modules, optimizer, state["optimizer"])
    elif any(fsdp.is_sharded(m) for m in modules.modules()):
        raise CheckpointError("this checkpoint's optimizer state is by position (an unsharded run); a sharded run "
                              "(model.fsdp=true) resumes only checkpoints written with sharding")
    else:
        optimizer.load_state_dict(state["optimizer"])


def read_checkpoint_state(directory: str | Path, model: nn.Module) -> dict[str, Any]:
    """Load a `write_checkpoint` checkpoint's weights into `model` in place and return its torch-saved state."""
    directory = Path(directory)
    load_model_weights(model, directory)
    return torch.load(directory / STATE_FILE, map_location="cpu", weights_only=False)


def resumable_checkpoint(path: str | Path) -> Path | None:
    """The checkpoint at `path` to resume from, after recovering one that a kill left mid-switch (`recover_dir`);
    None when no checkpoint was ever completed there (resume starts the run from the beginning). Raises
    `CheckpointError` when there is evidence of a checkpoint that cannot be loaded (a folder missing its state or
    weights, an ambiguous set of earlier versions), because resuming would silently restart at iteration 0."""
    path = Path(path)
    recover_dir(path)
    if not path.exists():
        return None
    problem = checkpoint_problem(path)
    if problem is not None:
        raise CheckpointError(f"cannot resume from {path}: {problem}. Move it away to start the run over.")
    return path


def read_meta(directory: str | Path) -> dict[str, Any]:
    """The JSON side of a checkpoint (algo, kind, base preset, counters, config)."""
    return json.loads((Path(directory) / META_FILE).read_text())
