"""Synthetic steps per second through `dreamgym serve-env --dream` with 1, 8 and 64 concurrent sessions, batched
(the server gathers concurrent sessions' steps into one experience-model batch) and unbatched (`--max-batch 1`: one
model call per step), beside the in-process batched figure (`SyntheticEnv.step_batch` over the same number of
episodes, no server), and the experience-model batch sizes the server reached.

    python benchmarks/bench_serve_env.py [--em CHECKPOINT] [--sessions 1,8,64] [--seconds 20] [--threads 1]

Without --em it uses `bench_synthetic.py`'s cached tiny-preset dial experience model (trained once, ~minutes).
The server is its own process, started as a user would (`python -m dreamgym.cli serve-env --dream --em ...
--port 0 --threads N`), with an in-memory replay buffer that grows with every synthetic step. Each session is a
`RemoteTextEnv` on its own thread of this process (a WebSocket session on the loopback) playing random admissible
actions, episode after episode; steps are counted over `--seconds` after a warm-up. The in-process figure runs
the same model with `--threads` torch threads in this process.

Prints the date, the machine (CPUs, load average before and after) and the command line, then a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers import cli_server  # noqa: E402  (tests/servers.py: start a dreamgym command, read its URL)


@contextmanager
def serve_env(em: Path, sessions: int, max_batch: int, threads: int) -> Iterator[str]:
    """`dreamgym serve-env --dream` in its own process; yields its URL and stops it on exit."""
    args = ["serve-env", "--env", "dial", "--dream", "--em", str(em), "--device", "cpu", "--port", "0", "--threads",
            str(threads), "--max-sessions", str(max(sessions, 1) + 1), "--max-batch", str(max_batch),
            "--batch-wait-ms", "5" if max_batch > 1 else "0"]
    with cli_server(args, timeout=300, env={"OMP_NUM_THREADS": str(threads)}) as (_, url):
        yield url


def served(em: Path, sessions: int, seconds: float, max_batch: int, threads: int) -> dict:
    from dreamgym.envserve.client import RemoteTextEnv, server_info

    counts = [0] * sessions
    with serve_env(em, sessions, max_batch, threads) as url:
        info = server_info(url)
        envs = [RemoteTextEnv(url, info=info) for _ in range(sessions)]
        start = threading.Barrier(sessions + 1)
        stop = threading.Event()
        failures: list[str] = []

        def play(k: int) -> None:
            rng, env, seed = random.Random(k), envs[k], 1000 * k
            try:
                obs, inf = env.reset(seed=seed)
                start.wait()
                while not stop.is_set():
                    obs, r, term, trunc, inf = env.step(rng.choice(inf["admissible_actions"] or ["submit"]))
                    counts[k] += 1
                    if term or trunc:
                        seed += 1
                        obs, inf = env.reset(seed=seed)
            except Exception as e:  # noqa: BLE001 - reported below: a figure from failing sessions is no figure
                failures.append(f"session {k}: {type(e).__name__}: {e}")
                start.abort()

        threads_ = [threading.Thread(target=play, args=(k,), daemon=True) for k in range(sessions)]
        for t in threads_:
            t.start()
        try:
            start.wait()
        except threading.BrokenBarrierError:
            raise SystemExit("; ".join(failures[:3])) from None
        time.sleep(min(5.0, seconds / 4))  # warm-up: first batches, allocator growth
        before, n0, t0 = server_info(url), sum(counts), time.perf_counter()
        time.sleep(seconds)
        n, dt = sum(counts) - n0, time.perf_counter() - t0
        after = server_info(url)
        stop.set()
        for t in threads_:
            t.join(timeout=120)
        for e in envs:
            e.close()
    if failures:
        raise SystemExit("; ".join(failures[:3]))
    em_b, em_0 = after["experience_model_batches"], before["experience_model_batches"]
    calls, rows = em_b["model_calls"] - em_0["model_calls"], em_b["model_rows"] - em_0["model_rows"]
    return {"per_s": n / dt, "steps": n, "mean_batch": rows / max(calls, 1), "largest_batch": em_b["largest_batch"]}


def in_process(em: Path, episodes: int, seconds: float) -> dict:
    from dreamgym.envs import family
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.dream.synthetic_env import SyntheticBatcher, SyntheticEnv

    model = ExperienceModel.load(em, buffer=checkpoint_buffer(em), device="cpu", batch_size=max(episodes, 1))
    batcher, fam = SyntheticBatcher(), family("dial")
    envs = [SyntheticEnv(model, batcher=batcher) for _ in range(episodes)]
    rng = random.Random(0)
    infos = [e.reset(seed=1000 * i)[1] for i, e in enumerate(envs)]
    seeds = [1000 * i for i in range(episodes)]

    def turn() -> None:
        acts = [rng.choice(i["admissible_actions"] or fam.admissible_from_state(i["abstract_state"]) or ["submit"])
                for i in infos]
        for k, (_obs, _r, term, trunc, info) in enumerate(SyntheticEnv.step_batch(envs, acts)):
            infos[k] = info
            if term or trunc:
                seeds[k] += 1
                infos[k] = envs[k].reset(seed=seeds[k])[1]

    turn()  # warm-up
    calls0, rows0 = batcher.stats["model_calls"], batcher.stats["model_rows"]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        turn()
        n += len(envs)
    dt = time.perf_counter() - t0
    calls, rows = batcher.stats["model_calls"] - calls0, batcher.stats["model_rows"] - rows0
    return {"per_s": n / dt, "steps": n, "mean_batch": rows / max(calls, 1)}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs ({cpu}), load average {load}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--em", help="experience-model checkpoint (default: bench_synthetic.py's cached dial model)")
    ap.add_argument("--sessions", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=20.0)
    # One thread: on a shared CPU a second torch thread mostly spins waiting for a core (and the server and the
    # clients are two processes already).
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads, in the server and in-process")
    a = ap.parse_args()
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(a.threads)
    hf_logging.disable_progress_bar()
    if a.em:
        em = Path(a.em)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_synthetic import default_model

        em = default_model("dial")
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {machine()}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"experience model {em}; torch threads {a.threads}; {a.seconds:g} s per figure; server in its own process, "
          "sessions on the loopback")
    print("| sessions | served, batched (steps/s) | EM batch mean / largest | served, max_batch=1 (steps/s) "
          "| in-process step_batch (steps/s) |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in a.sessions.split(",")):
        b = served(em, n, a.seconds, max_batch=64, threads=a.threads)
        u = served(em, n, a.seconds, max_batch=1, threads=a.threads)
        p = in_process(em, n, a.seconds)
        print(f"| {n} | {b['per_s']:.1f} | {b['mean_batch']:.1f} / {b['largest_batch']} | {u['per_s']:.1f} "
              f"| {p['per_s']:.1f} |", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
