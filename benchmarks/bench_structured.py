"""Structured vs free decoding of the experience model on real steps of every shipped family: malformed answers,
median generated tokens per prediction and predictions per second.

    python benchmarks/bench_structured.py [--families dial,webshop,...] [--steps 8] [--temperature 1.5] [--http]

The model is the untrained tiny preset sampled at `--temperature` (the hard case: it writes arbitrary tokens), with
the experience model's default budgets (`max_new_tokens` 512, `max_think_tokens` 160) and no retry, so every figure
is one generate call per batch of `--steps` real steps (played by the family's noisy and random scripted policies,
`tests/em_helpers.family_steps`). `--http` adds the same predictions through `dreamgym serve-model` (the constraint
sent as `structured_outputs`, its per-field token budgets as character bounds in the regex: see docs/concepts.md).
Tokens are the generated ids each backend returns.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

FAMILIES = ("dial", "webshop", "alfworld", "textworld", "miniwob")


class CountingLLM:
    """The LLM seam around a backend, keeping the number of generated tokens of every completion."""

    def __init__(self, llm: Any):
        self.llm, self.tokens = llm, []  # type: ignore[var-annotated]

    def prompt_ids(self, request: Any) -> list[int]:
        return list(self.llm.prompt_ids(request))

    def generate(self, requests: list[Any], params: Any, *, seeds: Sequence[int] | None = None) -> list[Any]:
        comps = self.llm.generate(requests, params) if seeds is None else self.llm.generate(requests, params,
                                                                                            seeds=seeds)
        self.tokens += [len(c.token_ids) for c in comps]
        return comps


def measure(llm: Any, steps: list[Any], env_name: str, structured: bool, temperature: float) -> dict[str, Any]:
    from dreamgym.experience import ExperienceModel, ExperienceModelConfig

    cfg = dataclasses.replace(ExperienceModelConfig(embedder="hashing", retries=0, temperature=temperature),
                              structured_output=structured)
    counting = CountingLLM(llm)
    m = ExperienceModel(counting, config=cfg, env=env_name)
    t0 = time.perf_counter()
    m.predict(steps, seed=3)
    dt = time.perf_counter() - t0
    return {"malformed": m.stats["malformed"], "n": len(steps), "median_tokens": statistics.median(counting.tokens),
            "pred_per_s": len(steps) / dt}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--http", action="store_true", help="also through `dreamgym serve-model` (one local process)")
    a = p.parse_args()
    import torch

    from dreamgym.llm.hf import HFBackend
    from em_helpers import family_steps

    torch.set_num_threads(a.threads)
    local = HFBackend.from_preset("tiny", device="cpu")
    backends: list[tuple[str, Any]] = [("in-process", local)]
    server = None
    if a.http:
        from dreamgym.llm.http import HTTPTokenBackend
        from servers import cli_server

        server = cli_server(["serve-model", "--preset", "tiny", "--port", "0", "--device", "cpu", "--threads",
                             str(a.threads)])
        _, url = server.__enter__()
        backends.append(("serve-model", HTTPTokenBackend([url + "/v1"], local.tokenizer, served_model="tiny")))
    print(f"{'family':<10} {'backend':<12} {'decoding':<10} {'malformed':>10} {'median tok':>10} {'pred/s':>8}")
    try:
        for env_name in a.families.split(","):
            steps = family_steps(env_name, a.steps)
            for where, llm in backends:
                for structured in (False, True):
                    r = measure(llm, steps, env_name, structured, a.temperature)
                    print(f"{env_name:<10} {where:<12} {'structured' if structured else 'free':<10} "
                          f"{r['malformed']:>4} of {r['n']:<3} {r['median_tokens']:>10.0f} {r['pred_per_s']:>8.2f}",
                          flush=True)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
