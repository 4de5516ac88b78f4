"""Server memory under rejected oversized requests: each server's resident memory (RSS) before and after 100
requests with a 20 MB body, half declared by Content-Length and half streamed chunked, all of which must be
answered 413. Memory should come back to where it was (within 10%): a rejected body is never held.

Usage: python benchmarks/bench_servers.py [--requests 100] [--mb 20]

Each server runs as its own process from the command line (`dreamgym webshop serve`, `dreamgym serve-model
--preset tiny --device cpu`), so the figures are the server's alone; the client is httpx in this process. The
server is warmed with a few ordinary requests before the first reading.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers import cli_server, rss_mib  # noqa: E402  (tests/servers.py: start a dreamgym command, read its URL)


def bench(name: str, args: list[str], health: str, post: str, warm: list[tuple[str, str, dict]], n: int,
          mb: float) -> bool:
    size = int(mb * 1e6)
    # A body that is one valid request with a huge message, so a server that read it would also parse it.
    head = b'{"messages": [{"role": "user", "content": "' if "chat" in post else b'{"action": "'
    tail = b'"}]}' if "chat" in post else b'"}'
    body = head + b"a" * (size - len(head) - len(tail)) + tail

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 1 << 16):
            yield body[i:i + (1 << 16)]

    with cli_server(args) as (proc, base), httpx.Client(base_url=base, timeout=120) as client:
        for method, path, kwargs in warm:
            client.request(method, path, **kwargs).raise_for_status()
        before = rss_mib(proc.pid)
        t = time.perf_counter()
        statuses = []
        for i in range(n):
            content = body if i % 2 == 0 else chunks()
            statuses.append(client.post(post, content=content, headers={"Content-Type": "application/json"})
                            .status_code)
        elapsed = time.perf_counter() - t
        health_ok = client.get(health).status_code == 200
        after = rss_mib(proc.pid)
    rejected = statuses.count(413)
    ok = rejected == n and health_ok and abs(after - before) <= 0.1 * before
    print(f"{name:>12}: RSS before {before:7.1f} MB  after {n} rejected {mb:g} MB requests {after:7.1f} MB "
          f"({(after - before) / before:+.1%})  413s {rejected}/{n}  {elapsed / n * 1000:6.1f} ms/request  "
          f"health after: {'ok' if health_ok else 'FAILED'}  {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--mb", type=float, default=20.0, help="body size of each rejected request, in MB")
    a = parser.parse_args()
    results = [
        bench("webshop", ["webshop", "serve", "--port", "0", "--n-products", "300"], "/healthz", "/reset",
              [("GET", "/healthz", {}), ("POST", "/reset", {"json": {"task": 1, "seed": 0}})], a.requests, a.mb),
        bench("serve-model", ["serve-model", "--preset", "tiny", "--device", "cpu", "--threads", "1", "--port", "0"],
              "/health", "/v1/chat/completions",
              [("GET", "/health", {}), ("POST", "/v1/chat/completions",
                                        {"json": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}})],
              a.requests, a.mb),
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
