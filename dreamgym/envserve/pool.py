"""Several environment servers behind one client: rollouts spread over machines and survive a server's death.

Owns: `EnvPool` (the servers, their health, round-robin choice of a live one) and `PooledEnv` (a `TextEnv` whose
session lives on one of the pool's servers and moves to another when that one dies).
Must not know: how a server works beyond `dreamgym.envserve.client`, trainers.

Health: a server is live until a call to it fails with `ServerGone` or its `/health` check fails; a dead server is
checked again after `recheck_s` and rejoins when it answers. `events` records every failure with its server and
reason.

Failover: every episode of a `PooledEnv` is seeded (a reset without a seed draws one from the env's own generator),
and the environment contract makes the same seed and actions give the same observations. So when its server dies
mid-episode the episode is not lost: the session is failed with the reason (`failovers`, and the step's
`info["failover"]`), a new one opens on the next live server, resets with the episode's seed and task, replays the
actions taken so far and then takes the step that failed. Only when no server is live does the step raise
`ServerGone`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

from dreamgym.env import TextEnv
from dreamgym.envserve.client import RemoteTextEnv, ServerGone, server_info


class EnvPool:
    """`EnvPool(urls, token=None)`; `pool.make_env()` (or `pool()`, an env factory) gives a `PooledEnv`."""

    def __init__(self, urls: Sequence[str], *, token: str | None = None, timeout_s: float = 120.0,
                 recheck_s: float = 10.0, health_timeout_s: float = 2.0):
        if not urls:
            raise ValueError("EnvPool needs at least one server URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.token, self.timeout_s = token, timeout_s
        self.recheck_s, self.health_timeout_s = recheck_s, health_timeout_s
        self._lock = threading.Lock()
        self._next = 0
        self._dead: dict[str, float] = {}  # url -> when it was found dead
        self._info: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        """Each failure: {"server", "reason", "time"}."""

    def healthy(self, url: str) -> bool:
        """Whether `url` answers `/health` now (a short timeout)."""
        try:
            return httpx.get(f"{url}/health", timeout=self.health_timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def mark_dead(self, url: str, reason: str) -> None:
        with self._lock:
            self._dead[url] = time.monotonic()
            self.events.append({"server": url, "reason": reason, "time": time.time()})

    def live(self) -> list[str]:
        """The servers not known dead; a dead one whose recheck time has come is checked and rejoins if healthy."""
        now = time.monotonic()
        with self._lock:
            due = [u for u, t in self._dead.items() if now - t >= self.recheck_s]
        for u in due:
            if self.healthy(u):
                with self._lock:
                    self._dead.pop(u, None)
            else:
                with self._lock:
                    self._dead[u] = now
        with self._lock:
            return [u for u in self.urls if u not in self._dead]

    def check(self) -> dict[str, bool]:
        """Health-check every server now; failing ones are marked dead (with the reason)."""
        out = {}
        for u in self.urls:
            out[u] = self.healthy(u)
            if not out[u]:
                self.mark_dead(u, "health check failed")
            else:
                with self._lock:
                    self._dead.pop(u, None)
        return out

    def open(self, exclude: str | None = None) -> RemoteTextEnv:
        """A new session on the next live server (round-robin), skipping `exclude` and servers that fail to answer."""
        tried: set[str] = set()
        while True:
            candidates = [u for u in self.live() if u != exclude and u not in tried]
            if not candidates:
                raise ServerGone(", ".join(self.urls), "no live environment server in the pool")
            with self._lock:
                url = candidates[self._next % len(candidates)]
                self._next += 1
            tried.add(url)
            try:
                if url not in self._info:
                    self._info[url] = server_info(url, self.token, self.health_timeout_s + 3)
                return RemoteTextEnv(url, token=self.token, timeout_s=self.timeout_s, info=self._info[url])
            except ServerGone as e:
                self.mark_dead(url, e.reason)

    def make_env(self) -> PooledEnv:
        return PooledEnv(self)

    __call__ = make_env


class PooledEnv(TextEnv):
    """A `TextEnv` on the pool's servers; see the module docstring for failover."""

    def __init__(self, pool: EnvPool):
        super().__init__()
        self.pool = pool
        self.remote: RemoteTextEnv | None = None
        self._seed: int | None = None
        self._options: dict[str, Any] = {}
        self._actions: list[str] = []
        self.failovers: list[dict[str, Any]] = []
        """Each move of a session: {"server" it left, "reason", "to"}."""

    @property
    def is_synthetic(self) -> bool:
        return bool(self.remote is not None and self.remote.is_synthetic)

    def _session(self) -> RemoteTextEnv:
        if self.remote is None:
            self.remote = self.pool.open()
            self.env_family = self.remote.env_family
        return self.remote

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if seed is None:  # seeded always, so the episode can be replayed elsewhere
            seed = int(self.np_random.integers(2**31 - 1))
        self._seed, self._options, self._actions = seed, dict(options), []
        while True:
            remote = self._session()
            try:
                return remote.reset(seed=seed, options=options)
            except ServerGone as e:
                self._fail_over(remote, e)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        moved = False
        while True:
            remote = self._session()
            try:
                out = remote.step(action)
            except ServerGone as e:
                self._fail_over(remote, e)
                self._replay()
                moved = True
                continue
            self._actions.append(action)
            if moved:
                out[4]["failover"] = self.failovers[-1]
            return out

    def _fail_over(self, remote: RemoteTextEnv, e: ServerGone) -> None:
        self.pool.mark_dead(remote.url, e.reason)
        remote.close()
        self.remote = None
        nxt = self._session()
        self.failovers.append({"server": remote.url, "reason": e.reason, "to": nxt.url})

    def _replay(self) -> None:
        """The episode so far on the new session: same seed and task, same actions."""
        while True:
            remote = self._session()
            try:
                remote.reset(seed=self._seed, options=self._options)
                for a in self._actions:
                    remote.step(a)
                return
            except ServerGone as e:
                self._fail_over(remote, e)

    @property
    def episode(self) -> dict[str, Any]:
        return self.remote.episode if self.remote is not None else {}

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None
        super().close()
