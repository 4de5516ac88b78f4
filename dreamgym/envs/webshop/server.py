"""`dreamgym webshop serve`: the WebShop pages over HTTP on loopback, for people, browsers and HTTP agents.

Owns: the HTTP routes, the session table (one `WebShopEnv` per session id, isolated, with its own lock),
and the `webshop` command line (`cli_main`).
Must not know: models, trainers; the pages come unchanged from the environment (`info["raw_obs"]`); how requests
are bounded (that is `dreamgym.utils.serving`, shared with `dreamgym serve-model`).

Routes (all sessions are independent; ids are random 16-hex strings):
    GET  /                         start a session (?split=train|test|valid, ?task=<index>, ?seed=<n>) -> 303 to it
    GET  /s/<id>/                  the current page (HTML)
    GET  /s/<id>/act?a=<action>    take an action (`search[...]` / `click[...]`), answer the new page (HTML)
    GET  /s/<id>/act?q=<words>     the search form: same as a=search[<words>]
    GET  /s/<id>/state             JSON: abstract_state, text, reward, terminated, truncated, won, actions
    GET  /healthz                  "ok"
    POST /reset   {"split", "task", "seed"}  -> JSON state with "session"
    POST /s/<id>/step  {"action": "..."}     -> JSON state
`task` is an index taken modulo the split's number of tasks (>= 0); `seed` is >= 0 and < 2**64.
Page links are relative (`act?a=...`), so the HTML the environment renders works as served.

Errors, on every route (HTML pages included), are JSON `{"error": "<what is wrong>"}` with a 4xx/5xx status:
404 unknown session or path, 405 wrong method, 400 invalid query value or body, 413 body over 1 MiB, 431 head over
32 KiB, 408 body or head too slow, 503 past 256 open connections (see `dreamgym.utils.serving.Limits`).
Pages are rendered on a thread pool (40 threads, anyio's default), so slow steps do not stall other sessions;
the listen backlog queues 1024 connections not yet accepted.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dreamgym.utils import serving
from dreamgym.envs.webshop.env import WebShopEnv
from dreamgym.envs.webshop.pages import html_to_text

MAX_SESSIONS = 256
LIMITS = serving.Limits(max_body_bytes=1 << 20)
_NO_STORE = {"Cache-Control": "no-store"}
Split = Literal["train", "test", "valid"]


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": message}


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


class Shop:
    """The session table; env settings are shared by all sessions."""

    def __init__(self, env_kwargs: dict[str, Any]):
        self.env_kwargs = dict(env_kwargs)
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        self.table_lock = threading.Lock()
        # Build the catalog once up front so the first visitor does not wait for it (and bad settings fail here).
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

    def session(self, sid: str) -> _Session:
        with self.table_lock:
            sess = self.sessions.get(sid)
            if sess is not None:
                self.sessions.move_to_end(sid)
        if sess is None:
            raise _NoSession(sid)
        return sess


class _NoSession(Exception):
    def __init__(self, sid: str):
        super().__init__(f"no such session {sid[:40]!r}; GET / or POST /reset starts one")


class ResetBody(BaseModel):
    """POST /reset; the same fields as the query of GET /. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    split: Split | None = None
    task: int | None = Field(None, ge=0)
    seed: int | None = Field(None, ge=0, lt=2**64)


class StepBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: str


async def _json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object, whatever its Content-Type says (`curl -d` sends a form type); empty is {}."""
    raw = await request.body()
    try:
        obj = json.loads(raw.decode("utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HTTPException(400, f"the body must be a JSON object ({e})") from e
    except RecursionError as e:  # the body limit bounds the depth, but deeper than Python's stack still raises
        raise HTTPException(400, "the body's JSON is nested too deeply") from e
    if not isinstance(obj, dict):
        raise HTTPException(400, f"the body must be a JSON object, not {type(obj).__name__}")
    return obj


_JSONObject = Annotated[dict[str, Any], Depends(_json_object)]
_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], body: dict[str, Any]) -> _M:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise HTTPException(400, serving.validation_message(e.errors(), drop=0)) from e


def create_app(limits: serving.Limits = LIMITS, **env_kwargs: Any) -> FastAPI:
    """The shop as an app; `env_kwargs` go to every session's `WebShopEnv` (`split` is the default split)."""
    shop = Shop(env_kwargs)
    app = FastAPI(title="DreamGym WebShop", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.shop = shop
    serving.install(app, limits, error_body)

    @app.exception_handler(_NoSession)
    async def _missing(_: Any, e: _NoSession) -> JSONResponse:
        return JSONResponse(error_body(404, str(e)), status_code=404)

    def page(sess: _Session) -> Response:
        with sess.lock:
            return HTMLResponse(sess.last["html"], headers=_NO_STORE)

    def state(sid: str, sess: _Session) -> Response:
        with sess.lock:
            return JSONResponse(sess.state_json(sid), headers=_NO_STORE)

    def step(sess: _Session, action: str) -> None:
        with sess.lock:
            sess.record(*sess.env.step(action))

    # Plain `def` routes: FastAPI runs them on its thread pool, since stepping an env is blocking work.
    @app.get("/healthz")
    def healthz() -> Response:
        return PlainTextResponse("ok", headers=_NO_STORE)

    @app.get("/")
    def start(split: Split | None = None, task: int | None = Query(None, ge=0),
              seed: int | None = Query(None, ge=0, lt=2**64)) -> Response:
        sid, _ = shop.new_session(split, task, seed)
        return RedirectResponse(f"/s/{sid}/", status_code=303, headers=_NO_STORE)

    @app.get("/s/{sid}/")
    def current(sid: str) -> Response:
        return page(shop.session(sid))

    @app.get("/s/{sid}/act")
    def act(sid: str, a: str | None = None, q: str = "") -> Response:
        sess = shop.session(sid)
        step(sess, a if a is not None else f"search[{q}]")
        return page(sess)

    @app.get("/s/{sid}/state")
    def get_state(sid: str) -> Response:
        return state(sid, shop.session(sid))

    @app.post("/reset")
    def reset(body: _JSONObject) -> Response:
        params = _validate(ResetBody, body)
        sid, sess = shop.new_session(params.split, params.task, params.seed)
        return state(sid, sess)

    @app.post("/s/{sid}/step")
    def post_step(sid: str, body: _JSONObject) -> Response:
        sess = shop.session(sid)
        step(sess, _validate(StepBody, body).action)
        return state(sid, sess)

    return app


def cli_main(argv: list[str] | None = None) -> int:
    from dreamgym.config import CommandParser, at_least, fail

    parser = CommandParser(prog="dreamgym webshop", description="WebShop tools")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the shop on loopback for a browser or an HTTP agent")
    s.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    s.add_argument("--port", type=at_least(0, 65535), default=3000, help="port; 0 picks a free one (printed)")
    s.add_argument("--split", default="train", choices=("train", "test", "valid"))
    s.add_argument("--n-products", type=at_least(1), default=2000)
    s.add_argument("--seed", type=at_least(0), default=0, help="catalog seed")
    s.add_argument("--official-dir", default=None, help="directory with the official WebShop JSON files")
    s.add_argument("--max-steps", type=at_least(1), default=15)
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"split": args.split, "max_steps": args.max_steps}
    if args.official_dir:
        kwargs["official_dir"] = args.official_dir
    else:
        kwargs.update(n_products=args.n_products, seed=args.seed)
    try:
        app = create_app(**kwargs)
        sock = serving.bind(args.host, args.port, LIMITS.backlog)
    except (OSError, ValueError) as e:
        return fail("webshop serve", e)
    host, port = sock.getsockname()[:2]
    print(f"WebShop serving on http://{host}:{port}/ (Ctrl-C to stop)", flush=True)
    serving.run_foreground(serving.make_server(app), sock)
    return 0
