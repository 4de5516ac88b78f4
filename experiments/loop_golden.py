"""A golden record of the training loops: every number a few short runs produce, to check that a refactor of the
loops or trainers leaves behaviour bit-identical (far cheaper than the ~13-minute quickstart).

With fixed seeds and one torch thread it runs, on the dial with the tiny preset, the recipe's RL rows as the
quickstart and the table build them (`dreamgym.commands.recipe.Recipe.run_method`) and `dreamgym train` itself:

  - recipe: offline data, a small experience model, a short SFT start (every row begins there); then
    DreamGym GRPO (dream), DreamGym-S2R GRPO (the real phase after it), GRPO real, PPO real, DreamGym PPO and a
    one-row S2R PPO (dream then real in one run), each for 2-3 iterations with evaluations every iteration;
  - `dreamgym train`: real GRPO with saves, evaluations and kept policies, then `--resume` for one more iteration;
    S2R PPO (dream then real).

It writes one JSON file: every metric row (metrics.jsonl), evaluation (eval.jsonl), curriculum row, every dreamt
episode, each row's result and a SHA-256 of each final checkpoint's weights, optimiser state, RNG state and
counters, with wall-clock figures left out (they differ between identical runs), as is the RNG state of the
experience model's checkpoint (train-em does not seed the global RNGs).

    python experiments/loop_golden.py --out runs/loop-golden --json golden-before.json
    python experiments/loop_golden.py --compare golden-before.json golden-after.json [--rename renames.json]

`--compare` prints every value that differs (nothing: identical); `--rename` maps metric names (the keys of the
metrics.jsonl rows) old -> new for a change that only renames them. Takes ~5 minutes on one idle core; the record is the same run to run on one
machine, not across CPUs (kernels and thread counts change float sums: docs/log/01-quickstart.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

TIMING = ("time", "start_time")
"""Keys holding wall-clock figures, left out of the record wherever they appear."""


def _timing(key: str) -> bool:
    return key in TIMING or key.endswith(("_time_s", "tokens_per_s", "wall_s", "elapsed_s"))


def stable(x: Any) -> Any:
    """`x` without its wall-clock figures, at any depth."""
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if not _timing(str(k))}
    if isinstance(x, list):
        return [stable(v) for v in x]
    return x


def _hash_tree(x: Any, h: Any) -> None:
    import torch

    if isinstance(x, torch.Tensor):
        h.update(str((x.dtype, tuple(x.shape))).encode())
        h.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b"")
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            h.update(repr(k).encode())
            _hash_tree(x[k], h)
    elif isinstance(x, (list, tuple)):
        h.update(f"[{len(x)}".encode())
        for v in x:
            _hash_tree(v, h)
    elif hasattr(x, "tobytes"):  # numpy arrays (numpy's RNG state)
        h.update(x.tobytes())
    else:
        h.update(repr(x).encode())


def digest(x: Any) -> str:
    h = hashlib.sha256()
    _hash_tree(x, h)
    return h.hexdigest()


def checkpoint_record(directory: Path, rng: bool = True) -> dict[str, Any]:
    """SHA-256 of a trainer checkpoint's weights and of each part of its state (its RNG state only with `rng`),
    plus its counters."""
    import torch
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for f in sorted((directory / "model").glob("*.safetensors")) + sorted((directory / "adapter").glob("*.safetensors")):
        weights.update(load_file(str(f)))
    state = torch.load(directory / "trainer_state.pt", map_location="cpu", weights_only=False)
    meta = json.loads((directory / "trainer_state.json").read_text())
    rec = {"weights": digest(weights), **{f"state/{k}": digest(v) for k, v in state.items() if rng or k != "rng"}}
    rec.update({k: meta.get(k) for k in ("iteration", "global_step", "real_steps_used")})
    return rec


def read_jsonl(path: Path) -> list[Any]:
    return [stable(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def run_record(run: Path) -> dict[str, Any]:
    """Everything a run folder holds that a refactor must not change. The experience model's training never seeds
    the global RNGs, and torch's is seeded at random when the package is imported, so the RNG state its checkpoint
    keeps differs from run to run on unchanged code: it is left out."""
    out: dict[str, Any] = {}
    for name in ("metrics.jsonl", "eval.jsonl", "curriculum.jsonl"):
        if (run / name).is_file():
            out[name] = read_jsonl(run / name)
    eps = sorted((run / "dream_episodes").glob("*.jsonl")) if (run / "dream_episodes").is_dir() else []
    if eps:
        out["dream_episodes"] = {p.name: digest(read_jsonl(p)) for p in eps}
    if (run / "dream_state.json").is_file():
        out["dream_state"] = digest(json.loads((run / "dream_state.json").read_text()))
    for ck in ("final", "checkpoint") + tuple(p.name for p in sorted(run.glob("*it[0-9]*")) if p.is_dir()):
        if (run / ck / "trainer_state.pt").is_file():
            out[f"{ck}/"] = checkpoint_record(run / ck, rng=run.name != "em")
    if (run / "summary.json").is_file():
        s = json.loads((run / "summary.json").read_text())
        out["summary"] = stable({k: v for k, v in s.items() if k not in ("machine", "run_dir", "timings_s")})
    return out


def recipe_rows(root: Path) -> dict[str, Any]:
    from dreamgym.commands.recipe import Recipe

    r = Recipe("dial", root, seed=0, eval_tasks=6, eval_seeds=[0, 1], eval_temperature=1.0, progress=False,
               train_overrides=["grpo.epochs=2", "grpo.minibatches=2"], threads=1)
    r.collect_offline(80, "oracle:0.4,noisy:0.4,random:0.2", "oracle")
    em = r.experience_model("em", adjust=lambda c: dataclasses.replace(c, max_steps=400, batch_size=8))
    r.sft(epochs=50, lr=1e-3, batch_size=16)
    rl: dict[str, Any] = dict(tasks_per_iteration=3, group_size=4, lr=2e-4, eval_every=1)
    r.run_method("DreamGym GRPO", algo="grpo", mode="dream", em=em, dream_iterations=2, **rl)
    r.run_method("DreamGym-S2R GRPO", algo="grpo", mode="s2r", from_method="DreamGym GRPO", budget=200,
                 real_iterations=3, **rl)
    r.run_method("GRPO real", algo="grpo", mode="real", budget=200, real_iterations=3, **rl)
    r.run_method("PPO real", algo="ppo", mode="real", budget=100, real_iterations=2, **rl)
    r.run_method("DreamGym PPO", algo="ppo", mode="dream", em=em, dream_iterations=2, **rl)
    r.run_method("S2R PPO", algo="ppo", mode="s2r", em=em, dream_iterations=1, budget=60, real_iterations=2, **rl)
    return {"results": stable(r.results), "em": em, "sft": root / "sft" / "final"}


def train_runs(root: Path, em: Path, sft: Path) -> None:
    from dreamgym.commands.train import main as train

    common = ["--no-progress", "tensorboard=false", "eval_max_tasks=4", "eval_temperature=1.0", "eval_seeds=[0,1]",
              "agent.history=0", "agent.show_admissible=false", "agent.system_prompt=You are an agent.",
              "rollout.max_new_tokens=10", "rollout.max_episode_steps=12", "optim.lr=2e-4", f"init={sft}",
              "grpo.epochs=2", "grpo.minibatches=2", "ppo.epochs=2", "ppo.minibatches=2"]
    real = ["--algo", "grpo", "--env", "dial", f"run_dir={root / 'train-grpo-real'}", "group_size=4",
            "tasks_per_iteration=3", "save_every=1", "eval_every=1", "keep_evaluated=true",
            "real_step_budget=250", *common]
    assert train(real + ["iterations=2"]) == 0
    assert train(real + ["iterations=3", "--resume"]) == 0
    assert train(["--algo", "ppo", "--env", "dial", "mode=s2r", f"run_dir={root / 'train-ppo-s2r'}",
                  f"dream.em={em}", "dream.iterations=1", "dream.s2r_iterations=2", "dream.curriculum.n_seeds=1",
                  "group_size=3", "tasks_per_iteration=3", "eval_every=1", "save_every=1",
                  "real_step_budget=80", *common]) == 0


def record(out: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    if out.exists():
        shutil.rmtree(out)
    got = recipe_rows(out / "recipe")
    train_runs(out, got["em"], got["sft"])
    runs = {str(p.relative_to(out)): run_record(p) for p in sorted(out.rglob("*"))
            if p.is_dir() and ((p / "metrics.jsonl").is_file() or (p / "final").is_dir())}
    return {"results": got["results"], "runs": runs}


def compare(a: Any, b: Any, path: str = "") -> list[str]:
    """Every place where `a` and `b` differ, as 'path: a != b' lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: {'missing before' if k not in a else 'missing after'}")
            else:
                out += compare(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in compare(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def renamed(x: Any, names: dict[str, str]) -> Any:
    """`x` with every dict key in `names` replaced by its new name (metric renames)."""
    if isinstance(x, dict):
        return {names.get(k, k): renamed(v, names) for k, v in x.items()}
    if isinstance(x, list):
        return [renamed(v, names) for v in x]
    return x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/loop-golden", help="scratch folder for the runs (replaced)")
    ap.add_argument("--json", default="loop-golden.json", help="where the record goes")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two records instead")
    ap.add_argument("--rename", default="", help="with --compare: JSON {old metric name: new name} for BEFORE")
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        if args.rename:  # metric names only: the same key elsewhere (an evaluation's success_rate) is not one
            names = json.loads(Path(args.rename).read_text())
            for run in before["runs"].values():
                if "metrics.jsonl" in run:
                    run["metrics.jsonl"] = renamed(run["metrics.jsonl"], names)
        diff = compare(before, after)
        print("\n".join(diff) if diff else "identical")
        return 1 if diff else 0
    rec = record(Path(args.out))
    Path(args.json).write_text(json.dumps(rec, indent=1, sort_keys=True))
    n_rows = sum(len(r.get("metrics.jsonl", [])) for r in rec["runs"].values())
    print(f"wrote {args.json}: {len(rec['runs'])} runs, {n_rows} metric rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
