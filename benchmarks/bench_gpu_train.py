"""Training throughput and MFU of DreamGym's own training step, and the experience model's step latency.

    python benchmarks/bench_gpu_train.py [--device cuda] [--models tiny 0.5b] [--modes full lora]
        [--grad-ckpt off on] [--skip-em] [--skip-train] [--em RUN/em] [--json out.json]
    python benchmarks/bench_gpu_train.py --device cpu --small     (a dry run of every path in well under a minute)

Training: for each model (the tiny preset; `0.5b`, a random-init Qwen2 decoder shaped like Qwen2.5-0.5B: hidden
896, 24 layers, 14 query / 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings, nothing downloaded), each
mode (full fine-tuning, LoRA r=16 on every projection) and gradient checkpointing off/on, the model is built in the
device's dtype as `presets.load_preset` would (bf16 on CUDA), made trainable by `trainers.common.prepare_policy`
(full fine-tuning upcasts it to fp32 master weights; LoRA keeps the base in bf16 and the adapters in fp32), and
stepped by `supervised_step` under its bf16 autocast with AdamW from `make_optimizer` and the rate from `set_lr`.
A step is `--step-tokens` tokens of random-id rows shaped like the experience model's SFT data (`--seq-len` tokens,
of which the last `--completion-len` are trained), cut into micro-batches of `--micro-batch-tokens` by the package.

MFU = model FLOPs per second / peak. Model FLOPs count every matmul weight once per token: k * N_body * tokens
+ k * V * H * trained tokens (the package projects onto the vocabulary only at the trained positions), with k = 6
for full fine-tuning (forward, input gradients, weight gradients) and k = 4 for LoRA (no weight gradients of the
frozen base); recomputation under gradient checkpointing is not counted (that would be hardware FLOPs). The
`+attn` column adds causal attention's 6 * L * d * s^2 per row (s^2 / 2 score entries, forward + 2x backward).
The peak is a bf16 8192^3 matmul measured here (on CPU a float32 1024^3 one, the dtype CPU training runs in); the
nominal H200 dense bf16 peak (989 TFLOP/s) is printed beside it.

Experience model: `ExperienceModel.predict` of a batch of dial queries (prompt building, batched generation,
parsing) at each `--em-batches` size: seconds per batch and per query, and generated tokens per query. With `--em`
it loads a trained checkpoint (the quickstart's `RUN/em`) with its retrieval buffer; without, the untrained tiny
preset with greedy decoding, no retries and no retrieval, which writes `--em-new-tokens` tokens per query
(an upper bound on a trained model's cost at that budget).

Lines starting with `SUMMARY` are what `benchmarks/gpu_check.sh` puts in its final table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

H200_BF16_DENSE_TFLOPS = 989.0

# Qwen2.5-0.5B's shape; `--small` swaps in a few-layer model of the same architecture for the CPU dry run.
QWEN_05B: dict[str, Any] = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
QWEN_SMALL: dict[str, Any] = dict(QWEN_05B, vocab_size=8192, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_tflops(device: torch.device) -> tuple[float, str]:
    """The dense matmul rate this device reaches in the dtype its training runs in (the MFU denominator)."""
    n, dtype, reps = (8192, torch.bfloat16, 10) if device.type == "cuda" else (1024, torch.float32, 3)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    dt = (time.perf_counter() - t) / reps
    return 2 * n**3 / dt / 1e12, f"{str(dtype).removeprefix('torch.')} {n}^3"


def build_model(name: str, device: torch.device, small: bool) -> tuple[Any, int]:
    """(model in the device's default dtype, in eval mode as `load_preset` returns it; pad id)."""
    from dreamgym.llm.presets import default_dtype, load_preset

    if name == "tiny":
        model, tok = load_preset("tiny", device=str(device))
        return model, tok.pad_token_id
    from transformers import AutoModelForCausalLM, Qwen2Config

    if device.type == "cuda":  # as load_preset does: fp32 matmuls (outside autocast) on TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = Qwen2Config(**(QWEN_SMALL if small else QWEN_05B))
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: 0.5B parameters drawn on the CPU take seconds
        model = AutoModelForCausalLM.from_config(cfg, dtype=default_dtype(str(device)))
    model.eval()
    return model, int(cfg.pad_token_id or 0)


def param_counts(model: Any) -> dict[str, int]:
    """Unique parameters, split into the embedding, the output head (when untied) and the rest."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb = base.get_input_embeddings().weight
    head = base.get_output_embeddings().weight
    seen: set[int] = set()
    total = 0
    for p in base.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    tied = head is emb
    body = total - emb.numel() - (0 if tied else head.numel())
    return {"total": total, "body": body, "vocab": head.shape[0], "hidden": head.shape[1]}


def train_case(model_name: str, mode: str, grad_ckpt: bool, args: argparse.Namespace, device: torch.device,
               peak: float) -> dict[str, Any]:
    from dreamgym.trainers.common import (ModelConfig, OptimConfig, make_optimizer, prepare_policy, set_lr,
                                          supervised_step, trainable_parameters)

    model, pad = build_model(model_name, device, args.small)
    counts = param_counts(model)
    model = prepare_policy(model, ModelConfig(preset=model_name, lora=(mode == "lora"), lora_r=16, lora_alpha=32,
                                              gradient_checkpointing=grad_ckpt))
    params = trainable_parameters(model)
    optim = OptimConfig(lr=1e-5, micro_batch_tokens=args.micro_batch_tokens)
    opt = make_optimizer(params, optim)
    seq, comp = args.seq_len, args.completion_len
    n_rows = max(1, args.step_tokens // seq)
    gen = torch.Generator().manual_seed(0)
    vocab = counts["vocab"]
    ids = torch.randint(4, vocab, (n_rows, seq), generator=gen).tolist()  # ids 0..3 are special in the tiny preset
    rows = [(r[: seq - comp], r[seq - comp:]) for r in ids]
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses = []
    t0 = time.perf_counter()
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            sync(device)
            t0 = time.perf_counter()
        set_lr(opt, optim, i)
        losses.append(supervised_step(model, opt, params, optim, rows, pad, device)["loss"])
    sync(device)
    dt = (time.perf_counter() - t0) / args.steps
    tokens = n_rows * seq
    k = 4 if mode == "lora" else 6
    cfg: Any = getattr(model, "get_base_model", lambda: model)().config  # PEFT wraps the transformers model
    flops = k * counts["body"] * tokens + k * counts["vocab"] * counts["hidden"] * n_rows * comp
    attn = 6 * cfg.num_hidden_layers * cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads) \
        * seq * seq * n_rows
    label = "small" if args.small and model_name == "0.5b" else model_name  # --small does not build the 0.5B
    out = {"model": label, "mode": mode, "grad_ckpt": grad_ckpt, "params_m": counts["total"] / 1e6,
           "trainable_m": sum(p.numel() for p in params) / 1e6,
           "master": "/".join(sorted({str(p.dtype).removeprefix("torch.") for p in params})),
           "tokens_per_step": tokens, "micro_batches": -(-n_rows // max(1, args.micro_batch_tokens // seq)),
           "step_s": dt, "tokens_per_s": tokens / dt, "tflops": flops / dt / 1e12,
           "mfu": flops / dt / 1e12 / peak, "mfu_attn": (flops + attn) / dt / 1e12 / peak,
           "loss_first": losses[0], "loss_last": losses[-1],
           "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}
    del model, opt, params
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def em_queries(n: int) -> list[Any]:
    """`n` dial queries from the held-out tasks: varied dial values and actions, distinct trajectories."""
    from dreamgym.envs import dial
    from dreamgym.experience import query_for

    tasks = dial.make_tasks("test")
    actions = ["turn up", "turn down", "submit"]
    return [query_for(tasks[i % len(tasks)], dial.abstract_state(i % (dial.DIAL_MAX + 1)), actions[i % 3],
                      trajectory_id=f"bench-{i}") for i in range(n)]


def em_latency(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    from dreamgym.experience import ExperienceModel, ExperienceModelConfig

    batch = max(args.em_batches)
    source = "untrained tiny preset"
    if args.em:
        from dreamgym.experience import checkpoint_buffer

        buf = None
        try:
            buf = checkpoint_buffer(args.em)
            source = f"{args.em} with its retrieval buffer"
        except Exception as e:  # noqa: BLE001 - the latency without examples is still a figure
            source = f"{args.em} without retrieval ({type(e).__name__}: {e})"
        em = ExperienceModel.load(args.em, buf, device=str(device), batch_size=batch)
    else:
        from dreamgym.llm.hf import HFBackend
        from dreamgym.llm.presets import load_preset

        model, tok = load_preset("tiny", device=str(device))
        em = ExperienceModel(HFBackend(model, tok, batch_size=batch), env="dial",
                             config=ExperienceModelConfig(use_retrieval=False, embedder="hashing", retries=0,
                                                          max_new_tokens=args.em_new_tokens))
    tok = em.llm.tokenizer  # type: ignore[attr-defined]  # an HFBackend in both branches
    print(f"\nexperience model: {source}; max_new_tokens {em.config.max_new_tokens}, retries {em.config.retries}, "
          f"best of {args.em_repeats}")
    em.predict(em_queries(1))  # warm-up: kernels, allocator, retrieval index
    out = []
    for bs in args.em_batches:
        queries = em_queries(bs)
        times = []
        for _ in range(args.em_repeats):
            em.stats.clear()
            sync(device)
            t = time.perf_counter()
            preds = em.predict(queries, seed=0)
            sync(device)
            times.append(time.perf_counter() - t)
        best = min(times)
        new = sum(len(tok(p.text, add_special_tokens=False)["input_ids"]) for p in preds) / bs
        row = {"batch": bs, "s_per_batch": best, "s_per_query": best / bs, "new_tokens_per_query": new,
               "failures": int(em.stats["failures"]), "generate_calls": int(em.stats["generate_calls"])}
        print(f"  batch {bs:>3}: {best:7.3f} s/batch  {best / bs * 1000:8.1f} ms/query  "
              f"{new:6.1f} new tokens/query  {row['failures']} failed  {row['generate_calls']} generate calls")
        out.append(row)
    print("SUMMARY em-latency " + "; ".join(f"batch {r['batch']}: {r['s_per_batch']:.2f} s "
                                            f"({r['s_per_query'] * 1000:.0f} ms/query)" for r in out))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--small", action="store_true",
                   help="a dry run: a few-layer model in place of 0.5B, short rows, few steps")
    p.add_argument("--models", nargs="+", default=["tiny", "0.5b"], choices=["tiny", "0.5b"])
    p.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    p.add_argument("--grad-ckpt", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--step-tokens", type=int, default=32768, help="tokens per optimiser step")
    p.add_argument("--micro-batch-tokens", type=int, default=16384)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed optimiser steps per case")
    p.add_argument("--em", default=None, help="a trained experience-model checkpoint (default: untrained tiny)")
    p.add_argument("--em-batches", nargs="+", type=int, default=[1, 64])
    p.add_argument("--em-new-tokens", type=int, default=128, help="generation budget of the untrained model")
    p.add_argument("--em-repeats", type=int, default=2)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-em", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (for the CPU dry run)")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args()
    if args.small:
        args.seq_len, args.completion_len, args.step_tokens, args.micro_batch_tokens = 128, 32, 1024, 512
        args.warmup, args.steps = 1, 2
        args.em_new_tokens, args.em_batches, args.em_repeats = 16, [1, 4], 1
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Loading weights" bar per case would bury the table in the log
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}")
    report: dict[str, Any] = {"device": name, "torch": torch.__version__, "args": vars(args)}
    if not args.skip_train:
        peak, how = peak_tflops(device)
        report.update(peak_tflops=peak, peak_how=how)
        print(f"peak: {peak:.1f} TFLOP/s measured ({how} matmul); nominal H200 dense bf16 "
              f"{H200_BF16_DENSE_TFLOPS:.0f} TFLOP/s ({peak / H200_BF16_DENSE_TFLOPS:.0%} of it)")
        print(f"rows of {args.seq_len} tokens ({args.completion_len} trained), {args.step_tokens} tokens per step, "
              f"micro-batches of {args.micro_batch_tokens}, {args.warmup} warm-up + {args.steps} timed steps; "
              f"MFU = (6|4)·N·tokens/s (+attn: causal attention too) / measured peak")
        print(f"{'model':<6} {'mode':<5} {'ckpt':<4} {'params':>8} {'trained':>8} {'master':>8} {'tok/s':>10} "
              f"{'TFLOP/s':>8} {'MFU':>6} {'+attn':>6} {'GiB':>6} {'loss':>13}")
        cases = []
        for model_name in args.models:
            for mode in args.modes:
                for ck in args.grad_ckpt:
                    try:
                        r = train_case(model_name, mode, ck == "on", args, device, peak)
                    except torch.cuda.OutOfMemoryError as e:
                        r = {"model": model_name, "mode": mode, "grad_ckpt": ck == "on", "error": f"OOM: {e}"}
                        gc.collect()
                        torch.cuda.empty_cache()
                    cases.append(r)
                    if "error" in r:
                        print(f"{model_name:<6} {mode:<5} {ck:<4} {r['error'][:100]}")
                        continue
                    mem = f"{r['peak_mem_gib']:6.1f}" if r["peak_mem_gib"] is not None else "     -"
                    print(f"{r['model']:<6} {mode:<5} {ck:<4} {r['params_m']:7.1f}M {r['trainable_m']:7.2f}M "
                          f"{r['master']:>8} {r['tokens_per_s']:10.0f} {r['tflops']:8.3g} {r['mfu']:6.1%} "
                          f"{r['mfu_attn']:6.1%} {mem} {r['loss_first']:6.3f}>{r['loss_last']:6.3f}", flush=True)
        report["train"] = cases
        ok = [c for c in cases if "error" not in c]
        print("SUMMARY train " + "; ".join(
            f"{c['model']} {c['mode']}{'+ckpt' if c['grad_ckpt'] else ''} {c['tokens_per_s'] / 1000:.0f}k tok/s "
            f"MFU {c['mfu']:.0%}" for c in ok) + f" (peak {peak:.3g} TFLOP/s measured)")
    if not args.skip_em:
        report["em"] = em_latency(args, device)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
