"""Clients of `dreamgym serve-env`: a served session as a `TextEnv`, and the served replay buffer.

Owns: `RemoteTextEnv` (one WebSocket session, OpenEnv's messages, as a Gymnasium `TextEnv`, so DreamGym's trainers,
the rollout engine and `check_env` run against a served environment unchanged), `RemoteBuffer` (adding transitions
to the buffer a server owns), `server_info`, and the two ways a call can fail: `RemoteEnvError` (the server
answered with an error) and `ServerGone` (no answer: the server is down, unreachable or too slow).
Must not know: how the server works beyond its protocol (`dreamgym.envserve.protocol`), trainers.

A `RemoteTextEnv` is `is_synthetic` when the server serves a dream, so the rollout engine charges real steps only
for a real served environment. It steps one session at a time (`batched_step` is False): the rollout engine's
threads step many sessions concurrently and the server batches them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from dreamgym.env import TextEnv
from dreamgym.envserve.protocol import info_from_json
from dreamgym.types import Transition


class RemoteEnvError(RuntimeError):
    """The server answered a message with an error (`code` is OpenEnv's error code, e.g. CAPACITY_REACHED)."""

    def __init__(self, url: str, code: str, message: str):
        super().__init__(f"{url}: {code}: {message}")
        self.url, self.code, self.message = url, code, message


class ServerGone(ConnectionError):
    """No answer from the server at `url`; `reason` says what happened (refused, closed, timed out)."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def server_info(url: str, token: str | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's `/stats` (its provenance: family, real or synthetic, experience model; counters)."""
    try:
        r = httpx.get(f"{url.rstrip('/')}/stats", headers=_headers(token), timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ServerGone(url, f"{type(e).__name__}: {e}") from e
    if r.status_code != 200:
        raise RemoteEnvError(url, f"HTTP {r.status_code}", r.text[:300])
    return r.json()


class RemoteTextEnv(TextEnv):
    """`RemoteTextEnv(url, token=None)`: a session of the environment served at `url` (http://host:port).

    `reset(seed=, options={"task": Task})` and `step(action)` follow `dreamgym.env`'s contract; `info` comes back
    with its `Task`; `episode` holds the current episode's id, task, seed and provenance. The WebSocket opens on
    the first reset and `close()` ends the session."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 120.0,
                 connect_timeout_s: float = 10.0, info: dict[str, Any] | None = None):
        super().__init__()
        self.url = url.rstrip("/")
        self.token, self.timeout_s, self.connect_timeout_s = token, timeout_s, connect_timeout_s
        prov = (info or server_info(self.url, token, connect_timeout_s))["provenance"]
        self.provenance: dict[str, Any] = prov
        self.env_family = prov["env"]
        self.is_synthetic = bool(prov["synthetic"])
        self.episode: dict[str, Any] = {}
        self._ws: ClientConnection | None = None

    def _connect(self) -> ClientConnection:
        if self._ws is None:
            ws_url = "ws" + self.url[len("http"):] + "/ws" if self.url.startswith("http") else self.url + "/ws"
            try:
                self._ws = connect(ws_url, additional_headers=_headers(self.token), open_timeout=self.connect_timeout_s,
                                   max_size=None, proxy=None).__enter__()  # held for the session
            except (OSError, WebSocketException, TimeoutError) as e:
                raise ServerGone(self.url, f"cannot open a session: {type(e).__name__}: {e}") from e
        return self._ws

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one OpenEnv message on the session and return the answer's `data`."""
        ws = self._connect()
        try:
            try:
                ws.send(json.dumps(message))
            except ConnectionClosed:
                # A server refusing a session (CAPACITY_REACHED) answers and closes before our first message
                # arrives: its answer still waits to be read.
                answer = json.loads(ws.recv(timeout=1.0))
            else:
                answer = json.loads(ws.recv(timeout=self.timeout_s))
        except (OSError, WebSocketException, TimeoutError) as e:
            self._drop()
            raise ServerGone(self.url, f"{type(e).__name__}: {e}") from e
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            if data.get("code") in ("CAPACITY_REACHED", "SESSION_ERROR", "FACTORY_ERROR"):
                self._drop()  # the server closes such a session
            raise RemoteEnvError(self.url, str(data.get("code", "UNKNOWN")), str(data.get("message", "")))
        return answer.get("data") or {}

    def _drop(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass
            self._ws = None

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        data: dict[str, Any] = {"seed": seed}
        if options.get("task") is not None:
            data["task"] = options["task"].to_dict()
        out = self.request({"type": "reset", "data": data})["observation"]
        self.episode = out["episode"]
        return out["text"], info_from_json(out["info"])

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ans = self.request({"type": "step", "data": {"action": action}})
        out = ans["observation"]
        return (out["text"], float(ans.get("reward") or 0.0), bool(out["terminated"]), bool(out["truncated"]),
                info_from_json(out["info"]))

    def state(self) -> dict[str, Any]:
        """The session's episode as the server holds it (OpenEnv's state: episode_id, step_count, task, ...)."""
        return self.request({"type": "state"})

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
            except Exception:  # noqa: BLE001 - closing a session the server already dropped
                pass
            self._drop()
        super().close()


class RemoteBuffer:
    """The replay buffer a dream server owns, for other processes: `add` returns once the server has stored the
    transitions durably (the same as `ReplayBuffer.add`'s return: how many were new)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 60.0):
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        try:
            r = httpx.request(method, self.url + path, json=body, headers=_headers(self.token), timeout=self.timeout_s)
        except httpx.HTTPError as e:
            raise ServerGone(self.url, f"{type(e).__name__}: {e}") from e
        if r.status_code != 200:
            detail = r.json().get("message", r.text) if r.headers.get("content-type") == "application/json" else r.text
            raise RemoteEnvError(self.url, f"HTTP {r.status_code}", str(detail)[:500])
        return r.json()

    def add(self, transitions: Iterable[Transition], seed_data: bool = False) -> int:
        body = {"transitions": [t.to_dict() for t in transitions], "seed_data": seed_data}
        return int(self._call("POST", "/buffer/transitions", body)["added"])

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/buffer/stats")

    def __len__(self) -> int:
        return int(self.stats()["size"])
