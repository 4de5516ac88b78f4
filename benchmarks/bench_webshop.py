"""WebShop benchmark: catalog + index build times, env steps/s, policy success on the 500 test goals, and the
token cost of raw HTML vs the abstract state per page.

Usage: python benchmarks/bench_webshop.py [--skip-100k] [--episodes N]

Tokenizer: the `tiny` preset's byte-level BPE (trained on every family's `corpus_text()`), loaded through
`dreamgym.llm.presets.resolve("tiny")` (built on first use). If presets are unavailable, a byte-level BPE with the
same recipe is trained here on `webshop.corpus_text()` with the `tokenizers` library. Note that neither saw
HTML markup during training, so HTML costs a little more tokens than with a general-purpose tokenizer; the
character ratio is printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dreamgym.envs import webshop as ws  # noqa: E402
from dreamgym.envs.webshop import catalog as catalog_mod  # noqa: E402


def bench_build(n: int) -> None:
    t0 = time.perf_counter()
    products = catalog_mod.generate_products(n, seed=0)
    t1 = time.perf_counter()
    cat = catalog_mod.Catalog(catalog_mod.synthetic_key(n, 0), products)
    t2 = time.perf_counter()
    cat.goals("test")
    t3 = time.perf_counter()
    print(f"catalog n={n:>7}: generate {t1 - t0:6.2f}s  bm25s index {t2 - t1:6.2f}s  goals {t3 - t2:5.2f}s  "
          f"total {t3 - t0:6.2f}s")


def bench_cached_100k() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DREAMGYM_CACHE"] = tmp
        key = catalog_mod.synthetic_key(100_000, 0)
        t0 = time.perf_counter()
        catalog_mod._build(key)  # builds and writes the on-disk cache
        t1 = time.perf_counter()
        cat = catalog_mod._build(key)  # loads it
        t2 = time.perf_counter()
        q0 = time.perf_counter()
        for q in ("machine wash hoodie", "gluten free protein bars", "noise cancelling headphones", "queen sheets"):
            cat.search.search(q)
        q1 = time.perf_counter()
        print(f"catalog n= 100000 via get_catalog: first build + disk cache {t1 - t0:.2f}s, cached load "
              f"{t2 - t1:.2f}s, search {1000 * (q1 - q0) / 4:.1f} ms/query")
        os.environ.pop("DREAMGYM_CACHE")


def run_policy(name: str, tasks, env, step_times: list[float] | None = None):
    wins, rewards, lengths = 0, [], []
    for i, task in enumerate(tasks):
        pol = ws.POLICIES[name](i)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        n = 0
        while True:
            a = pol.act(obs, info)
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(a)
            if step_times is not None:
                step_times.append(time.perf_counter() - t)
            n += 1
            if term or trunc:
                break
        wins += info["won"]
        rewards.append(r)
        lengths.append(n)
    return wins / len(tasks), statistics.mean(rewards), statistics.mean(lengths)


def load_tokenizer():
    try:
        from transformers import AutoTokenizer

        from dreamgym.llm.presets import resolve
        return AutoTokenizer.from_pretrained(str(resolve("tiny"))), "tiny preset byte-level BPE"
    except Exception as e:  # noqa: BLE001 - fall back to a locally trained BPE of the same kind
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=4096, min_frequency=2,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(ws.corpus_text(), trainer=trainer)

        class _Wrap:
            def encode(self, text):
                return tok.encode(text).ids
        return _Wrap(), f"byte-level BPE (4096) trained on webshop.corpus_text() (presets unavailable: {e})"


def bench_tokens(episodes: int) -> None:
    tokenizer, which = load_tokenizer()
    env = ws.make_env("train", obs_mode="html")
    tasks = ws.tasks("train")[:episodes]
    per_kind: dict[str, list[tuple[int, int, int, int]]] = defaultdict(list)
    for i, task in enumerate(tasks):
        pol = ws.POLICIES[("oracle", "noisy", "random")[i % 3]](i)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        for _ in range(15):
            html, abstract = info["raw_obs"], info["abstract_state"]
            per_kind[info["page"]].append((len(tokenizer.encode(html)), len(tokenizer.encode(abstract)),
                                           len(html), len(abstract)))
            obs, r, term, trunc, info = env.step(pol.act(obs, info))
            if term or trunc:
                per_kind[info["page"]].append((len(tokenizer.encode(info["raw_obs"])),
                                               len(tokenizer.encode(info["abstract_state"])),
                                               len(info["raw_obs"]), len(info["abstract_state"])))
                break
    print(f"tokens per page ({which}); {sum(map(len, per_kind.values()))} pages from {episodes} episodes")
    print(f"  {'page':<12}{'n':>5}{'html tok':>10}{'abstract tok':>14}{'max abs tok':>13}{'ratio':>8}")
    allp = [x for v in per_kind.values() for x in v]
    for kind in ("search", "results", "item", "description", "features", "reviews", "done"):
        v = per_kind.get(kind)
        if not v:
            continue
        h, a = statistics.mean(x[0] for x in v), statistics.mean(x[1] for x in v)
        print(f"  {kind:<12}{len(v):>5}{h:>10.0f}{a:>14.0f}{max(x[1] for x in v):>13}{h / a:>8.1f}")
    h, a = statistics.mean(x[0] for x in allp), statistics.mean(x[1] for x in allp)
    hc, ac = statistics.mean(x[2] for x in allp), statistics.mean(x[3] for x in allp)
    print(f"  {'all':<12}{len(allp):>5}{h:>10.0f}{a:>14.0f}{max(x[1] for x in allp):>13}{h / a:>8.1f}"
          f"   (characters: {hc:.0f} vs {ac:.0f}, ratio {hc / ac:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-100k", action="store_true")
    ap.add_argument("--episodes", type=int, default=150, help="episodes for the token count")
    args = ap.parse_args()

    bench_build(2000)
    if not args.skip_100k:
        bench_build(100_000)
        bench_cached_100k()

    test = ws.tasks("test")
    for mode in ("text", "abstract", "html"):
        env = ws.make_env("test", obs_mode=mode)
        times: list[float] = []
        run_policy("random", test[:200], env, times)
        run_policy("oracle", test[:200], env, times)
        print(f"env steps/s ({mode} mode, env.step only, oracle+random): {len(times) / sum(times):,.0f} "
              f"({len(times)} steps, mean {1000 * statistics.mean(times):.2f} ms)")

    env = ws.make_env("test", obs_mode="text")
    for name in ("oracle", "noisy", "random"):
        t = time.perf_counter()
        success, mean_r, mean_len = run_policy(name, test, env)
        print(f"{name:<7} on the {len(test)} test goals: success {100 * success:5.1f}%  mean reward "
              f"{mean_r:.3f}  mean steps {mean_len:.1f}  ({time.perf_counter() - t:.1f}s)")

    bench_tokens(args.episodes)


if __name__ == "__main__":
    main()
