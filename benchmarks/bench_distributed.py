"""Throughput of one process against two (torchrun, gloo, one CPU thread each) on the same global batch: the
experience model's SFT (tokens/s) and real GRPO on the dial (seconds per iteration, rollouts and update).

    python benchmarks/bench_distributed.py [--procs 1 2] [--em-steps 12] [--grpo-iterations 3] [--fsdp]
        [--grpo-args init=PATH agent.show_admissible=false ...]

With --fsdp every configuration also runs sharded (`fsdp=true` / `model.fsdp=true`, dreamgym/utils/fsdp.py) beside the
replicated run, so the cost of sharding (all-gathers in every forward and backward, gathering for generation) is
read side by side.

An untrained tiny policy writes no valid action, so every GRPO group has equal rewards and no update runs: give a
trained start (`--grpo-args init=...` with the agent settings it was trained with) to measure the update too.

Each configuration runs as its own command, exactly as a user launches it (`dreamgym ...` or
`torchrun --nproc_per_node N -m dreamgym.cli ...`), so start-up is excluded by reading the runs' own timers
(`train_summary.json` for the experience model; `rollout_time_s`/`update_time_s` per GRPO iteration). On a 2-core
machine two ranks can at best double throughput, and only when nothing else runs; the printed load average says how
busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], procs: int) -> None:
    launch = [sys.executable, "-m", "dreamgym.cli"] if procs == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr",
         "127.0.0.1", "--master_port", str(_port()), "-m", "dreamgym.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(launch + args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{proc.stderr[-2000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", nargs="+", type=int, default=[1, 2])
    p.add_argument("--em-steps", type=int, default=12)
    p.add_argument("--grpo-iterations", type=int, default=3)
    p.add_argument("--grpo-args", nargs="*", default=[], help="extra key=value overrides of the GRPO runs")
    p.add_argument("--fsdp", action="store_true", help="also run every configuration with sharded weights")
    a = p.parse_args()
    modes = [("", False)] + ([(" sharded", True)] if a.fsdp else [])
    sys.path.insert(0, str(ROOT / "tests"))
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl
    from dreamgym.utils.metrics import describe_machine, machine_info

    print(describe_machine(machine_info()), f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_jsonl(root / "data.jsonl", dial_trajectories(60))
        print(f"\nexperience-model SFT, tiny preset, {a.em_steps} steps of 16 sequences")
        for n in a.procs:
            for label, sharded in modes:
                out = root / f"em{n}{label.strip()}"
                _run(["train-em", "--data", str(root / "data.jsonl"), "env=dial", f"max_steps={a.em_steps}",
                      "batch_size=16", "em.embedder=hashing", "threads=1", "task_writing=0",
                      "optim.micro_batch_tokens=2048", f"model.fsdp={str(sharded).lower()}", f"out={out}",
                      "heldout.share=0"], n)  # training throughput on all the data, no held-out report
                s = json.loads((out / "train_summary.json").read_text())
                rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
                print(f"  {n} process{'es' if n > 1 else '  '}{label:8}: {rows[-1]['em/tokens_per_s']:8.0f} tokens/s "
                      f"({s['train_time_s']:.1f}s training)")
        print(f"\nreal GRPO on the dial, tiny preset, {a.grpo_iterations} iterations of 8 tasks x 8 episodes")
        for n in a.procs:
            for label, sharded in modes:
                run = root / f"grpo{n}{label.strip()}"
                _run(["train", "--algo", "grpo", "--env", "dial", "--no-progress", "tensorboard=false",
                      "eval_at_start=false", "eval_every=0", "eval_max_tasks=1", f"iterations={a.grpo_iterations}",
                      "group_size=8", "tasks_per_iteration=8", "rollout.max_new_tokens=16",
                      "rollout.max_episode_steps=6", f"model.fsdp={str(sharded).lower()}", *a.grpo_args, f"run_dir={run}"], n)
                its = [r for line in (run / "metrics.jsonl").open()
                       if "rollout/episodes" in (r := json.loads(line))]
                roll = sum(r["rollout/rollout_time_s"] for r in its) / len(its)
                upd = sum(r["losses/update_time_s"] for r in its) / len(its)
                steps = sum(r["losses/optimizer_steps"] for r in its)
                print(f"  {n} process{'es' if n > 1 else '  '}{label:8}: {roll + upd:6.2f}s per iteration "
                      f"(rollouts {roll:.2f}s, update {upd:.2f}s; {steps:.0f} optimizer steps)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
