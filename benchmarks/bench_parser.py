"""Parsers of model output on hostile input: seconds per parse at 1x, 10x and 100x the input, and the ratio per
10x (linear: about 10; quadratic: about 100).

A model's reply is untrusted text of up to max_tokens tokens (a served model can ignore the limit). Each case
repeats one tag that opens a block and never closes it, the input that made a lazy `<tag>(.*?)</tag>` search
rescan the rest of the text from every opening tag:

- em-state:   `<state>` x n (experience-model output, `parse_completion`)
- em-think:   `<think>` x n before a well-formed answer (its reasoning is searched up to the `<state>`)
- action:     `<action>` x n (the agent's reply, `parse_action`)
- think:      `<think>` x n (the agent's reasoning, `parse_thought`)
- variant:    `Variant` and n spaces, no colon (the curriculum's variant lines, `Curriculum.parse_variants`)

Times are the best of several runs (on a shared machine the best is the closest to the uncontended cost).

    .venv/bin/python benchmarks/bench_parser.py [--base 200] [--cases em-state,action]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from dreamgym.agent import parse_action, parse_thought
from dreamgym.curriculum.generator import Curriculum
from dreamgym.experience.format import parse_completion

ANSWER = "<state>\n[dial] 3\n</state>\n<reward>0</reward>\n<done>false</done>"

CASES: dict[str, tuple[Callable[[int], str], Callable[[str], object]]] = {
    "em-state": (lambda n: "<state>" * n, parse_completion),
    "em-think": (lambda n: "<think>" * n + ANSWER, parse_completion),
    "action": (lambda n: "<action>" * n, parse_action),
    "think": (lambda n: "<think>" * n, parse_thought),
    "variant": (lambda n: "Variant" + " " * (8 * n), Curriculum.parse_variants),
}


def best_time(fn: Callable[[str], object], text: str, budget_s: float = 0.5) -> float:
    """Best seconds per call over repeats that together take about `budget_s` (at least 3 calls)."""
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or spent < budget_s:
        t = time.perf_counter()
        fn(text)
        dt = time.perf_counter() - t
        times.append(dt)
        spent += dt
    return min(times)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=int, default=200, help="tag repeats at 1x (default 200)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    a = p.parse_args(argv)
    print(f"{'case':<10} {'chars 1x':>9} {'1x s':>10} {'10x s':>10} {'100x s':>10} {'10x/1x':>7} {'100x/10x':>8}")
    for name in a.cases.split(","):
        make, fn = CASES[name]
        t = [best_time(fn, make(a.base * scale)) for scale in (1, 10, 100)]
        print(f"{name:<10} {len(make(a.base)):>9} {t[0]:>10.2e} {t[1]:>10.2e} {t[2]:>10.2e} "
              f"{t[1] / t[0]:>7.1f} {t[2] / t[1]:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
