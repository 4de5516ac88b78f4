"""How fast `dreamgym view` opens a big run: a run folder with 20,000 real dial episodes (JSONL, and the same as
Parquet), served on loopback; prints the time of the first request of each page (cold: the file is indexed by that
request) and of the same request again, and of a deep page, a filtered page and an episode.

    PYTHONPATH=. python benchmarks/bench_view.py [--episodes 20000] [--keep DIR]

The episodes are 200 collected ones written 100 times over with new ids (collecting 20,000 costs minutes and
measures the collector, not the viewer). Target: the list opens in under a second.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx

from dreamgym.utils import serving
from dreamgym.commands.collect import collect, parse_mix
from dreamgym.data import read_jsonl, write_parquet
from dreamgym.view.server import create_app
from dreamgym.view.site import Site


def build(run: Path, n: int) -> None:
    seed = run / "seed.jsonl"
    collect("dial", parse_mix("oracle:0.4,noisy:0.4,random:0.2"), 200, seed, overwrite=True, progress=False)
    lines = seed.read_text().splitlines()
    seed.unlink()
    Path(str(seed) + ".summary.json").unlink(missing_ok=True)
    with open(run / "offline.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            rec = json.loads(lines[i % len(lines)])
            rec["id"] = f"dial-train-{i:06d}"
            fh.write(json.dumps(rec) + "\n")
    write_parquet(run / "offline.parquet", read_jsonl(run / "offline.jsonl"))


def timed(c: httpx.Client, url: str) -> float:
    t = time.perf_counter()
    r = c.get(url)
    r.raise_for_status()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--keep", default="", help="build the run here (and keep it) instead of a temporary folder")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(a.keep or tmp) / "big-run"
        run.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        build(run, a.episodes)
        size = (run / "offline.jsonl").stat().st_size
        print(f"built {a.episodes} episodes: offline.jsonl {size / 2**20:.1f} MiB, offline.parquet "
              f"{(run / 'offline.parquet').stat().st_size / 2**20:.1f} MiB ({time.perf_counter() - t:.1f} s)")
        site = Site([run])
        with serving.start(serving.make_server(create_app(site))) as srv, httpx.Client(base_url=srv.base,
                                                                                      timeout=60) as c:
            rows = [("run list (/)", "/"), ("run page", "/runs/0/")]
            for sid, name in enumerate(s.name for s in site.run(0).sources):
                base = f"/runs/0/files/{sid}/"
                rows += [(f"{name}: list, first page", base),
                         (f"{name}: list, page at episode {a.episodes - 100}", f"{base}?start={a.episodes - 100}"),
                         (f"{name}: list filtered (won, task dial-3)", f"{base}?outcome=won&task=dial-3"),
                         (f"{name}: episode {a.episodes // 2}", f"{base}{a.episodes // 2}")]
            print(f"{'request':<58} {'first (s)':>10} {'again (s)':>10}")
            for label, url in rows:
                first = timed(c, url)
                again = min(timed(c, url) for _ in range(3))
                print(f"{label:<58} {first:>10.3f} {again:>10.3f}")


if __name__ == "__main__":
    main()
