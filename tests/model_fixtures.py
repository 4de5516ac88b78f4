"""The two trained tiny models the tests start from, shipped in `tests/fixtures/models/` (not a test module).

- `dial-em`: an experience model (the tiny preset) trained with retrieval on real dial data (`EM_SETTINGS`);
- `dial-warm`: the tiny preset after a brief SFT on expert then noisy dial demonstrations (`WARM_RECIPE`), the
  partially competent start policy of the learning tests.

Why shipped, not trained at test time: where a tiny model's training lands depends on the CPU's kernels and the
thread count (float rounding moves the step at which it learns the dial's rule), so a threshold set where one
machine's build landed failed on another machine's build (7 of 9 probes against "at least 8"); and building both
costs about 15 minutes of a fresh machine's test run. Shipped, every machine tests the same two models.

Each folder is a Hugging Face model (weights stored in float16 to halve the repository's share, upcast to float32
when unpacked) with its tokenizer, so it does not depend on the tiny preset's current tokenizer, and a
`manifest.json`: the spec it was built from, the command, date, machine, wall time and what was measured on the
unpacked model. `em_checkpoint()` and `warm_model_dir()` unpack a fixture once into the DreamGym cache and refuse a
fixture whose spec is not the current one (a changed experience-model format, recipe or agent prompt), naming the
command that rebuilds it:

    python tests/model_fixtures.py build em|warm    # trains under $DREAMGYM_CACHE, then packs into tests/fixtures
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

from dreamgym.agent import AgentConfig
from dreamgym.experience.format import FORMAT_VERSION
from dreamgym.utils.paths import cache_dir
from dreamgym.rl.rollout import RolloutConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"

# A short prompt keeps the tiny model's CPU cost down: history 0 is enough for the (Markov) dial, whose state
# already lists its buttons.
DIAL_AGENT = AgentConfig(history=0, show_admissible=False, system_prompt="You are an agent.")
DIAL_ROLLOUT = RolloutConfig(max_new_tokens=10, max_episode_steps=12)

# The quickstart's settings: two retrieved examples, no history window, reasoning traces, batches of 8. The tiny
# model writes the format after ~100 steps but copies the dial's value only after ~1000 (an abrupt drop of the
# loss), so anything shorter cannot test dynamics, rewards or the use of examples. One thread: with two, a build
# beside other work ran 8-15x slower (spin waits).
EM_SETTINGS = {"episodes": 300, "max_steps": 1600, "batch_size": 8, "k": 2, "history": 0, "threads": 1,
               "use_reasoning": True, "embedder": "hashing", "lr": 1e-3, "warmup_steps": 50}

# "A brief SFT on expert then noisy demonstrations": (1) SFT on expert dial demonstrations until the sampled success
# on the 72 train tasks reaches `expert_until` (the tiny model learns the reply format within ~50 steps but the dial
# rule only in a sharp transition after a few hundred, so the stop is decided by measured success, not a step
# count); (2) SFT on the family's noisy and random demonstrations, which teaches their detours and premature
# submits, until success falls to `soft_until`. The result knows the format and the rule but acts on it
# unreliably: partially competent.
WARM_RECIPE = {"version": 3, "batch": 32, "seed": 0, "expert_lr": 1e-3, "expert_until": 0.9, "expert_check": 20,
               "expert_min": 300, "expert_max": 900, "soft_lr": 3e-4, "soft_until": 0.4, "soft_check": 5,
               "soft_max": 60}


class StaleFixture(RuntimeError):
    """A shipped fixture was built from another spec than the code's current one."""


def em_spec() -> dict[str, Any]:
    return {**EM_SETTINGS, "format_version": FORMAT_VERSION}


def warm_spec() -> dict[str, Any]:
    return {"recipe": WARM_RECIPE, "agent": repr(DIAL_AGENT)}


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------- the data


def em_training_data(path: Path) -> str:
    """Write the EM fixture's training data (real dial episodes of the family's scripted policies, deterministic)
    to `path`; returns the sha256 of their content."""
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl

    write_jsonl(path, dial_trajectories(EM_SETTINGS["episodes"]))
    # The episodes' content, without the clock readings each record carries.
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.pop("start_time", None)
        row.pop("wall_time_s", None)
    return _sha(rows)


# ------------------------------------------------------------------------------------------- unpacking


def _convert_weights(folder: Path, dtype: Any) -> None:
    """Every safetensors file under `folder` rewritten with its floating tensors in `dtype`."""
    from safetensors.torch import load_file, save_file

    for f in folder.rglob("*.safetensors"):
        tensors = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in load_file(f).items()}
        save_file(tensors, f, metadata={"format": "pt"})


def _unpacked(name: str, spec: dict[str, Any],
              finish: Callable[[Path, Path, dict[str, Any]], None] | None = None) -> Path:
    src = FIXTURES / name
    manifest = json.loads((src / "manifest.json").read_text())
    if manifest["spec"] != spec:
        raise StaleFixture(f"tests/fixtures/models/{name} was built from another spec than the code's "
                           f"({manifest['spec']} != {spec}); rebuild it: python tests/model_fixtures.py build "
                           f"{name.removeprefix('dial-')}")
    import torch

    out = cache_dir("test-fixtures") / f"{name}-{_sha(manifest)[:12]}"
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes unpack it once
        if (out / "manifest.json").is_file():
            return out
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        _convert_weights(tmp, torch.float32)
        if finish is not None:
            finish(tmp, out, manifest)
        os.replace(tmp, out)  # manifest.json inside marks it complete
    return out


def _finish_em(folder: Path, final: Path, manifest: dict[str, Any]) -> None:
    """Regenerate the training data beside the checkpoint's final place and point the metadata in `folder` at it
    (the replay buffer of the checkpoint is seeded from its training data)."""
    data = final.with_suffix(".jsonl")
    digest = em_training_data(data)
    if digest != manifest["data_sha256"]:
        raise StaleFixture(f"the dial episodes EM_SETTINGS describe are not the ones tests/fixtures/models/dial-em "
                           f"was trained on (sha256 {digest[:12]} != {manifest['data_sha256'][:12]}): the dial or its "
                           "scripted policies changed; rebuild it: python tests/model_fixtures.py build em")
    meta_path = folder / "em_config.json"
    meta = json.loads(meta_path.read_text())
    meta["train"]["data"] = str(data)
    meta_path.write_text(json.dumps(meta, indent=1))


def em_checkpoint() -> Path:
    """The dial experience-model checkpoint (an `ExperienceModel.load`-able folder), unpacked into the cache."""
    return _unpacked("dial-em", em_spec(), _finish_em)


def warm_model_dir() -> Path:
    """The warm-started dial policy (a Hugging Face model folder with its tokenizer), unpacked into the cache."""
    return _unpacked("dial-warm", warm_spec())


# --------------------------------------------------------------------------------------------- building


def _pack(src_files: list[tuple[Path, str]], name: str, manifest: dict[str, Any]) -> Path:
    """Copy `(file, relative name)` pairs into tests/fixtures/models/NAME with float16 weights and the manifest,
    replacing the old folder in one rename."""
    import torch

    dst = FIXTURES / name
    tmp = dst.with_name(f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for f, rel in src_files:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, tmp / rel)
    _convert_weights(tmp, torch.float16)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return dst


def _manifest(spec: dict[str, Any], what: str, t0: float, **extra: Any) -> dict[str, Any]:
    """The build's record; `machine` is `dreamgym.utils.metrics.machine_info()` (date, CPU, kernels, threads), which
    decide where a tiny model's training lands."""
    from dreamgym.utils.metrics import machine_info

    return {"spec": spec, "what": what, "command": f"python tests/model_fixtures.py build {what}",
            "machine": machine_info(), "build_s": round(time.perf_counter() - t0), **extra}


EM_PROBES = [(v, a) for v in (2, 5, 7) for a in ("turn up", "turn down", "submit")]  # DIAL_TASK's target is 5


def em_probe_score(model: Any) -> dict[str, Any]:
    """The dial probes on an `ExperienceModel` (one batch): how many next dial values are right, how many `done`s
    are right (exactly the submits end the episode), the rewards of the losing submits, and the answers' texts."""
    from em_helpers import dial_query

    from dreamgym.envs.dial import parse_state

    preds = model.predict([dial_query(v, a) for v, a in EM_PROBES])
    want = [v + {"turn up": 1, "turn down": -1, "submit": 0}[a] for v, a in EM_PROBES]
    return {"values_right": sum(parse_state(p.next_state) == w for p, w in zip(preds, want)),
            "done_right": sum(p.done == (a == "submit") for p, (_, a) in zip(preds, EM_PROBES)),
            "losing_submit_rewards": [p.reward for p, (v, a) in zip(preds, EM_PROBES) if a == "submit" and v != 5],
            "texts": [p.text for p in preds]}


def build_em() -> Path:
    """Train the EM fixture (under $DREAMGYM_CACHE/test-artifacts, resumable) and pack it."""
    from dreamgym.experience.config import ExperienceModelConfig
    from dreamgym.trainers.common import ModelConfig
    from dreamgym.experience.train import TrainEMConfig, train_em

    t0 = time.perf_counter()
    s = EM_SETTINGS
    root = cache_dir("test-artifacts")
    out = root / f"em-dial-{_sha(em_spec())[:12]}"
    data = root / f"{out.name}.jsonl"
    digest = em_training_data(data)
    if not (out / "train_summary.json").is_file():
        cfg = TrainEMConfig(env="dial", data=str(data), model=ModelConfig(preset="tiny"), out=str(out), resume=True,
                            em=ExperienceModelConfig(k=s["k"], history=s["history"], embedder=s["embedder"],
                                                     use_reasoning=s["use_reasoning"]),
                            max_steps=s["max_steps"], batch_size=s["batch_size"], threads=s["threads"],
                            optim=dataclasses.replace(TrainEMConfig().optim, lr=s["lr"],
                                                      warmup_steps=s["warmup_steps"]),
                            log_every=50, save_every=200)
        train_em(cfg)
    # The optimizer state in checkpoint/ is what resuming needs; the tests load the model only.
    files = [(f, str(f.relative_to(out))) for f in sorted(out.rglob("*"))
             if f.is_file() and f.relative_to(out).parts[0] != "checkpoint"]
    manifest = _manifest(em_spec(), "em", t0, data_sha256=digest)
    dst = _pack(files, "dial-em", manifest)
    from dreamgym.experience.data import checkpoint_buffer
    from dreamgym.experience.model import ExperienceModel

    unpacked = em_checkpoint()
    model = ExperienceModel.load(unpacked, buffer=checkpoint_buffer(unpacked), device="cpu")
    score = em_probe_score(model)
    del score["texts"]
    manifest["measured"] = {**score, "failures": model.stats["failures"]}
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return dst


def build_warm() -> Path:
    """Run WARM_RECIPE on the tiny preset and pack the result."""
    import tempfile

    import torch

    from dreamgym.commands.collect import run_episode
    from dreamgym.envs import dial
    from dreamgym.rl.evaluate import EvalConfig, evaluate_policy
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.presets import load_preset
    from dreamgym.trainers.common import OptimConfig, TrainerConfig
    from dreamgym.trainers.sft import SFTConfig, SFTTrainer

    t0 = time.perf_counter()
    torch.set_num_threads(1)
    model, tok = load_preset("tiny", device="cpu")
    r = WARM_RECIPE
    be = HFBackend(copy.deepcopy(model), tok, batch_size=128)
    env, tasks = dial.make_env("train"), dial.make_tasks("train")

    def demos(policies: list[str]) -> list[Any]:
        return [run_episode(env, dial.POLICIES[p](seed=i), seed=i, task=t, policy_name=p)
                for i, t in enumerate(tasks) for p in policies]

    def success(step: int) -> float:
        cfg = EvalConfig(temperature=1.0, sample_seed=step, agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
        return evaluate_policy(be, dial.DialEnv, tasks, [0], cfg).success_rate

    rng = random.Random(r["seed"])
    steps = {}
    for phase, policies, lr, stop, check, lo, hi in (
            ("expert", ["expert"], r["expert_lr"], lambda x: x >= r["expert_until"], r["expert_check"],
             r["expert_min"], r["expert_max"]),
            ("soft", ["noisy", "random"], r["soft_lr"], lambda x: x <= r["soft_until"], r["soft_check"], 0,
             r["soft_max"])):
        common = TrainerConfig(seed=r["seed"], optim=OptimConfig(lr=lr, micro_batch_tokens=16384), agent=DIAL_AGENT,
                               rollout=DIAL_ROLLOUT)
        sft = SFTTrainer(be, SFTConfig(batch_size=r["batch"], only_won=False), common)
        examples, _ = sft.examples(demos(policies))
        for step in range(1, hi + 1):
            sft.train_step(rng.sample(examples, r["batch"]))
            if step >= lo and step % check == 0 and stop(success(step)):
                break
        steps[phase] = step
    with tempfile.TemporaryDirectory() as d:
        be.model.save_pretrained(d)
        tok.save_pretrained(d)
        files = [(f, f.name) for f in sorted(Path(d).iterdir()) if f.is_file()]
        manifest = _manifest(warm_spec(), "warm", t0, steps=steps)
        dst = _pack(files, "dial-warm", manifest)
    # What the tests start from: the unpacked (float16-rounded) model's sampled success, as the tests' dial_eval.
    m, t = load_preset(str(warm_model_dir()), device="cpu")
    cfg = EvalConfig(temperature=1.0, sample_seed=101, agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
    res = evaluate_policy(HFBackend(m, t, batch_size=128), dial.DialEnv, tasks, [0, 1, 2], cfg)
    manifest["measured"] = {"sampled_success_train_x3": round(res.success_rate, 4), "n": res.n}
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return dst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["build"])
    p.add_argument("what", choices=["em", "warm"])
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dst = build_em() if a.what == "em" else build_warm()
    print(json.loads((dst / "manifest.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # em_helpers
    raise SystemExit(main())
