"""The experience model's checkpoint layout on disk, and reading it back.

Owns: the directory a training run writes and prediction loads -- `em_config.json` (env, preset, lora, the
`ExperienceModelConfig` under "model", the training config under "train", format_version, steps, final), written
last, when training has finished, and `model/` (full weights, or a LoRA adapter on the base preset); beside them,
`checkpoint/` holds the training run's resumable state in the agent trainers' format
(`dreamgym.trainers.checkpoint.write_checkpoint`) -- and how an old checkpoint's config is read: missing fields get
their old default, fields that are no longer settings are dropped when they hold the value now fixed, and refused
otherwise.
Also what makes a checkpoint usable at start-up (`usable_checkpoint`, `usable_config_overrides`: the checks of the
config fields naming one), here rather than in `dreamgym.checks` so that the general checks never import this
package.
Must not know: prompts, generation, retrieval, how training works.
torch, transformers and peft are imported inside `load_checkpoint_model` only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dreamgym.config import ConfigError, from_dict, parse_overrides
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.utils.filecheck import model_weights

EM_CONFIG_FILE = "em_config.json"
"""The checkpoint's metadata; its presence is what makes a directory a checkpoint."""
MODEL_SUBDIR = "model"
"""Weights and tokenizer (`save_pretrained`): the whole model, or a LoRA adapter."""
CHECKPOINT_SUBDIR = "checkpoint"
"""The training run's resumable state (weights, optimizer, RNG, step), in the agent trainers' checkpoint format."""
EXPORT_MARKER = "dreamgym_export.json"
"""Written into an exported folder: which checkpoint it came from (prompts must be fitted by that checkpoint)."""
OBSOLETE_MODEL_FIELDS: dict[str, Any] = {"history_state_chars": 0, "example_state_chars": 240,
                                         "retrieve_real_only": True, "retry_temperature": 0.7}
"""Fields earlier checkpoints saved under "model" that are no longer settings, each with the value now fixed."""


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


def checkpoint_model_config(meta: dict[str, Any], overrides: Sequence[str] = ()) -> ExperienceModelConfig:
    """The `ExperienceModelConfig` a checkpoint was trained with (from `read_checkpoint_meta`), with `key=value`
    `overrides` on top, validated. A checkpoint whose config this version cannot reproduce raises ConfigError."""
    saved = meta.get("model")
    if not isinstance(saved, dict):
        raise ConfigError(EM_CONFIG_FILE, 'no "model" mapping (not an experience-model checkpoint)')
    fields = dict(saved)
    for key, fixed in OBSOLETE_MODEL_FIELDS.items():
        if key in fields and (value := fields.pop(key)) != fixed:
            raise ConfigError(f"model.{key}", f"the checkpoint was trained with {value!r}, which this version no "
                              f"longer supports", repr(fixed))
    # Checkpoints from before `compact_states` were trained on whole states, and those from before `state_format`
    # wrote whole states whatever the field's default becomes: a model is decoded in the format it was trained in.
    fields = {"compact_states": False, "state_format": "whole", **fields, **parse_overrides(list(overrides))}
    return from_dict(ExperienceModelConfig, fields)


def usable_checkpoint(path: str) -> None:
    """A start-up check (`dreamgym.config.checked`) of an experience-model checkpoint folder (`dreamgym train-em`):
    its em_config.json reads and holds a model config this version can run, and its `model/` folder holds whole
    weights (`dreamgym.utils.filecheck.model_weights`).
    Raises ValueError (or OSError) saying what is wrong; loads nothing."""
    meta: Any = read_checkpoint_meta(path)
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: em_config.json does not hold a mapping")
    checkpoint_model_config(meta)
    if not (Path(path) / MODEL_SUBDIR).is_dir():
        raise ValueError(f"{path}: the checkpoint has no {MODEL_SUBDIR}/ folder")
    model_weights(Path(path) / MODEL_SUBDIR)


def usable_config_overrides(overrides: list[str]) -> None:
    """A start-up check of `key=value` settings of an `ExperienceModelConfig` (known fields, right types and
    ranges); raises ValueError saying which is wrong."""
    from_dict(ExperienceModelConfig, parse_overrides(overrides))


def load_checkpoint_tokenizer(path: str | Path) -> Any:
    """The checkpoint's tokenizer alone (what prompts are fitted and tokenized with), without loading weights."""
    from transformers import AutoTokenizer

    read_checkpoint_meta(path)
    return AutoTokenizer.from_pretrained(str(Path(path) / MODEL_SUBDIR))


def export_checkpoint(path: str | Path, out: str | Path) -> Path:
    """Write the checkpoint's model as one plain Hugging Face folder at `out` (LoRA merged into the base weights,
    safetensors, the tokenizer with the chat template prompts were written with), which `vllm serve` and
    `dreamgym serve-model --preset` load. Written beside `out` and renamed into place, so `out` is whole or absent."""
    import shutil
    import tempfile

    from dreamgym.llm.hf import FALLBACK_CHAT_TEMPLATE

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; export to a new folder")
    model, tokenizer = load_checkpoint_model(path, device="cpu")
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE  # what HFBackend rendered the training prompts with
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / EXPORT_MARKER).write_text(json.dumps({"checkpoint": str(Path(path).resolve()),
                                                     "env": read_checkpoint_meta(path).get("env")}, indent=1))
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_checkpoint_model(path: str | Path, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a checkpoint: full weights, or the base preset plus the LoRA adapter (merged)."""
    from dreamgym.llm.presets import load_preset

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



def export_main(argv: list[str] | None = None) -> int:
    """`dreamgym export-em CHECKPOINT OUT`: the checkpoint as a plain model folder for vLLM or serve-model."""
    from dreamgym.config import CommandParser, fail

    parser = CommandParser(prog="dreamgym export-em",
                           description="Write a trained experience model as one Hugging Face model folder (LoRA "
                                       "merged) that `vllm serve OUT` or `dreamgym serve-model --preset OUT` serves; "
                                       "point a dream at it with dream.em=CHECKPOINT dream.em_url=http://host:port/v1.")
    parser.add_argument("checkpoint", help="an experience-model checkpoint (from dreamgym train-em)")
    parser.add_argument("out", help="the folder to create (must not exist)")
    args = parser.parse_args(argv)
    from dreamgym.utils.filecheck import output_path

    try:
        meta = read_checkpoint_meta(args.checkpoint)
        if not meta.get("final", True):
            raise ValueError(f"{args.checkpoint} has not finished training (em_config.json says final: false)")
        model_weights(Path(args.checkpoint) / MODEL_SUBDIR)  # whole, before the model is built
        output_path(args.out, "folder")
        out = export_checkpoint(args.checkpoint, args.out)
    except (OSError, ValueError) as e:
        return fail("export-em", e)
    what = f"LoRA merged into {meta.get('preset')}" if meta.get("lora") else "full weights"
    print(f"exported {args.checkpoint} ({what}) to {out}")
    return 0
