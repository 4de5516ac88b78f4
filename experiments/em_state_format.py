"""Prompt and target tokens per step of the experience model's two answer formats: the whole next state
(`em.state_format=whole`) against the line edit of the current state (`em.state_format=edit`).

For each real transition of the query file, the k examples are retrieved from a buffer of the offline real
transitions exactly as the experience model retrieves them (real only, other trajectories, the config's embedder),
with the reasoning traces train-em's env teacher gives them; then the prompt is built and fitted to
`max_prompt_tokens` for each format, and the training target written, and both are counted with the preset's
tokenizer as training counts them (`HFBackend.prompt_ids`, the target plus its end-of-turn token). Nothing is
generated: this measures what each format costs, not what a model learns from it.

    python experiments/em_state_format.py --env miniwob --data runs/mw/offline.jsonl --heldout runs/mw/heldout.jsonl

Prints, per format: prompt tokens before and after fitting (mean, median, 90th percentile), target tokens (with and
without the `<think>` trace, which is the same in both formats), the share
of targets and of shown examples written as edits, the share of shown examples whose outcome the prompt clips (at
`example_next_state_chars`), and the prompt-fitting events; `--json` writes the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections import Counter
from typing import Any

from dreamgym.data import load_trajectories
from dreamgym.experience import RESET_ACTION, ExperienceModel, ExperienceModelConfig, buffer_for, em_transitions
from dreamgym.experience.format import build_request, target_completion, written_edit, written_state
from dreamgym.types import Transition


def _summary(xs: list[int]) -> dict[str, float]:
    xs = sorted(xs)
    return {"mean": round(statistics.fmean(xs), 1), "median": float(statistics.median(xs)),
            "p90": float(xs[min(len(xs) - 1, int(0.9 * len(xs)))]), "max": float(xs[-1])}


def measure(queries: list[Transition], examples: list[list[Transition]], cfg: ExperienceModelConfig,
            backend: Any) -> dict[str, Any]:
    """Token counts of `queries`' prompts (with `examples`) and targets under `cfg`."""
    count = lambda req: len(backend.prompt_ids(req))  # noqa: E731
    tok = backend.tokenizer
    stats: Counter[str] = Counter()
    raw, fitted, target, answer = [], [], [], []
    bare = dataclasses.replace(cfg, use_reasoning=False)
    shown = shown_edits = shown_clipped = 0
    for q, ex in zip(queries, examples):
        raw.append(count(build_request(q, ex, cfg)))
        fitted.append(count(build_request(q, ex, cfg, count, stats)))
        target.append(len(tok(target_completion(q, cfg), add_special_tokens=False)["input_ids"]) + 1)
        answer.append(len(tok(target_completion(q, bare), add_special_tokens=False)["input_ids"]) + 1)
        shown += len(ex[: cfg.k])
        for e in ex[: cfg.k]:
            edit = written_edit(e, cfg)
            shown_edits += edit is not None
            # What the prompt cuts at `example_next_state_chars`: the example's outcome is then incomplete.
            shown_clipped += len(written_state(e, cfg) if edit is None else edit) > cfg.example_next_state_chars
    edits = sum(written_edit(q, cfg) is not None for q in queries)
    return {"n": len(queries), "prompt_tokens": _summary(raw), "fitted_prompt_tokens": _summary(fitted),
            "target_tokens": _summary(target), "target_tokens_without_trace": _summary(answer), "targets_as_edits": round(edits / max(1, len(queries)), 3),
            "examples_as_edits": round(shown_edits / max(1, shown), 3),
            "examples_clipped": round(shown_clipped / max(1, shown), 3), "fitting": dict(stats)}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--data", required=True, help="offline real trajectories (the buffer)")
    p.add_argument("--heldout", default="", help="real trajectories whose steps are the queries (default: --data's)")
    p.add_argument("--embedder", default="hashing+action", help="retrieval embedder (configs/miniwob/em.yaml's)")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--preset", default="tiny", help="the model preset whose tokenizer counts")
    p.add_argument("--no-teacher", action="store_true", help="examples without the env teacher's reasoning traces")
    p.add_argument("--json", default="", help="write the figures here")
    a = p.parse_args()

    from dreamgym.llm.hf import HFBackend

    base = ExperienceModelConfig(k=a.k, embedder=a.embedder)
    seed = em_transitions(load_trajectories(a.data), history=base.history)
    queries = em_transitions(load_trajectories(a.heldout), history=base.history) if a.heldout else seed
    if not a.no_teacher:
        from dreamgym.experience.reasoning import EnvTeacher, annotate

        seed = annotate(seed, EnvTeacher(a.env))
        queries = seed if not a.heldout else annotate(queries, EnvTeacher(a.env))
    backend = HFBackend.from_preset(a.preset, device="cpu")
    model = ExperienceModel(backend, buffer_for(seed, a.embedder), base, env=a.env)
    examples = model.retrieve(queries)
    out: dict[str, Any] = {"env": a.env, "data": a.data, "heldout": a.heldout, "k": a.k, "embedder": a.embedder,
                           "preset": a.preset, "max_prompt_tokens": base.max_prompt_tokens}
    for fmt in ("whole", "edit"):
        cfg = ExperienceModelConfig(k=a.k, embedder=a.embedder, state_format=fmt)  # type: ignore[arg-type]
        steps = [(q, ex) for q, ex in zip(queries, examples) if q.action != RESET_ACTION]
        out[fmt] = measure([q for q, _ in steps], [ex for _, ex in steps], cfg, backend)
    print(f"{a.env}: {out['whole']['n']} steps (resets left out), k={a.k}, {a.embedder}, {a.preset} tokenizer")
    print(f"{'':>6} {'prompt mean/med/p90':>22} {'fitted mean/med/p90':>22} {'target mean/med/p90':>22} "
          f"{'w/o trace mean/med/p90':>23} "
          f"{'targets as edits':>17} {'examples as edits':>18} {'examples clipped':>17}  fitting")
    for fmt in ("whole", "edit"):
        r = out[fmt]
        cols = [f"{r[k]['mean']:.0f}/{r[k]['median']:.0f}/{r[k]['p90']:.0f}"
                for k in ("prompt_tokens", "fitted_prompt_tokens", "target_tokens", "target_tokens_without_trace")]
        print(f"{fmt:>6} {cols[0]:>22} {cols[1]:>22} {cols[2]:>22} {cols[3]:>23} {r['targets_as_edits']:>17} "
              f"{r['examples_as_edits']:>18} {r['examples_clipped']:>17}  {r['fitting'] or '-'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
