"""MiniWoB++ in real Chromium: steps per second with 1 and 4 browsers stepping episodes in parallel, beside the
synthetic environment's transitions per second on the same tasks; and the accessibility-tree state's size in
tokens against the raw HTML's.

    python benchmarks/bench_web.py [--seconds 20] [--model EM_CHECKPOINT] [--episodes 32] [--threads 2]

Real: one thread per browser, each playing the noisy oracle on train tasks in its own environment (a fresh
browser context per episode), counted over `--seconds` after a warm-up episode; resets are included, as in
collection. Synthetic: `bench_synthetic.synthetic_steps_per_s` on a MiniWoB++ experience model (`--model`, or
a small tiny-preset one trained here on freshly collected MiniWoB++ data, cached under $DREAMGYM_CACHE/bench).
Tokens: the tiny preset's tokenizer, on the reset page of every train task (seed 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def real_steps_per_s(browsers: int, seconds: float) -> tuple[float, int]:
    from dreamgym.envs import family
    from dreamgym.envs.web.browser import BrowserPool

    fam = family("miniwob")
    train = fam.tasks("train")
    counts = [0] * browsers
    start = threading.Barrier(browsers + 1)
    stop = threading.Event()

    with BrowserPool(browsers) as pool:
        def play(i: int) -> None:
            env = fam.make_env("train", pool=pool)
            policy = fam.POLICIES["noisy"](i)

            def episode(j: int) -> int:
                task = train[(i * 997 + j * 7) % len(train)]
                obs, info = env.reset(options={"task": task})
                policy.reset(task, obs, info)
                n = 0
                while True:
                    obs, r, term, trunc, info = env.step(policy.act(obs, info))
                    n += 1
                    if term or trunc or stop.is_set():
                        return n

            episode(0)  # warm-up: the browser starts, the page cache fills
            start.wait()
            j = 1
            while not stop.is_set():
                counts[i] += episode(j)
                j += 1
            env.close()

        threads = [threading.Thread(target=play, args=(i,)) for i in range(browsers)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
    return sum(counts) / dt, sum(counts)


def token_sizes() -> tuple[float, float, float]:
    from dreamgym.envs import family
    from dreamgym.envs.web.browser import BrowserPool
    from dreamgym.presets import load_preset

    _, tok = load_preset("tiny")
    fam = family("miniwob")
    tree, html = [], []
    with BrowserPool(1) as pool:
        env = fam.make_env("train", pool=pool, n_seeds=1)
        for task in fam.tasks("train", n_seeds=1):
            obs, info = env.reset(options={"task": task})
            tree.append(len(tok(obs)["input_ids"]))
            html.append(len(tok(info["raw_obs"])["input_ids"]))
        env.close()
    return statistics.mean(tree), statistics.mean(html), statistics.mean(h / t for t, h in zip(tree, html))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--model", help="MiniWoB++ experience-model checkpoint (default: train a small one, cached)")
    ap.add_argument("--episodes", type=int, default=32, help="synthetic episodes stepped as one batch")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-synthetic", action="store_true", help="skip the experience model")
    a = ap.parse_args()
    import os

    import torch

    torch.set_num_threads(a.threads)
    print(f"machine: {os.cpu_count()} CPUs, torch threads {a.threads}")
    tree, html, ratio = token_sizes()
    print(f"state size (tiny tokenizer, reset page of each train task): accessibility tree {tree:.0f} tokens, "
          f"raw HTML {html:.0f} tokens (HTML/tree {ratio:.1f}x per page)")
    for n in (1, 4):
        rate, steps = real_steps_per_s(n, a.seconds)
        print(f"real MiniWoB++, {n} browser{'s' if n > 1 else ' '}:  {rate:8.2f} steps/s ({steps} steps in "
              f"{a.seconds:g}s, noisy oracle, resets included)")
    if a.no_synthetic:
        return
    from bench_synthetic import default_model, synthetic_steps_per_s

    model_dir = Path(a.model) if a.model else default_model("miniwob")
    syn = synthetic_steps_per_s(model_dir, "miniwob", a.episodes, a.turns)
    print(f"synthetic MiniWoB++ (x{a.episodes}): {syn['per_s']:8.2f} transitions/s ({syn['transitions']} in "
          f"{syn['model_calls']} batched model calls, {syn['seconds']:.1f}s, {syn['failures']} failure states; "
          f"model {model_dir})")


if __name__ == "__main__":
    main()
