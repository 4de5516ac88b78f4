"""`dreamgym serve-model` refusing prompts just under its body limit: how long each refusal takes, how long
`/health` takes meanwhile, and how much the server's memory grows.

Usage: python benchmarks/bench_serve_model_limits.py [--mb 3.8] [--concurrent 4] [--rounds 2]

The server runs as its own process (`dreamgym serve-model --preset tiny --device cpu --threads 1`); the client sends
`--concurrent` valid requests at once, each one message (chat) or one prompt (completions) of `--mb` MB of text,
far over the model's context but under the 4 MiB body limit, `--rounds` times per route. Meanwhile `/health` is
asked every 25 ms and the server's resident memory (RSS, from /proc) sampled every 10 ms. Printed: each refusal's
status and time, the slowest and median `/health`, and RSS before, at its peak and after. Targets: `/health` under
0.5 s, memory growth under 300 MB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers import cli_server, rss_mib  # noqa: E402  (tests/servers.py: start a dreamgym command, read its URL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=3.8, help="prompt text per request, in MB")
    parser.add_argument("--concurrent", type=int, default=4, help="near-limit requests sent at once")
    parser.add_argument("--rounds", type=int, default=2, help="bursts per route")
    a = parser.parse_args()
    text = "turn up the dial " * int(a.mb * 1e6 / 17)
    bodies = {"/v1/chat/completions": {"messages": [{"role": "user", "content": text}], "max_tokens": 4},
              "/v1/completions": {"prompt": text, "max_tokens": 4}}
    args = ["serve-model", "--preset", "tiny", "--device", "cpu", "--threads", "1", "--port", "0"]
    with cli_server(args) as (proc, base), httpx.Client(base_url=base, timeout=120) as client:
        client.get("/health").raise_for_status()
        client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 4}).raise_for_status()
        before = rss_mib(proc.pid)
        peak, health, done = before, [], threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mib(proc.pid))
                time.sleep(0.01)

        def ping() -> None:
            with httpx.Client(base_url=base, timeout=60) as c:
                while not done.is_set():
                    t = time.perf_counter()
                    c.get("/health").raise_for_status()
                    health.append(time.perf_counter() - t)
                    time.sleep(0.025)

        def refuse(route: str) -> tuple[int, float, str]:
            with httpx.Client(base_url=base, timeout=120) as c:
                t = time.perf_counter()
                r = c.post(route, json=bodies[route])
                return r.status_code, time.perf_counter() - t, r.json()["error"]["message"][:100]

        watchers = [threading.Thread(target=sample), threading.Thread(target=ping)]
        for w in watchers:
            w.start()
        t0 = time.perf_counter()
        results = []
        with ThreadPoolExecutor(a.concurrent) as pool:
            for route in bodies:
                for _ in range(a.rounds):
                    results += [(route, *r) for r in pool.map(refuse, [route] * a.concurrent)]
        wall = time.perf_counter() - t0
        time.sleep(0.5)
        done.set()
        for w in watchers:
            w.join()
        after = rss_mib(proc.pid)
    for route, status, secs, message in results:
        print(f"{route:22} {status}  {secs:6.2f} s  {message}")
    print(f"{len(results)} near-limit requests ({a.mb:g} MB of text each, {a.concurrent} at a time) in {wall:.2f} s")
    print(f"/health: {len(health)} answers, slowest {max(health):.3f} s, median {statistics.median(health):.3f} s")
    print(f"RSS: before {before:.0f} MB, peak {peak:.0f} MB (+{peak - before:.0f} MB), after {after:.0f} MB")
    ok = max(health) < 0.5 and peak - before < 300 and all(400 <= s < 500 for _, s, _, _ in results)
    print("PASS" if ok else "FAIL", "(targets: /health < 0.5 s, memory growth < 300 MB, every request a 4xx)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
