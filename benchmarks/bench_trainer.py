"""Trainer throughput: rollout tokens/s, the GRPO update's tokens/s, and a bare forward+backward of the same
model on the same tokens (their ratio is the trainer's overhead).

    python benchmarks/bench_trainer.py [--preset tiny] [--env dial] [--tasks 8] [--group 8] [--threads 1]

What is measured, on one GRPO iteration in the real environment:
- rollout: generated tokens / time inside `generate_from_ids` (the batched policy sampling), and the whole
  rollout wall time including environment steps and prompt building;
- update: `GRPOTrainer.optimize` on the iteration's turn samples — all (prompt + completion) tokens processed /
  wall time (forward, loss, backward, optimiser step);
- bare: for the same micro-batches (same padded tensors), `model(input_ids).logits.float().mean().backward()`
  plus an optimiser step; overhead = update time / bare time. The trainer projects onto the vocabulary only
  at the generated-token positions, so it can beat this "bare" pass; a second bare pass with that same
  forward (`policy_forward(...).logp.sum().backward()`) isolates the cost of the loss, masks and bookkeeping.
The GRPO samples use advantages of +/-1 so every sample is trained on even when all rewards are equal (the
numbers measure throughput, not learning).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--env", default="dial")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared machine)")
    ap.add_argument("--repeats", type=int, default=2, help="timed repetitions of update and bare passes (best kept)")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from dreamgym.agent import AgentConfig
    from dreamgym.envs import family
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.presets import load_preset
    from dreamgym.episode import RolloutConfig
    from dreamgym.rl.rollout import run_rollouts
    from dreamgym.trainers.common import (ModelConfig, OptimConfig, TrainerConfig, autocast, make_optimizer,
                                          micro_batches, pack, trainable_parameters)
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer, TurnSample

    fam = family(args.env)
    model, tok = load_preset(args.preset)
    device = next(model.parameters()).device
    common = TrainerConfig(seed=0, model=ModelConfig(preset=args.preset), optim=OptimConfig(lr=1e-6),
                           agent=AgentConfig(history=2),
                           rollout=RolloutConfig(max_new_tokens=args.max_new_tokens, max_episode_steps=8,
                                                 on_invalid_action="pass"), group_size=args.group)
    backend = HFBackend(model, tok, batch_size=64)
    trainer = GRPOTrainer(backend, GRPOConfig(), common)
    tasks = fam.tasks("train")[: args.tasks]

    # --- rollout
    stats: dict[str, float] = {}
    t0 = time.perf_counter()
    episodes = run_rollouts(backend, lambda: fam.make_env("train"), tasks, group_size=args.group, seed=0,
                            config=common.rollout, agent=common.agent, stats=stats)
    roll_wall = time.perf_counter() - t0
    samples = [TurnSample(t.prompt_ids, t.completion_ids, t.logprobs, 1.0 if i % 2 else -1.0, i)
               for i, e in enumerate(episodes) for t in e.turns if t.completion_ids]
    n_tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)

    # --- GRPO update (best of repeats; weights move a little each time, which does not change the cost)
    upd = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = trainer.optimize(samples)
        upd.append(time.perf_counter() - t0)
    update_s = min(upd)

    # --- bare forward + backward on the very same micro-batches
    bare_model = copy.deepcopy(trainer.model)
    bare_model.train()
    params = trainable_parameters(bare_model)
    opt = make_optimizer(params, common.optim)
    ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in ordered]
    chunks = micro_batches(lengths, common.optim.micro_batch_tokens)
    packs = [pack([ordered[i].prompt_ids for i in c], [ordered[i].completion_ids for i in c], trainer.pad_id, device)
             for c in chunks]
    def best_pass_s(loss_of: Any) -> float:
        """Fastest of `repeats` passes: backward of `loss_of(pack)` over every micro-batch, one optimiser step."""
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for p in packs:
                loss_of(p).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return min(times)

    def full_vocab_loss(p: Any) -> Any:
        with autocast(device):
            logits = bare_model(input_ids=p.input_ids, attention_mask=p.attention_mask).logits
        return logits.float().mean()

    bare_s = best_pass_s(full_vocab_loss)
    # --- the same, with the trainer's own forward (vocabulary projection only at the trained positions)
    from dreamgym.trainers.common import policy_forward

    masked_s = best_pass_s(lambda p: policy_forward(bare_model, p).logp.sum())

    res = {
        "preset": args.preset, "device": str(device), "threads": args.threads,
        "params": sum(p.numel() for p in model.parameters()),
        "episodes": len(episodes), "turn_samples": len(samples), "tokens_per_update": n_tokens,
        "generated_tokens": stats["gen_tokens"], "prompt_tokens": stats["prompt_tokens"],
        "rollout_gen_tokens_per_s": stats["gen_tokens"] / stats["gen_time_s"],
        "rollout_wall_s": roll_wall, "rollout_env_s": stats["env_time_s"],
        "update_s": update_s, "update_tokens_per_s": n_tokens / update_s,
        "bare_fwd_bwd_s": bare_s, "bare_tokens_per_s": n_tokens / bare_s,
        "overhead_ratio": update_s / bare_s, "update_trained_tokens": out.get("trained_tokens", 0.0),
        "bare_masked_s": masked_s, "bare_masked_tokens_per_s": n_tokens / masked_s,
        "overhead_vs_masked": update_s / masked_s,
    }
    print(f"{args.preset} on {device} ({res['params']:,} params, {args.threads} thread(s)):")
    print(f"  rollout : {len(episodes)} episodes, {int(stats['gen_tokens'])} generated tokens, "
          f"{res['rollout_gen_tokens_per_s']:.0f} gen tok/s (wall {roll_wall:.1f}s, env {stats['env_time_s']:.2f}s)")
    print(f"  update  : {len(samples)} turn samples, {n_tokens} tokens, {res['update_tokens_per_s']:.0f} tok/s "
          f"({update_s:.2f}s)")
    print(f"  bare    : fwd+bwd+step on the same tokens {res['bare_tokens_per_s']:.0f} tok/s ({bare_s:.2f}s)")
    print(f"  bare/lm : same, vocabulary projection only where trained (the trainer's forward) "
          f"{res['bare_masked_tokens_per_s']:.0f} tok/s ({masked_s:.2f}s)")
    print(f"  overhead: update / bare time = {res['overhead_ratio']:.2f}x; update / bare-lm time = "
          f"{res['overhead_vs_masked']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
