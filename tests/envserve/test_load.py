"""A load test of `dreamgym serve-env --dream`: 64 concurrent sessions, 2,000 episodes, on the loopback only.

The server is its own process (`fake_lm_dream_server.py`: `dreamgym.envserve.server.serve` on an `EnvHost` given
its experience model), so its memory is read from /proc and it can be killed with SIGKILL. Its sessions, the
gatherer's cross-session batching, the persistent replay buffer and the protocol are the real ones; the experience
model's LLM is the fake LM for tests answering with the dial's true dynamics (`em_helpers.dial_sim`), which is
what makes 2,000 episodes affordable on a CPU (a trained tiny model decodes a few steps per second here).

One run checks, bounded by a count of episodes and a time limit:
- no cross-session leakage: every finished episode's observations, rewards, ends and task are those of the same
  seed and actions in this process;
- bounded memory: the server's resident set grows by less than `RSS_GROWTH_MIB` between the end of a warm-up
  (`WARMUP` episodes) and episode `EPISODES`, while sessions open and close (a connection serves `PER_SESSION`
  episodes) and the buffer grows;
- malformed and oversized requests mixed into the load, over HTTP and on a session, are each answered with a 4xx
  (an error message on a session) naming the problem, and the server stays up;
- a SIGKILL mid-run leaves a buffer that reopens with every transition the server answered as `buffered`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.envserve.client import RemoteEnvError, RemoteTextEnv, ServerGone, server_info
from dreamgym.dream.synthetic_env import SyntheticEnv
from fake_lm_dream_server import fake_dream_model
from servers import rss_mib, server_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 64
EPISODES = 2000
WARMUP = 256
PER_SESSION = 8
"""Episodes a session plays before its client closes it and opens another (sessions churn, as trainers' do)."""
TAIL = 4
"""Episodes per session beyond `EPISODES`, so the server is killed while every session is still playing."""
RSS_GROWTH_MIB = 32
"""Allowed growth of the server's resident set from the warm-up to the end. The buffer legitimately grows (about a
thousand new distinct transitions with their embeddings) and the allocator keeps some slack: about 10 MiB in all.
Anything kept per step (~4,400 steps after the warm-up) of 8 KiB, per episode of 20 KiB or per session (~220
opened) of 150 KiB fails it."""
TIME_LIMIT_S = 240
MAX_BODY_MB = 0.05
LIMIT_BYTES = int(MAX_BODY_MB * 2**20)


def fake_lm_server(buffer: Path, timeout: float = 120.0) -> AbstractContextManager[tuple[subprocess.Popen, str]]:
    """Start fake_lm_dream_server.py on a free loopback port; yield (process, URL); stop it on exit."""
    script = Path(__file__).with_name("fake_lm_dream_server.py")
    return server_process([sys.executable, str(script), "--buffer", str(buffer), "--max-sessions", "160",
                           "--max-body-mb", str(MAX_BODY_MB)], timeout,
                          env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])})


def plan(seed: int) -> list[str]:
    """Up to three turns, then submit: with the seed's task (one of 72), ~1,000 distinct episodes."""
    rng = random.Random(seed)
    return [rng.choice(["turn up", "turn down"]) for _ in range(rng.randint(0, 3))] + ["submit"]


def play(env, seed: int, on_step=None) -> list:
    """One episode of seed's plan: the reset's observation and task, then (obs, reward, terminated, truncated)."""
    obs, info = env.reset(seed=seed)
    trace: list = [(obs, info["task"].id)]
    for action in plan(seed):
        before = obs
        obs, r, term, trunc, info = env.step(action)
        trace.append((obs, r, term, trunc))
        if on_step is not None:
            on_step(info, before, action, obs)
        if term or trunc:
            break
    return trace


BAD_HTTP = [  # (method, path, body or raw bytes, status, words the answer must hold)
    ("POST", "/reset", b'{"seed": ', 422, "JSON"),
    ("POST", "/step", json.dumps({"action": {"action": "x" * (LIMIT_BYTES + 100)}}).encode(), 413,
     f"limit of {LIMIT_BYTES} bytes"),
    ("POST", "/step", {"action": {"move": "up"}}, 422, "action: Field required"),
    ("POST", "/reset", {"seed": "x"}, 422, "seed: Input should be a valid integer"),
    ("POST", "/reset", {"task_id": "nope"}, 400, "'nope' is not a task of dial/train"),
    ("POST", "/buffer/transitions", {"transitions": [{"state": "x"}]}, 400, "transitions[0]: not a transition record"),
    ("POST", "/reset", {"task": "dial-4-2"}, 400, "task must be a task record"),
]
BAD_WS = [  # (message, OpenEnv error code, words its message must hold)
    ("{not json", "INVALID_JSON", ""),
    (json.dumps({"type": "jump"}), "UNKNOWN_TYPE", "jump"),
    (json.dumps({"type": "step", "data": {"action": "a" * (LIMIT_BYTES + 100)}}), "MESSAGE_TOO_LARGE",
     f"over this server's limit of {LIMIT_BYTES} bytes"),
    (json.dumps({"type": "reset", "data": {"task_id": "nope"}}), "EXECUTION_ERROR", "'nope' is not a task of dial"),
]


def test_64_sessions_2000_episodes_isolated_bounded_robust_and_durable(tmp_path):
    buffer_dir = tmp_path / "buffer"
    lock = threading.Lock()
    traces: dict[int, list] = {}
    acked: list[tuple[str, str, str, str]] = []
    errors: list[str] = []
    done = threading.Event()
    killed = threading.Event()
    bad_answers: list[str] = []
    t_start = time.monotonic()
    with fake_lm_server(buffer_dir) as (proc, url):
        info = server_info(url)

        def on_step(info: dict, before: str, action: str, obs: str) -> None:
            if info.get("buffered"):
                with lock:
                    acked.append((info["task"].instruction, before, action, obs))

        def session_worker(k: int) -> None:
            seeds = range(k, EPISODES + TAIL * SESSIONS, SESSIONS)
            env = None
            try:
                for j, seed in enumerate(seeds):
                    if j % PER_SESSION == 0:
                        if env is not None:
                            env.close()
                        env = RemoteTextEnv(url, info=info)
                    trace = play(env, seed, on_step)
                    with lock:
                        traces[seed] = trace
                    if killed.is_set() or time.monotonic() - t_start > TIME_LIMIT_S:
                        return
            except (ServerGone, RemoteEnvError, OSError) as e:
                if not killed.is_set():
                    with lock:
                        errors.append(f"session {k}: {type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 - reported by the test
                with lock:
                    errors.append(f"session {k}: {type(e).__name__}: {e}")

        def bad_client() -> None:
            """Malformed and oversized requests, over HTTP and on a session of their own, until the load ends."""
            http = httpx.Client(base_url=url, timeout=60)
            ws_env = RemoteTextEnv(url, info=info)
            seed = 10_000
            try:
                while not done.is_set():
                    for method, path, body, status, words in BAD_HTTP:
                        kw = {"content": body, "headers": {"content-type": "application/json"}} \
                            if isinstance(body, bytes) else {"json": body}
                        r = http.request(method, path, **kw)
                        detail = r.json().get("message", "") if r.headers.get("content-type") == "application/json" \
                            else r.text
                        if r.status_code != status or words not in detail:
                            bad_answers.append(f"{method} {path}: {r.status_code} {detail[:200]}")
                    ws = ws_env._connect()
                    for message, code, words in BAD_WS:
                        ws.send(message)
                        answer = json.loads(ws.recv(timeout=60))
                        data = answer.get("data") or {}
                        if answer.get("type") != "error" or data.get("code") != code or words not in data["message"]:
                            bad_answers.append(f"ws {message[:40]!r}: {answer}")
                    # The session that received all of that still plays an episode, checked like the others.
                    trace = play(ws_env, seed, on_step)
                    with lock:
                        traces[seed] = trace
                    seed += 1
                    if http.get("/health").status_code != 200:
                        bad_answers.append("/health")
            except Exception as e:  # noqa: BLE001 - reported by the test
                if not killed.is_set():
                    errors.append(f"bad client: {type(e).__name__}: {e}")
            finally:
                http.close()

        def finished() -> int:
            with lock:
                return len(traces)

        threads = [threading.Thread(target=session_worker, args=(k,), daemon=True) for k in range(SESSIONS)]
        threads.append(threading.Thread(target=bad_client, daemon=True))
        for t in threads:
            t.start()
        while finished() < WARMUP and not errors and time.monotonic() - t_start < TIME_LIMIT_S:
            time.sleep(0.05)
        rss_warm, buffer_warm = rss_mib(proc.pid), httpx.get(url + "/buffer/stats").json()["size"]
        while finished() < EPISODES and not errors and time.monotonic() - t_start < TIME_LIMIT_S:
            time.sleep(0.05)
        rss_end, buffer_end = rss_mib(proc.pid), httpx.get(url + "/buffer/stats").json()["size"]
        stats = server_info(url)
        n_episodes = finished()
        playing = sum(t.is_alive() for t in threads[:SESSIONS])
        with lock:
            n_acked = len(acked)
        killed.set()
        done.set()
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the sessions are still stepping
        assert proc.wait(timeout=30) == -signal.SIGKILL
        for t in threads:
            t.join(timeout=60)
    elapsed = time.monotonic() - t_start
    print(f"\n{n_episodes} episodes in {elapsed:.1f} s with {SESSIONS} sessions; server RSS {rss_warm:.1f} MiB after "
          f"{WARMUP} episodes, {rss_end:.1f} MiB after {EPISODES} (growth {rss_end - rss_warm:+.1f} MiB, bound "
          f"{RSS_GROWTH_MIB}); buffer {buffer_warm} -> {buffer_end} transitions; experience-model batches "
          f"{stats['experience_model_batches']}; {len(acked)} buffered steps answered, {n_acked} before the kill")

    assert not errors, errors[:5]
    assert n_episodes >= EPISODES, f"only {n_episodes} episodes in {TIME_LIMIT_S} s"
    assert playing > 0, "the load was over before the kill"
    assert stats["episodes"] >= EPISODES and stats["gatherer"]["errors"] == 0
    assert stats["experience_model_batches"]["largest_batch"] > 8  # concurrent sessions shared model batches

    # Isolation: each episode is what the same seed and actions give in this process.
    reference = SyntheticEnv(fake_dream_model(None), env="dial")
    with lock:
        got = dict(traces)
    wrong = [seed for seed, trace in got.items() if play(reference, seed) != trace]
    assert not wrong, f"{len(wrong)} of {len(got)} served episodes differ from in-process, e.g. seed {wrong[0]}"

    # Bounded memory.
    assert rss_end - rss_warm < RSS_GROWTH_MIB, f"server RSS grew {rss_end - rss_warm:.1f} MiB over " \
        f"{EPISODES - WARMUP} episodes"

    # The bad requests were answered as they should be, many times over, and never took the server down.
    assert not bad_answers, bad_answers[:5]
    assert sum(1 for s in got if s >= 10_000) >= 3, "the bad client hardly ran"

    # Durability: the killed server's buffer reopens with every transition it answered as buffered.
    assert len(acked) > EPISODES
    with ReplayBuffer(buffer_dir, HashingEmbedder()) as reopened:
        stored = {(t.task.instruction, t.state, t.action, t.next_state) for t in reopened.transitions()
                  if t.source == "synthetic"}
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} of {len(set(acked))} answered transitions lost, e.g. {next(iter(missing))}"
