"""How much of a shared prompt prefix vLLM's CPU build serves from its prefix cache, per KV block size.

Starts vLLM's OpenAI server (the virtualenv `bash run.sh vllm` builds, float32, prefix caching on) over a preset's
folder once per `--block-sizes` value ("default": no `--block-size`, which on the CPU build means 128), sends
`--requests` greedy token-id completions that share a `--prefix-tokens` prefix and differ after it, one at a time,
and prints the server's own counters `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`. Only whole
blocks are reused, so a prefix shorter than one block is never a hit.

    DREAMGYM_VLLM_PYTHON=.venv-vllm/bin/python python benchmarks/bench_prefix_cache.py [--block-sizes default 32]
        [--prefix-tokens 240] [--requests 6] [--preset tiny]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def counters(base_url: str) -> dict[str, float]:
    """The server's prefix-cache counters from its Prometheus `/metrics` page."""
    import httpx

    out = {}
    for line in httpx.get(base_url + "/metrics", timeout=60).text.splitlines():
        for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
            if line.startswith(name):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def measure(preset: str, block_size: str, prefix_tokens: int, requests: int) -> tuple[float, float, float]:
    """(hits, queries, server start seconds) for one server with `block_size` ("default": the build's own)."""
    import httpx

    from dreamgym.llm.presets import build_preset, load_preset

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from servers import vllm_server

    _, tok = load_preset(preset, device="cpu")
    filler = tok.encode("The experience model reads the state and writes the next one. ", add_special_tokens=False)
    prefix = (filler * (prefix_tokens // len(filler) + 1))[:prefix_tokens]
    extra = () if block_size == "default" else ("--block-size", block_size)
    t0 = time.perf_counter()
    with vllm_server(build_preset(preset), preset, lora=False, extra=extra) as (_, url):
        ready = time.perf_counter() - t0
        for i in range(requests):
            ids = prefix + tok.encode(f" request {i}: state {7 * i}", add_special_tokens=False)
            r = httpx.post(url + "/completions", json={"model": preset, "prompt": ids, "max_tokens": 4,
                                                       "temperature": 0.0}, timeout=900)
            r.raise_for_status()
        c = counters(url.removesuffix("/v1"))
    return c["vllm:prefix_cache_hits_total"], c["vllm:prefix_cache_queries_total"], ready


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-sizes", nargs="+", default=["default", "32"])
    ap.add_argument("--prefix-tokens", type=int, default=240)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--preset", default="tiny")
    a = ap.parse_args()
    rows = []
    for bs in a.block_sizes:
        try:
            hits, queries, ready = measure(a.preset, bs, a.prefix_tokens, a.requests)
            rows.append((bs, f"{hits:.0f} / {queries:.0f} ({hits / queries:.0%})", f"{ready:.0f}"))
        except AssertionError as e:  # the server did not start: say so and go on with the next size
            rows.append((bs, f"server did not start ({str(e).splitlines()[0][:80]})", "-"))
    print(f"\n{a.preset}, {a.requests} requests sharing {a.prefix_tokens} prompt tokens:")
    print("| --block-size | prefix-cache hits / queried prompt tokens | server ready (s) |\n|---|---|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
