"""The experience model's checkpoint layout on disk, and reading it back.

Owns: the directory a training run writes and prediction loads -- `em_config.json` (env, preset, lora, the
`ExperienceModelConfig` under "model", the training config under "train", format_version, steps, final), written
last, when training has finished, and `model/` (full weights, or a LoRA adapter on the base preset); beside them,
`checkpoint/` holds the training run's resumable state in the agent trainers' format
(`dreamgym.trainers.common.write_checkpoint`) -- and how an old checkpoint's missing config fields are read.
Must not know: prompts, generation, retrieval, how training works.
torch, transformers and peft are imported inside `load_checkpoint_model` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dreamgym.experience.config import ExperienceModelConfig

EM_CONFIG_FILE = "em_config.json"
"""The checkpoint's metadata; its presence is what makes a directory a checkpoint."""
MODEL_SUBDIR = "model"
"""Weights and tokenizer (`save_pretrained`): the whole model, or a LoRA adapter."""
CHECKPOINT_SUBDIR = "checkpoint"
"""The training run's resumable state (weights, optimizer, RNG, step), in the agent trainers' checkpoint format."""


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The checkpoint's `em_config.json`; FileNotFoundError when `path` is not a checkpoint."""
    p = Path(path) / EM_CONFIG_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{path} is not an experience-model checkpoint (no {EM_CONFIG_FILE})")
    return json.loads(p.read_text())


def is_trained(path: str | Path) -> bool:
    """Whether `path` holds an experience model whose training finished (its `em_config.json` says so; runs from
    before the flag existed wrote the file only at the end, or with `final` false at an intermediate save)."""
    try:
        return bool(read_checkpoint_meta(path).get("final", True))
    except (FileNotFoundError, ValueError):
        return False


def checkpoint_model_config(meta: dict[str, Any]) -> ExperienceModelConfig:
    """The `ExperienceModelConfig` a checkpoint was trained with (from `read_checkpoint_meta`)."""
    # Checkpoints from before `compact_states` were trained on whole states.
    return ExperienceModelConfig(**{"compact_states": False, **meta["model"]})


def load_checkpoint_model(path: str | Path, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a checkpoint: full weights, or the base preset plus the LoRA adapter (merged)."""
    from dreamgym.presets import load_preset

    meta = read_checkpoint_meta(path)
    mdir = Path(path) / MODEL_SUBDIR
    if meta.get("lora"):
        from peft import PeftModel
        from transformers import AutoTokenizer

        base, _ = load_preset(meta["preset"], device=device)
        model = PeftModel.from_pretrained(base, str(mdir)).merge_and_unload()
        model.eval()
        return model, AutoTokenizer.from_pretrained(str(mdir))
    return load_preset(str(mdir), device=device)

