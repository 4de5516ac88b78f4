"""Gathering the steps of concurrent sessions into one batched step: the server side of cross-session batching.

Owns: `StepGatherer`, a thread that collects steps arriving within `wait_s` of each other (up to `max_batch`),
steps them with one `step_batch` call per environment class, and runs other work that must not overlap a batch
(`call`: resets, buffer additions) between batches (work arriving while a batch gathers runs after it); its
counters (`stats`: batches, rows, the largest batch and the batch-size histogram).
Must not know: HTTP, sessions, what an environment does inside `step_batch` (for the synthetic environment that is
`dreamgym.dream.synthetic_env.SyntheticBatcher`: one experience-model call) or where the experience model runs.

Every job runs on the gatherer's one thread, so whatever the environments share (the experience model, the replay
buffer) is used by one thread at a time without locks of its own. The wait window is the same idea as
`dreamgym serve-model`'s micro-batcher: a few milliseconds of latency buys batched decoding for concurrent clients;
while a batch runs, the steps arriving meanwhile queue and form the next one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from dreamgym.env import TextEnv

log = logging.getLogger(__name__)


@dataclass
class _Job:
    future: Future
    env: TextEnv | None = None
    action: str = ""
    fn: Callable[[], Any] | None = None


class StepGatherer:
    """`submit(env, action)` returns a future of `env.step(action)`'s 5-tuple; concurrent submissions of environments
    that declare `batched_step` are stepped together. `call(fn)` runs `fn` on the same thread between batches."""

    def __init__(self, wait_s: float = 0.005, max_batch: int = 64, name: str = "env-gatherer"):
        if wait_s < 0 or max_batch < 1:
            raise ValueError(f"StepGatherer: wait_s must be >= 0 and max_batch >= 1, got {wait_s}, {max_batch}")
        self.wait_s, self.max_batch = wait_s, max_batch
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self.sizes: Counter[int] = Counter()
        self._stats = {"batches": 0, "steps": 0, "largest_batch": 0, "calls": 0, "errors": 0}
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def stats(self) -> dict[str, Any]:
        """Batches run, steps in them, the largest, other jobs run, failed jobs, and {batch size: count}."""
        with self._lock:
            return {**self._stats, "batch_sizes": dict(sorted(self.sizes.items()))}

    def submit(self, env: TextEnv, action: str) -> Future:
        fut: Future = Future()
        self._queue.put(_Job(fut, env, action))
        return fut

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the gatherer's thread once the batch in progress is done; its result or error in the future."""
        fut: Future = Future()
        self._queue.put(_Job(fut, fn=fn))
        return fut

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.fn is not None:
                self._run_call(job)
                continue
            batch: list[_Job] = [job]
            after: list[_Job] = []  # other work that arrived while the batch gathered, in arrival order
            seen = {id(job.env)}
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                if nxt.fn is not None:
                    # A reset waits for the batch instead of cutting it short: with short episodes resets are
                    # frequent, and every one would end a batch early. No session's order changes, since a
                    # session's next message waits for the answer to its last.
                    after.append(nxt)
                    continue
                if id(nxt.env) in seen:  # a second step of one environment cannot share its batch
                    after.append(nxt)
                    break
                seen.add(id(nxt.env))
                batch.append(nxt)
            self._run_steps(batch)
            for job in after:
                if job.fn is not None:
                    self._run_call(job)
                else:
                    self._run_steps([job])

    def _run_call(self, job: _Job) -> None:
        assert job.fn is not None
        try:
            job.future.set_result(job.fn())
        except BaseException as e:  # noqa: BLE001 - reported to the caller; the gatherer lives on
            with self._lock:
                self._stats["errors"] += 1
            job.future.set_exception(e)
        with self._lock:
            self._stats["calls"] += 1

    def _run_steps(self, jobs: list[_Job]) -> None:
        groups: dict[type, list[_Job]] = {}
        for j in jobs:
            assert j.env is not None
            cls = type(j.env)
            if getattr(cls, "batched_step", False):
                groups.setdefault(cls, []).append(j)
            else:  # one at a time, as the rollout engine would
                groups.setdefault(object, []).append(j)
        for cls, group in groups.items():
            try:
                if cls is object:
                    outs = [j.env.step(j.action) for j in group]  # type: ignore[union-attr]
                else:
                    envs = [j.env for j in group if j.env is not None]
                    outs = cls.step_batch(envs, [j.action for j in group])
            except Exception as e:  # noqa: BLE001 - a failed batch is reported to its sessions, the server lives on
                log.exception("a batch of %d steps failed", len(group))
                with self._lock:
                    self._stats["errors"] += len(group)
                for j in group:
                    j.future.set_exception(e)
                continue
            for j, out in zip(group, outs):
                j.future.set_result(out)
        with self._lock:
            self._stats["batches"] += 1
            self._stats["steps"] += len(jobs)
            self._stats["largest_batch"] = max(self._stats["largest_batch"], len(jobs))
            self.sizes[len(jobs)] += 1
