"""`dreamgym webshop serve`: the WebShop pages over HTTP on loopback, for people, browsers and HTTP agents.

Owns: the HTTP routes, the session table (one `WebShopEnv` per session id, isolated, with its own lock),
and the `webshop` command line (`cli_main`).
Must not know: models, trainers; the pages come unchanged from the environment (`info["raw_obs"]`).

Routes (all sessions are independent; ids are random 16-hex strings):
    GET  /                         start a session (?split=train|test, ?task=<index>, ?seed=<n>) -> 303 to it
    GET  /s/<id>/                  the current page (HTML)
    GET  /s/<id>/act?a=<action>    take an action (`search[...]` / `click[...]`), answer the new page (HTML)
    GET  /s/<id>/act?q=<words>     the search form: same as a=search[<words>]
    GET  /s/<id>/state             JSON: abstract_state, text, reward, terminated, truncated, won, actions
    POST /reset   {"split", "task", "seed"}  -> JSON state with "session"
    POST /s/<id>/step  {"action": "..."}     -> JSON state
Page links are relative (`act?a=...`), so the HTML the environment renders works as served.
Standard library `http.server` only: a loopback tool needs no web framework and starts in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dreamgym.envs.webshop.env import WebShopEnv
from dreamgym.envs.webshop.pages import html_to_text

MAX_SESSIONS = 256
MAX_BODY = 1 << 20
_SESSION_PATH = re.compile(r"^/s/([0-9a-f]{16})/(act|state|step)?$")


class _Session:
    def __init__(self, env: WebShopEnv):
        self.env = env
        self.lock = threading.Lock()
        self.last: dict[str, Any] = {}

    def record(self, obs: str, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]) -> None:
        self.last = {"html": info["raw_obs"], "reward": reward, "terminated": terminated, "truncated": truncated,
                     "info": info}

    def state_json(self, sid: str) -> dict[str, Any]:
        info = self.last["info"]
        return {"session": sid, "task_id": info["task"].id, "instruction": info["task"].instruction,
                "abstract_state": info["abstract_state"], "text": html_to_text(info["raw_obs"]),
                "reward": self.last["reward"], "terminated": self.last["terminated"],
                "truncated": self.last["truncated"], "won": info["won"],
                "admissible_actions": info["admissible_actions"], "notice": info.get("notice", ""),
                "reward_parts": info.get("reward_parts")}


class WebShopServer(ThreadingHTTPServer):
    """A threading HTTP server holding the session table; env settings are shared by all sessions."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], env_kwargs: dict[str, Any]):
        super().__init__(address, _Handler)
        self.env_kwargs = dict(env_kwargs)
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        self.table_lock = threading.Lock()
        # Build the catalog once up front so the first visitor does not wait for it.
        WebShopEnv(split=self.env_kwargs.get("split", "train"), **self._catalog_kwargs()).close()

    def _catalog_kwargs(self) -> dict[str, Any]:
        return {k: v for k, v in self.env_kwargs.items() if k != "split"}

    def new_session(self, split: str | None, task: int | None, seed: int | None) -> tuple[str, _Session]:
        env = WebShopEnv(split=split or self.env_kwargs.get("split", "train"), obs_mode="html",
                         **self._catalog_kwargs())
        options = {"task": env.tasks[task % len(env.tasks)]} if task is not None and env.tasks else None
        obs, info = env.reset(seed=seed if seed is not None else secrets.randbelow(2**31), options=options)
        sess = _Session(env)
        sess.record(obs, 0.0, False, False, info)
        sid = secrets.token_hex(8)
        with self.table_lock:
            self.sessions[sid] = sess
            while len(self.sessions) > MAX_SESSIONS:
                _, old = self.sessions.popitem(last=False)
                old.env.close()
        return sid, sess

    def session(self, sid: str) -> _Session | None:
        with self.table_lock:
            sess = self.sessions.get(sid)
            if sess is not None:
                self.sessions.move_to_end(sid)
            return sess


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class _Handler(BaseHTTPRequestHandler):
    server: WebShopServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet by default; the CLI prints one line per session instead

    # -- helpers -------------------------------------------------------------------------------------------
    def _send(self, code: int, body: str, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj), "application/json")

    def _body(self) -> dict[str, Any] | None:
        n = _int(self.headers.get("Content-Length")) or 0
        if n < 0 or n > MAX_BODY:
            return None
        raw = self.rfile.read(n) if n else b"{}"
        try:
            obj = json.loads(raw.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return obj if isinstance(obj, dict) else None

    def _step(self, sess: _Session, action: str) -> None:
        with sess.lock:
            sess.record(*sess.env.step(action))

    # -- routes --------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if url.path == "/healthz":
            return self._send(200, "ok", "text/plain")
        if url.path == "/":
            sid, _ = self.server.new_session(q.get("split"), _int(q.get("task")), _int(q.get("seed")))
            return self._send(303, "", headers={"Location": f"/s/{sid}/"})
        m = _SESSION_PATH.match(url.path)
        sess = self.server.session(m.group(1)) if m else None
        if sess is None or m is None:
            return self._send(404, '<p>No such session. <a href="/">Start shopping</a>.</p>')
        route = m.group(2)
        if route == "act":
            action = q["a"] if "a" in q else f"search[{q.get('q', '')}]"
            self._step(sess, action)
        if route == "state":
            with sess.lock:
                return self._json(200, sess.state_json(m.group(1)))
        with sess.lock:
            return self._send(200, sess.last["html"])

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        body = self._body()
        if body is None:
            return self._json(400, {"error": "the body must be a JSON object"})
        if url.path == "/reset":
            split = body.get("split")
            if split is not None and split not in ("train", "test", "valid"):
                return self._json(400, {"error": f"unknown split {split!r}"})
            try:
                sid, sess = self.server.new_session(split, _int(body.get("task")), _int(body.get("seed")))
            except ValueError as e:
                return self._json(400, {"error": str(e)})
            with sess.lock:
                return self._json(200, sess.state_json(sid))
        m = _SESSION_PATH.match(url.path)
        step_sess = self.server.session(m.group(1)) if m and m.group(2) == "step" else None
        if step_sess is None or m is None:
            return self._json(404, {"error": "no such session"})
        sess = step_sess
        action = body.get("action")
        if not isinstance(action, str):
            return self._json(400, {"error": "'action' must be a string"})
        self._step(sess, action)
        with sess.lock:
            return self._json(200, sess.state_json(m.group(1)))


def make_server(host: str = "127.0.0.1", port: int = 3000, **env_kwargs: Any) -> WebShopServer:
    """A ready server (not yet serving); port 0 picks a free port (`server.server_address[1]`)."""
    return WebShopServer((host, port), env_kwargs)


def cli_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dreamgym webshop", description="WebShop tools")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the shop on loopback for a browser or an HTTP agent")
    s.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    s.add_argument("--port", type=int, default=3000, help="port; 0 picks a free one (printed)")
    s.add_argument("--split", default="train", choices=("train", "test", "valid"))
    s.add_argument("--n-products", type=int, default=2000)
    s.add_argument("--seed", type=int, default=0, help="catalog seed")
    s.add_argument("--official-dir", default=None, help="directory with the official WebShop JSON files")
    s.add_argument("--max-steps", type=int, default=15)
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"split": args.split, "max_steps": args.max_steps}
    if args.official_dir:
        kwargs["official_dir"] = args.official_dir
    else:
        kwargs.update(n_products=args.n_products, seed=args.seed)
    try:
        server = make_server(args.host, args.port, **kwargs)
    except (OSError, ValueError, FileNotFoundError) as e:
        print(f"dreamgym webshop serve: {e}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host
    print(f"WebShop serving on http://{host}:{port}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
