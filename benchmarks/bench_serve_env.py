"""Synthetic steps per second through `dreamgym serve-env --dream` with 1, 8 and 64 concurrent sessions, batched
(the server gathers concurrent sessions' steps into one experience-model batch) and unbatched (`max_batch=1`: one
model call per step), beside the in-process batched figure (`SyntheticEnv.step_batch` over the same number of
episodes, no server), and the experience-model batch sizes the server reached.

    python benchmarks/bench_serve_env.py [--em CHECKPOINT] [--sessions 1,8,64] [--seconds 10] [--threads 2]

Without --em it uses `bench_synthetic.py`'s cached tiny-preset dial experience model (trained once, ~minutes).
Each session is a `RemoteTextEnv` on its own thread (a WebSocket session on the loopback), playing random
admissible actions, episode after episode, for `--seconds`; the server runs in this process on a background thread
(so the figures include the protocol and JSON, not the network). Every step's transition is appended to an
in-memory replay buffer, as a dream server's buffer grows.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path


def served(em: Path, sessions: int, seconds: float, max_batch: int) -> dict:
    from dreamgym.envserve.client import RemoteTextEnv, server_info
    from dreamgym.envserve.server import EnvServerConfig, start_env_server

    cfg = EnvServerConfig(env="dial", dream=True, em=str(em), device="cpu", max_sessions=max(sessions, 1),
                          max_batch=max_batch, batch_wait_ms=5.0 if max_batch > 1 else 0.0)
    counts = [0] * sessions
    with start_env_server(cfg) as srv:
        info = server_info(srv.url)
        envs = [RemoteTextEnv(srv.url, info=info) for _ in range(sessions)]
        start = threading.Barrier(sessions + 1)
        stop = threading.Event()

        def play(k: int) -> None:
            rng, env, seed = random.Random(k), envs[k], 1000 * k
            obs, inf = env.reset(seed=seed)
            start.wait()
            while not stop.is_set():
                obs, r, term, trunc, inf = env.step(rng.choice(inf["admissible_actions"] or ["submit"]))
                counts[k] += 1
                if term or trunc:
                    seed += 1
                    obs, inf = env.reset(seed=seed)

        threads = [threading.Thread(target=play, args=(k,), daemon=True) for k in range(sessions)]
        for t in threads:
            t.start()
        start.wait()
        before = server_info(srv.url)
        t0 = time.perf_counter()
        time.sleep(seconds)
        n = sum(counts)
        dt = time.perf_counter() - t0
        after = server_info(srv.url)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        for e in envs:
            e.close()
    em_b = after["experience_model_batches"]
    calls = em_b["model_calls"] - before["experience_model_batches"]["model_calls"]
    rows = em_b["model_rows"] - before["experience_model_batches"]["model_rows"]
    return {"per_s": n / dt, "steps": n, "mean_batch": rows / max(calls, 1), "largest_batch": em_b["largest_batch"]}


def in_process(em: Path, episodes: int, seconds: float) -> dict:
    from dreamgym.envs import family
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.synthetic_env import SyntheticBatcher, SyntheticEnv

    model = ExperienceModel.load(em, buffer=checkpoint_buffer(em), device="cpu", batch_size=max(episodes, 1))
    batcher, fam = SyntheticBatcher(), family("dial")
    envs = [SyntheticEnv(model, batcher=batcher) for _ in range(episodes)]
    rng = random.Random(0)
    infos = [e.reset(seed=1000 * i)[1] for i, e in enumerate(envs)]
    seeds = [1000 * i for i in range(episodes)]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        acts = [rng.choice(i["admissible_actions"] or fam.admissible_from_state(i["abstract_state"]) or ["submit"])
                for i in infos]
        outs = SyntheticEnv.step_batch(envs, acts)
        n += len(envs)
        for k, (_obs, _r, term, trunc, info) in enumerate(outs):
            infos[k] = info
            if term or trunc:
                seeds[k] += 1
                infos[k] = envs[k].reset(seed=seeds[k])[1]
    dt = time.perf_counter() - t0
    return {"per_s": n / dt, "steps": n, "mean_batch": batcher.stats["model_rows"] / max(batcher.stats["model_calls"], 1),
            "largest_batch": batcher.stats["largest_batch"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--em", help="experience-model checkpoint (default: bench_synthetic.py's cached dial model)")
    ap.add_argument("--sessions", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    if a.em:
        em = Path(a.em)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_synthetic import default_model

        em = default_model("dial")
    print(f"experience model {em}; torch threads {a.threads}; {a.seconds:g} s per figure; loopback, one process")
    print("| sessions | served, batched (steps/s) | EM batch mean / largest | served, max_batch=1 (steps/s) "
          "| in-process step_batch (steps/s) |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in a.sessions.split(",")):
        b = served(em, n, a.seconds, max_batch=64)
        u = served(em, n, a.seconds, max_batch=1)
        p = in_process(em, n, a.seconds)
        print(f"| {n} | {b['per_s']:.1f} | {b['mean_batch']:.1f} / {b['largest_batch']} | {u['per_s']:.1f} "
              f"| {p['per_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
