"""`dreamgym serve-model`'s caps on a structured-output regex: how compile time grows with a regex's length (why the
length cap is where it is), how long a regex over the cap and one past the compile timeout take to be refused, and
how long `/health` takes meanwhile.

Usage: python benchmarks/bench_serve_model_regex.py [--timeout-s 5] [--lengths 1000,4000,8000,16000]

The server runs as its own process (`dreamgym serve-model --preset tiny --device cpu --threads 1 --regex-timeout-s
T`). Printed: for alternations `(a|b)(a|b)...z` of each length, the server's answer and its time (a compile under the
timeout is answered 200 after a 4-token decode; past it, 400 regex_too_costly); a 1 MB regex (400 regex_too_long);
`[^\\s\\S]` (400, matches nothing); and the slowest `/health` (asked every 25 ms) and the server's RSS growth.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers import cli_server, rss_mib  # noqa: E402  (tests/servers.py: start a dreamgym command, read its URL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout-s", type=float, default=5.0)
    ap.add_argument("--lengths", default="1000,4000,8000,16000")
    args = ap.parse_args()
    cmd = ["serve-model", "--preset", "tiny", "--port", "0", "--device", "cpu", "--threads", "1",
           "--regex-timeout-s", str(args.timeout_s)]
    with cli_server(cmd) as (proc, base):
        url = base + "/v1/chat/completions"
        health: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                httpx.get(base + "/health", timeout=60)
                health.append(time.perf_counter() - t0)
                time.sleep(0.025)

        def ask(label: str, regex: str) -> None:
            t0 = time.perf_counter()
            r = httpx.post(url, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1,
                                      "structured_outputs": {"regex": regex}}, timeout=300)
            took = time.perf_counter() - t0
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else ""
            print(f"{label:<34} {len(regex):>8} chars  HTTP {r.status_code} {code or '':<18} {took:6.2f} s", flush=True)

        ask("warm-up (x)", "x")  # builds the vocabulary's tables once
        rss0 = rss_mib(proc.pid)
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        for n in (int(x) for x in args.lengths.split(",")):
            ask(f"alternations (a|b)*{n // 5}", "(a|b)" * (n // 5) + "z")
        ask("1 MB of a", "a" * (1 << 20))
        ask("matches nothing [^\\s\\S]", r"[^\s\S]")
        stop.set()
        poller.join()
        print(f"/health: {len(health)} asked, slowest {max(health):.2f} s; RSS {rss0:.0f} -> {rss_mib(proc.pid):.0f} MiB")


if __name__ == "__main__":
    main()
