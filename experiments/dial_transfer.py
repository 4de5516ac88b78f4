"""Does the dream transfer? GRPO inside the experience model vs GRPO in the real dial, from the same start.

Reads a quickstart run directory (its offline data, SFT demonstrations and experience model), then:
  1. SFT of the tiny policy on the demonstrations (batches of 16 drawn with a seeded RNG, lr 1e-3) until its
     sampled success on the 72 train tasks first reaches `--start-success` (checked every 50 steps on real
     episodes, which are counted and printed). The dial policy learns *when to submit* only in a sharp
     transition (measured: 0.52 test success after 600 steps of 16, 0.98 after 1,000), so a fixed step count
     lands anywhere from "never submits at the target" (no RL signal) to "already solved"; stopping on measured
     success puts the start inside the transition, where RL has something to do.
  2. From that start, `--iterations` GRPO iterations inside the experience model (zero real steps), and
     separately the same number of GRPO iterations in the real dial (every real step counted).
  3. All three policies on the 18 held-out test tasks x 10 seeds, sampled (temperature 1), with Wilson 95%
     intervals and one-sided two-proportion z-tests against the start.

    python experiments/dial_transfer.py --run runs/quickstart

Takes ~10-15 minutes on 2 CPU cores. Results depend on the thread count (float sums differ, and the SFT
transition amplifies that); the figures below are from `--threads 1`.
Measured 2026-11-30 (10 iterations, test seeds 10-19, n = 180 each), seed 0
with this session's quickstart: start 0.644 [0.572, 0.711] (550 SFT steps) -> dream 0.617 [0.544, 0.685]
(0 real steps) vs real 0.706 [0.635, 0.767] (2,931 real steps): no transfer. An earlier hand-run of the same
steps (SFT fixed at 600 steps as with `--sft-steps 600`, the previous quickstart's experience model) gave start 0.528 [0.455, 0.599] ->
dream 0.789 [0.724, 0.842] vs real 0.739 [0.670, 0.798] (3,091 real steps). See docs/log/02-dial-transfer.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from pathlib import Path

import torch

from dreamgym.rl.budget import RealStepBudget
from dreamgym.config import apply_overrides, load_config, validate_config
from dreamgym.data import load_trajectories
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.envs import dial
from dreamgym.rl.evaluate import EvalConfig, evaluate_policy, two_proportion_z_test
from dreamgym.rl.builders import build_backend, build_offline_trainer, build_online_trainer
from dreamgym.commands.recipe import env_train_config
from dreamgym.rl.loop import LoopSettings, Phase, RealWorld, RunState, run_phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="runs/quickstart", help="quickstart run directory (offline data, demos, em)")
    ap.add_argument("--out", default="runs/dial-transfer", help="where the policies and results.json go")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--start-success", type=float, default=0.5)
    ap.add_argument("--max-sft-steps", type=int, default=1500)
    ap.add_argument("--sft-steps", type=int, default=0,
                    help="stop SFT after exactly this many steps instead of on measured success (0: measured)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    run, out = Path(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = env_train_config("dial", seed=args.seed, tensorboard=False)
    cfg = apply_overrides(base, ["algo=sft", "sft.batch_size=16", "optim.lr=1e-3"])
    test_cfg = EvalConfig(temperature=1.0, sample_seed=args.seed, agent=cfg.agent, rollout=cfg.rollout)

    def test(backend):
        return evaluate_policy(backend, dial.DialEnv, dial.make_tasks("test"), list(range(10, 20)), test_cfg)

    # 1. SFT until the measured start success (real check episodes are counted).
    t0 = time.time()
    backend = build_backend(cfg)
    sft = build_offline_trainer(backend, cfg, cfg.sft, admissible_fn=dial.admissible_from_state)
    examples, _ = sft.examples(load_trajectories(run / "demos.jsonl"))
    rng = random.Random(args.seed)
    check_budget = RealStepBudget(None)  # counts the real steps the success checks take
    step, train_success = 0, 0.0
    while step < (args.sft_steps or args.max_sft_steps):
        sft.train_step(rng.sample(examples, 16))
        step += 1
        if step % 50 == 0 and not args.sft_steps:
            ec = EvalConfig(temperature=1.0, sample_seed=step, agent=cfg.agent, rollout=cfg.rollout)
            r = evaluate_policy(backend, dial.DialEnv, dial.make_tasks("train"), [0], ec, budget=check_budget)
            train_success = r.success_rate
            print(f"sft step {step}: sampled train success {train_success:.3f}", flush=True)
            if train_success >= args.start_success:
                break
    sft.save(out / "start")
    results = {"start": {"sft_steps": step, "train_success": train_success, "real_check_steps": check_budget.used,
                         "wall_s": time.time() - t0, **test(backend).to_dict()}}
    print("start:", json.dumps(results["start"]), flush=True)

    rl = dataclasses.replace(base, algo="grpo", grpo=dataclasses.replace(base.grpo, epochs=2, minibatches=2),
                             group_size=8, tasks_per_iteration=8, optim=dataclasses.replace(base.optim, lr=2e-4))

    # 2a. GRPO inside the experience model: zero real steps.
    t0 = time.time()
    gcfg = dataclasses.replace(rl, mode="dream", dream=dataclasses.replace(rl.dream, em=str(run / "em")))
    validate_config(gcfg)
    be = build_backend(gcfg, str(out / "start"))
    trainer = build_online_trainer(be, gcfg, gcfg.grpo)
    world = DreamWorld("dial", load_config(DreamConfig, None, [f"em={run / 'em'}"]), out / "dream", args.seed)
    state = RunState(RealStepBudget(0))
    run_phases(trainer, [Phase(world, args.iterations, "dream-it")], state, LoopSettings(gcfg, progress=False))
    trainer.save(out / "dream" / "final", state.state_dict())
    results["dream"] = {"real_steps": state.budget.used, "wall_s": time.time() - t0, **test(be).to_dict()}
    print("dream:", json.dumps(results["dream"]), flush=True)

    # 2b. GRPO in the real dial, same iterations, every step counted.
    t0 = time.time()
    rcfg = dataclasses.replace(rl, iterations=args.iterations, save_every=0)
    validate_config(rcfg)
    be = build_backend(rcfg, str(out / "start"))
    trainer = build_online_trainer(be, rcfg, rcfg.grpo)
    state = RunState(RealStepBudget(None))
    run_phases(trainer, [Phase(RealWorld(dial, rcfg.seed), rcfg.iterations)], state,
          LoopSettings(rcfg, progress=False))
    trainer.save(out / "real" / "final", state.state_dict())
    results["real"] = {"real_steps": state.budget.used, "wall_s": time.time() - t0, **test(be).to_dict()}
    print("real:", json.dumps(results["real"]), flush=True)

    s = results["start"]
    print("\n| policy | real steps in RL | test success [95% CI] | z vs start (p) |\n|---|---:|---|---|")
    for name in ("start", "dream", "real"):
        r = results[name]
        z, p = two_proportion_z_test(s["n_success"], s["n"], r["n_success"], r["n"])
        print(f"| {name} | {r.get('real_steps', 0)} | {r['success_rate']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
              f"| {'-' if name == 'start' else f'{z:.2f} ({p:.2g})'} |")
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
