"""MiniWoB++ in real Chromium: steps per second with 1 and 4 browsers stepping episodes in parallel, beside the
synthetic environment's steps per second on the same tasks; and the accessibility-tree state's size in tokens
against the raw HTML's.

    python benchmarks/bench_web.py [--seconds 20] [--em EM_CHECKPOINT] [--episodes 32] [--turns 6] [--threads 1]

Real: one thread per browser, each playing the noisy oracle on train tasks in its own environment (a fresh
browser context per episode), counted over `--seconds` after a warm-up episode; resets are included, as in
collection. Synthetic: `--episodes` `SyntheticEnv`s on the same train tasks (one task each, spread over the 15
train tasks), played by the same noisy oracle on the states the experience model writes, all live episodes
stepped in one batched model call per turn, over `--turns` turns. An episode starts from its task's real first
page, read once before the clock starts (as the dream does: `initial_state="auto"` caches it per task), so a
synthetic reset inside the timing costs nothing and every second is the model's. The experience model is `--em`
(a `dreamgym train-em` checkpoint, e.g. configs/miniwob/em.yaml's), with the replay buffer it was trained
against; without `--em`, a small tiny-preset one is trained here on freshly collected MiniWoB++ data (cached
under $DREAMGYM_CACHE/bench). Tokens: the tiny preset's tokenizer, on the reset page of every train task
(seed 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def synthetic_steps_per_s(em_dir: Path, episodes: int, turns: int) -> dict[str, Any]:
    from dreamgym.envs import family
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.dream.synthetic_env import SyntheticEnv

    fam = family("miniwob")
    train = fam.tasks("train")
    n_sub = len({t.goal["subdomain"] for t in train})
    per_task = len(train) // n_sub  # the split lists each task's seeds in a row
    tasks = [train[((i % n_sub) * per_task + i // n_sub) % len(train)] for i in range(episodes)]
    model = ExperienceModel.load(em_dir, buffer=checkpoint_buffer(em_dir), device="cpu", batch_size=episodes)
    envs = [SyntheticEnv(model, env="miniwob", initial_state="real") for _ in range(episodes)]
    policies = [fam.POLICIES["noisy"](i) for i in range(episodes)]
    infos: list[dict[str, Any]] = [{} for _ in range(episodes)]
    starts = [0] * episodes

    def start(i: int) -> None:
        obs, infos[i] = envs[i].reset(seed=starts[i], options={"task": tasks[i]})
        policies[i].reset(tasks[i], obs, infos[i])
        starts[i] += 1

    for i in range(episodes):  # reads each task's real first page (a browser reset) before the clock starts
        start(i)
    steps = calls = won = ended = 0
    t0 = time.perf_counter()
    for _ in range(turns):
        for i, env in enumerate(envs):
            if env._done:
                start(i)
        acts = [p.act(info["abstract_state"], info) for p, info in zip(policies, infos)]
        outs = SyntheticEnv.step_batch(list(envs), acts)
        for i, (_, _, term, trunc, info) in enumerate(outs):
            infos[i] = info
            if term or trunc:
                ended += 1
                won += bool(info.get("won"))
        steps += len(envs)
        calls += 1
    dt = time.perf_counter() - t0
    for env in envs:
        env.close()
    return {"steps": steps, "model_calls": calls, "seconds": dt, "per_s": steps / dt, "episodes": ended,
            "won": won, "failures": model.stats["failures"]}


def token_sizes() -> tuple[float, float, float]:
    from dreamgym.envs import family
    from dreamgym.envs.web.browser import BrowserPool
    from dreamgym.llm.presets import load_preset

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
    ap.add_argument("--em", "--model", dest="em",
                    help="MiniWoB++ experience-model checkpoint of `dreamgym train-em` (default: train a small one, "
                         "cached)")
    ap.add_argument("--episodes", type=int, default=32, help="synthetic episodes stepped as one batch")
    ap.add_argument("--turns", type=int, default=6, help="batched synthetic turns to time")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the experience model")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the experience model")
    a = ap.parse_args()
    import os

    import torch

    torch.set_num_threads(a.threads)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, machine: {os.cpu_count()} CPUs, torch threads {a.threads}")
    tree, html, ratio = token_sizes()
    print(f"state size (tiny tokenizer, reset page of each train task): accessibility tree {tree:.0f} tokens, "
          f"raw HTML {html:.0f} tokens (HTML/tree {ratio:.1f}x per page)")
    for n in (1, 4):
        rate, steps = real_steps_per_s(n, a.seconds)
        print(f"real MiniWoB++, {n} browser{'s' if n > 1 else ' '}:  {rate:8.2f} steps/s ({steps} steps in "
              f"{a.seconds:g}s, noisy oracle, resets included)")
    if a.no_synthetic:
        return
    if a.em:
        em_dir = Path(a.em)
    else:
        from bench_synthetic import default_model

        em_dir = default_model("miniwob")
    syn = synthetic_steps_per_s(em_dir, a.episodes, a.turns)
    print(f"synthetic MiniWoB++ (x{a.episodes}): {syn['per_s']:8.2f} steps/s ({syn['steps']} steps in "
          f"{syn['model_calls']} batched model calls, {syn['seconds']:.1f}s, noisy oracle, {syn['episodes']} "
          f"episodes, {syn['won']} won, {syn['failures']} failure states; experience model {em_dir})")

if __name__ == "__main__":
    main()
