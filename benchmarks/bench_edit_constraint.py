"""The edit format's per-request constraint on real MiniWoB++ states: how long its regex is, and what compiling it
costs per request (the in-process backend compiles each distinct state's regex once; `dreamgym serve-model` does the
same, behind its length cap).

Usage: python benchmarks/bench_edit_constraint.py [--data FILE.jsonl] [--preset tiny] [--limit 200]

`--data`: recorded MiniWoB++ trajectories (`dreamgym collect --env miniwob ...`; default the tests' fixture,
tests/fixtures/web/miniwob_episodes.jsonl). For every distinct query state (reset pseudo-steps left out) it builds
`output_constraint(cfg, edit_named_lines(...))` under `state_format: edit` and prints: the state's lines, the
regex's and the server regex's length, whether the state fell back to the generic body (`edits.MAX_NAMED_CHARS`),
then the compile time of the in-process regex on a fresh compiler (xgrammar, one thread, as `Grammars` compiles it;
the first compile, which builds the vocabulary's tables, is left out), its compiled size, the same for the server
regex, and a cached compile (the same state again). Percentiles over the states.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "tests" / "fixtures" / "web" / "miniwob_episodes.jsonl"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(FIXTURE))
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--limit", type=int, default=200, help="most distinct states compiled")
    args = ap.parse_args()

    import xgrammar as xgr
    from transformers import AutoTokenizer

    from dreamgym.data import load_trajectories
    from dreamgym.experience.config import ExperienceModelConfig
    from dreamgym.experience.data import em_transitions
    from dreamgym.experience.edits import MAX_NAMED_CHARS
    from dreamgym.experience.format import RESET_ACTION, edit_named_lines, output_constraint
    from dreamgym.llm.presets import resolve

    cfg = ExperienceModelConfig(state_format="edit", embedder="hashing")
    steps = [t for t in em_transitions(load_trajectories(args.data), history=0) if t.action != RESET_ACTION]
    states = list(dict.fromkeys(t.state for t in steps))
    by_state = {t.state: t for t in steps}
    tok = AutoTokenizer.from_pretrained(str(resolve(args.preset)))
    info = xgr.TokenizerInfo.from_huggingface(tok)
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    compiler.compile_regex("x")  # the vocabulary's tables: once per compiler, whatever the regex
    print(f"{len(steps)} steps, {len(states)} distinct states from {args.data}; vocabulary {info.vocab_size} tokens; "
          f"cap {MAX_NAMED_CHARS} characters of alternation")
    lines, sizes, server_sizes, fallbacks = [], [], [], 0
    compile_ms, server_ms, cached_ms, kib = [], [], [], []
    for state in states[: args.limit]:
        named = edit_named_lines(by_state[state], cfg, "miniwob")
        lines.append(len(state.strip().split("\n")))
        if named is None:
            fallbacks += 1
            continue
        c = output_constraint(cfg, named)
        sizes.append(len(c.regex))
        server_sizes.append(len(c.server_regex or ""))
        t0 = time.perf_counter()
        g = compiler.compile_regex(c.regex)
        compile_ms.append(1000 * (time.perf_counter() - t0))
        kib.append(g.memory_size_bytes / 1024)
        t0 = time.perf_counter()
        compiler.compile_regex(c.regex)
        cached_ms.append(1000 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        compiler.compile_regex(c.server_regex or c.regex)
        server_ms.append(1000 * (time.perf_counter() - t0))
    t0 = time.perf_counter()
    generic = output_constraint(cfg)
    xgr.GrammarCompiler(info, max_threads=1).compile_regex(generic.regex)
    print(f"generic body: regex {len(generic.regex)} characters")

    def row(name: str, xs: list[float], unit: str) -> None:
        print(f"  {name:<26} median {statistics.median(xs):8.1f}  p90 {_pct(xs, 0.9):8.1f}  max {max(xs):8.1f} {unit}")

    print(f"{len(lines)} states compiled, {fallbacks} over the cap (generic body)")
    row("state lines", [float(x) for x in lines], "")
    row("regex length", [float(x) for x in sizes], "characters")
    row("server regex length", [float(x) for x in server_sizes], "characters")
    row("compile (in process)", compile_ms, "ms")
    row("compiled size", kib, "KiB")
    row("compile (server regex)", server_ms, "ms")
    row("compile, cached", cached_ms, "ms")


if __name__ == "__main__":
    main()
