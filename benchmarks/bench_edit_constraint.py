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

`--decode N`: the untrained preset (`--preset`) answers the first N steps in the edit format at `--temperature`
(no retrieval, no retry), once under each state's own grammar and once under the generic body (as before it), and
prints per grammar: edit answers, the `-`/`=` lines they name, how many of those the state lacks, and the edits that
cannot apply (under the state's grammar: only lines named out of the cursor's order, or removed twice). An untrained
model opens few edits; the figures say what the grammar leaves to `apply_edit`, not how a trained model fares.
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
    ap.add_argument("--decode", type=int, default=0, help="steps the preset answers under each grammar (0: none)")
    ap.add_argument("--temperature", type=float, default=1.0)
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
    if args.decode:
        decode(steps[: args.decode], cfg, args.preset, args.temperature)


def decode(steps: list, cfg: object, preset: str, temperature: float) -> None:
    """Answer `steps` with the preset under each grammar and count what the edits name (see the module doc)."""
    import dataclasses

    from dreamgym.experience.edits import EditError, state_lines
    from dreamgym.experience.format import answer_state, parse_completion
    from dreamgym.experience.model import ExperienceModel
    from dreamgym.llm.hf import HFBackend

    llm = HFBackend.from_preset(preset, device="cpu")
    m = ExperienceModel(llm, config=dataclasses.replace(cfg, k=0, temperature=temperature, retries=0),
                        env="miniwob")
    reqs = m.requests(steps)
    for name, params in (("state's own", m._request_params(steps, temperature, 0)),
                         ("generic", m._params(temperature, 0))):
        t0 = time.perf_counter()
        comps = llm.generate(reqs, params)
        took = time.perf_counter() - t0
        edits = named = outside = inapplicable = 0
        for q, c in zip(steps, comps):
            parsed, _ = parse_completion(c.text)
            if parsed is None or parsed.edit is None:
                continue
            edits += 1
            lines = set(state_lines(q.state))
            refs = [line for op, line in parsed.edit if op != "+"]
            named += len(refs)
            outside += sum(line not in lines for line in refs)
            try:
                answer_state(parsed, q, m.config, "miniwob")
            except EditError:
                inapplicable += 1
        print(f"{name:>12} grammar: {len(steps)} answers in {took:.1f} s, {edits} edits naming {named} lines, "
              f"{outside} of them not in the state; {inapplicable} edits cannot apply")


if __name__ == "__main__":
    main()
