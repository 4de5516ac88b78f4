"""`dreamgym serve-env`: any registered environment family, real or dreamed, served over OpenEnv's protocol.

Owns: `EnvServerConfig`, `EnvHost` (what one server serves: the family, its episodes' provenance, for a dream the
experience model and the replay buffer this process alone owns, the gatherer that batches concurrent sessions'
synthetic steps), `ServedEnv` (a `TextEnv` as an OpenEnv `Environment`), the app (`create_env_app`: OpenEnv's
`create_app` under `dreamgym.utils.serving`'s limits, with a bearer token, a WebSocket message limit and the buffer and
stats routes), `start_env_server` (a background thread, for tests and in-process use), `serve` (the
foreground server: the command's body, also for a dream whose experience model the caller built) and the command
(`parse_command`: `--config FILE key=value` as every command takes, its field options shortcuts for key=value).
Must not know: trainers, clients, how the experience model runs (it is used through `SyntheticEnv`), how requests
are bounded (`dreamgym.utils.serving`).

Protocol (OpenEnv's, so OpenEnv's `EnvClient`s and `openenv validate --url` work): `WS /ws` is a session -- one
environment per connection, isolated from the others, messages `{"type": "reset", "data": {seed, episode_id, task,
task_id}}`, `{"type": "step", "data": {"action": TEXT}}`, `{"type": "state"}`, `{"type": "close"}`. `POST /reset`,
`POST /step` and `GET /state` are OpenEnv's stateless forms (a fresh environment per request; a step with no episode
is taken on the one a reset with no fields starts, on a session too); `GET /schema` (the state's schema is
`EpisodeState`'s, as `/state` answers), `/metadata`, `/health`. A reset's unknown fields are dropped as OpenEnv drops
them, but counted (`/stats`), logged once per name and named in the answer's `info["ignored_reset_fields"]`, so a typo
is seen. HTTP errors have FastAPI's shape (`envserve.guard.error_body`: `detail` a list, validation errors at 422).
Added here: `GET /stats` (episodes, steps, batch sizes reached, buffer size) and, for a dream, `POST
/buffer/transitions` (other processes add transitions through the owner; answered once they are durable) and `GET
/buffer/stats`. OpenEnv's MCP routes are replaced: these environments have no MCP tools, and its HTTP form creates
sessions that no connection holds, so `POST /mcp` answers JSON-RPC (no tools; any other method an error naming /ws)
and every session is a `/ws` connection. A message OpenEnv's session loop cannot take (`envserve.guard`) is answered
with an error naming it, the session going on.

Limits: `max_sessions` WebSocket sessions (one more is refused with OpenEnv's CAPACITY_REACHED), sessions idle for
`idle_timeout_s` are closed (OpenEnv's reaper, checking every max(timeout/4, 5) s), HTTP bodies and WebSocket
messages over `max_body_mb` are refused (413, or an error message naming the limit while the session stays open),
plus every limit of `dreamgym.utils.serving`. With a token (`DREAMGYM_ENV_TOKEN` or `--token-file`) every request but
`/health` needs it as `Authorization: Bearer TOKEN` or as a Basic password, which is how clients that take no
headers send it: `http://token:TOKEN@host:port` (`presented_token`; 401; a WebSocket handshake without it is refused
with 403). Bound beyond loopback without a token, the command warns at start-up.

Durability: the dream's buffer lives in this process; every synthetic transition is appended (fsync'ed, see
`dreamgym.replay.buffer`) before its step is answered, and the answer's `info["buffered"]` says so. A server killed at
any point leaves a buffer that reopens with every answered transition in it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata, SchemaResponse
from pydantic import BaseModel, Field, ValidationError

from dreamgym import provenance

from dreamgym.utils import serving
from dreamgym.checks import env_family, family_choices, trajectory_file
from dreamgym.config import ConfigError, checked, ranged, validate_config
from dreamgym.env import TextEnv
from dreamgym.envs import family
from dreamgym.envserve.gather import StepGatherer
from dreamgym.envserve.guard import Guard, error_body
from dreamgym.envserve.protocol import EpisodeState, Provenance, TextAction, TextObservation, info_to_json
from dreamgym.utils.filecheck import output_path
from dreamgym.types import Task, Transition

log = logging.getLogger(__name__)

TOKEN_ENV = "DREAMGYM_ENV_TOKEN"
"""The environment variable a server reads its bearer token from (a command line would show it to `ps`)."""


RESET_FIELDS = ("seed", "episode_id", "task", "task_id")
"""The fields a reset takes; any other is dropped (OpenEnv's convention), counted and reported (see ServedEnv)."""


def _usable_checkpoint(path: str) -> None:
    """`dreamgym.experience.checkpoint.usable_checkpoint`, imported only when a config names a checkpoint: a server
    of real environments never loads the experience-model package."""
    from dreamgym.experience.checkpoint import usable_checkpoint

    usable_checkpoint(path)


@dataclass
class EnvServerConfig:
    """What `dreamgym serve-env` serves and the limits it keeps."""

    env: str = checked("dial", env_family, family_choices)
    """The environment family to serve."""
    split: str = "train"
    """The task split episodes draw from when a reset names no task."""
    dream: bool = False
    """Serve the synthetic environment (the experience model) instead of the real one."""
    em: str = checked("", _usable_checkpoint, "an experience-model checkpoint folder (from dreamgym train-em)")
    """dream: the experience-model checkpoint."""
    em_data: str = checked("", trajectory_file, "a trajectory file (.jsonl or .parquet)")
    """dream: offline real trajectories that seed the replay buffer (default: the model's training data)."""
    buffer: str = ""
    """dream: the replay buffer's folder, owned by this process (empty: in memory, gone when the server stops)."""
    device: str = ""
    """dream: where the experience model runs (cpu, cuda; empty: cuda when available)."""
    max_sessions: int = ranged(64, ge=1, le=4096)
    """Most WebSocket sessions open at once."""
    idle_timeout_s: float = ranged(600.0, gt=0)
    """A session without a message for this long is closed and its environment freed."""
    batch_wait_ms: float = ranged(5.0, ge=0, le=1000)
    """How long the first synthetic step of a batch waits for other sessions' steps to join it."""
    max_batch: int = ranged(64, ge=1)
    """Most synthetic steps in one experience-model batch."""
    max_body_mb: float = ranged(1.0, gt=0, le=1024)
    """Largest HTTP request body or WebSocket message, in MiB."""

    def __post_init__(self) -> None:
        validate_config(self)

    def limits(self) -> serving.Limits:
        # A connection per session, plus room for HTTP requests and health checks.
        return serving.Limits(max_body_bytes=int(self.max_body_mb * 2**20),
                              max_connections=max(256, self.max_sessions + 64))


class EnvHost:
    """What one server serves. Its environments' shared parts (experience model, replay buffer) are used only on
    the gatherer's thread; real environments that are not `thread_safe` step one at a time. A dream is given its
    `model` (an `ExperienceModel`) and `buffer`, or loads them from `cfg.em`."""

    def __init__(self, cfg: EnvServerConfig, *, model: Any = None, buffer: Any = None):
        # A dream's model comes from `cfg.em` unless the caller built one (an `ExperienceModel` on any LLM backend).
        if cfg.dream and model is None and not cfg.em:
            raise ConfigError("em", "a dream needs an experience-model checkpoint (from dreamgym train-em)")
        self.config = cfg
        self.family = family(cfg.env)
        # Every argument is checked before anything loads or binds: a bad split would answer every reset with an
        # error, a model or data of another family would serve another environment's dream.
        self._tasks: dict[str, Task] = self._split_tasks()
        try:
            if cfg.dream and model is None:
                provenance.require(provenance.of_em_checkpoint(cfg.em), family=cfg.env)
            if cfg.dream and cfg.em_data:
                provenance.check_trajectories(cfg.em_data, cfg.env)
            if cfg.dream and cfg.buffer:
                output_path(cfg.buffer, "folder")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.gatherer = StepGatherer(cfg.batch_wait_ms / 1000.0, cfg.max_batch, name=f"serve-env-{cfg.env}")
        self.model, self.buffer, self.batcher = model, buffer, None
        if cfg.dream:
            from dreamgym.dream.synthetic_env import SyntheticBatcher

            if self.model is None:
                self.model, self.buffer = load_dream(cfg)
            self.batcher = SyntheticBatcher()
        self.provenance = Provenance(server=uuid.uuid4().hex[:12], env=cfg.env, synthetic=cfg.dream, split=cfg.split,
                                     em=str(Path(cfg.em).resolve()) if cfg.em else None,
                                     buffer=str(Path(cfg.buffer).resolve()) if cfg.dream and cfg.buffer else None)
        self._executor = ThreadPoolExecutor(max_workers=min(64, cfg.max_sessions), thread_name_prefix="serve-env")
        self._one_at_a_time = threading.Lock()
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.ignored_fields: Counter[str] = Counter()

    def make_env(self) -> TextEnv:
        if not self.config.dream:
            return self.family.make_env(self.config.split)
        from dreamgym.dream.synthetic_env import SyntheticEnv

        # The family's step limit, as its real environments have (`EnvFamily.step_limit`): a client that wants
        # shorter episodes ends them itself.
        return SyntheticEnv(self.model, self.buffer, env=self.config.env, split=self.config.split,
                            max_steps=self.family.step_limit(), batcher=self.batcher)

    def _split_tasks(self) -> dict[str, Task]:
        """The tasks of the served split by id; a split the family does not have, or one without tasks, is a
        ConfigError."""
        try:
            tasks = self.family.tasks(self.config.split)
        except (ValueError, KeyError) as e:
            raise ConfigError("split", f"{self.config.split!r}: {e}") from None
        if not tasks:
            raise ConfigError("split", f"{self.config.split!r}: the {self.config.env} family has no tasks there")
        return {t.id: t for t in tasks}

    def task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            raise HTTPException(400, f"reset: task_id {task_id!r} is not a task of {self.config.env}/"
                                     f"{self.config.split}")
        return self._tasks[task_id]

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def ignored_reset_fields(self, names: list[str]) -> None:
        """Count a reset's dropped fields (`/stats`' `ignored_reset_fields`) and log each name the first time."""
        with self._lock:
            new = [n for n in names if n not in self.ignored_fields]
            self.ignored_fields.update(names)
            self.counts["resets_with_ignored_fields"] += 1
        if new:
            log.warning("serve-env: a reset named field(s) %s, which are not reset fields (%s); they were ignored "
                        "(counted in /stats, named in the answer's info)", ", ".join(new), ", ".join(RESET_FIELDS))

    def run(self, env: TextEnv, fn: Callable[[], Any]) -> Future:
        """Run `fn` (a reset, a close) where `env` may be used: the gatherer's thread for a dream, else a worker."""
        if self.config.dream:
            return self.gatherer.call(fn)
        if getattr(env, "thread_safe", True):
            return self._executor.submit(fn)

        def serial() -> Any:
            with self._one_at_a_time:
                return fn()
        return self._executor.submit(serial)

    def step(self, env: TextEnv, action: str) -> Future:
        if self.config.dream:
            return self.gatherer.submit(env, action)
        return self.run(env, lambda: env.step(action))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self.counts)
            ignored = dict(self.ignored_fields)
        out: dict[str, Any] = {"provenance": self.provenance.to_dict(), **counts, "ignored_reset_fields": ignored,
                               "gatherer": self.gatherer.stats}
        if self.batcher is not None:
            out["experience_model_batches"] = dict(self.batcher.stats)
        return out

    def close(self) -> None:
        self.gatherer.stop()
        self._executor.shutdown(wait=False)
        if self.buffer is not None and hasattr(self.buffer, "close"):
            self.buffer.close()


def load_dream(cfg: EnvServerConfig) -> tuple[Any, Any]:
    """The experience model and the replay buffer it retrieves from (seeded as in training, at `cfg.buffer`)."""
    from dreamgym.experience import ExperienceModel, checkpoint_buffer

    buffer = checkpoint_buffer(cfg.em, data=cfg.em_data or None, path=cfg.buffer or None)
    model = ExperienceModel.load(cfg.em, buffer=buffer, device=cfg.device or None, batch_size=cfg.max_batch)
    return model, buffer


class ServedEnv(Environment[TextAction, TextObservation, EpisodeState]):
    """One session's environment: a fresh `TextEnv` of the host's family, its episode and what it is."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, host: EnvHost):
        super().__init__()
        self.host = host
        self.env: TextEnv | None = host.make_env()
        self.episode: dict[str, Any] = {}
        self.steps = 0
        self._ended = (False, False)
        host.count("environments")

    # OpenEnv calls the async forms when a class defines them; the sync ones serve direct (in-process) use.
    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task: Any = None,
                          task_id: str | None = None, **kwargs: Any) -> TextObservation:
        return await asyncio.wrap_future(self._reset_future(seed, episode_id, task, task_id, kwargs))

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: Any = None,
              task_id: str | None = None, **kwargs: Any) -> TextObservation:
        return self._reset_future(seed, episode_id, task, task_id, kwargs).result()

    def _reset_future(self, seed: Any, episode_id: str | None, task: Any, task_id: str | None,
                      extra: dict[str, Any]) -> Future:
        # OpenEnv passes a reset's unknown fields on and drops what an environment does not take; dropped silently,
        # a typo (`sead`) would play a random episode, so they are counted, logged and named in the answer.
        ignored = sorted(extra)
        if ignored:
            self.host.ignored_reset_fields(ignored)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise HTTPException(400, f"reset: seed must be an integer, got {seed!r}")
        chosen = self._task(task, task_id)
        options = {"task": chosen} if chosen is not None else {}
        env = self._open()

        def run() -> TextObservation:
            obs, info = env.reset(seed=seed, options=options)
            self.steps, self._ended = 0, (False, False)
            self.episode = {"episode_id": episode_id or uuid.uuid4().hex, "task": info["task"].to_dict(),
                            "seed": seed, "provenance": self.host.provenance.to_dict()}
            self.host.count("episodes")
            if ignored:
                info = {**info, "ignored_reset_fields": ignored}
            return TextObservation(text=obs, info=info_to_json(info), episode=self.episode)
        return self.host.run(env, run)

    def _open(self) -> TextEnv:
        if self.env is None:
            raise HTTPException(409, "this session's environment is closed")
        return self.env

    def _task(self, task: Any, task_id: str | None) -> Task | None:
        if task is not None and task_id is not None:
            raise HTTPException(400, "reset: give task or task_id, not both")
        if task_id is not None:
            return self.host.task(str(task_id))
        if task is None:
            return None
        try:
            t = Task.from_dict(task) if isinstance(task, dict) else None
        except (KeyError, TypeError) as e:
            raise HTTPException(400, f"reset: task is not a task record: {e}") from e
        if t is None:
            raise HTTPException(400, f"reset: task must be a task record (an object), got {type(task).__name__}")
        if t.env != self.host.config.env:
            raise HTTPException(400, f"reset: task {t.id!r} is a {t.env!r} task; this server serves "
                                     f"{self.host.config.env!r}")
        return t

    # A step with no episode is taken on a fresh one, as a reset with no fields starts it: OpenEnv's stateless HTTP
    # /step (a fresh environment per request) and a session's first message alike. Its answer's `episode` names it.
    async def step_async(self, action: TextAction, timeout_s: float | None = None,
                         **kwargs: Any) -> TextObservation:
        if not self.episode:
            await self.reset_async()
        fut = self.host.step(self._open(), action.action)
        return self._observation(*(await asyncio.wrap_future(fut)))

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        if not self.episode:
            self.reset()
        return self._observation(*self.host.step(self._open(), action.action).result())

    def _observation(self, obs: str, reward: float, terminated: bool, truncated: bool,
                     info: dict[str, Any]) -> TextObservation:
        if not info.get("episode_over"):
            self.steps += 1
            self.host.count("steps")
        self._ended = (terminated, truncated)
        return TextObservation(text=obs, reward=float(reward), done=terminated or truncated, terminated=terminated,
                               truncated=truncated, info=info_to_json(info), episode=self.episode)

    @property
    def state(self) -> EpisodeState:
        return EpisodeState(episode_id=self.episode.get("episode_id"), step_count=self.steps,
                            task=self.episode.get("task"), seed=self.episode.get("seed"),
                            terminated=self._ended[0], truncated=self._ended[1],
                            provenance=self.host.provenance.to_dict())

    def get_metadata(self) -> EnvironmentMetadata:
        kind = "synthetic (experience model)" if self.host.config.dream else "real"
        return EnvironmentMetadata(name=f"dreamgym/{self.host.config.env}",
                                   description=f"DreamGym's {self.host.config.env} environment, {kind}; text actions "
                                               "and observations", version="1")

    def close(self) -> None:
        if self.env is None:
            return
        env, self.env = self.env, None
        self.host.count("environments", -1)
        try:
            # A synthetic environment's close touches only its own real environments, not the shared model.
            if self.host.config.dream or getattr(env, "thread_safe", True):
                env.close()
            else:
                self.host.run(env, env.close).result(timeout=30)
        except Exception:  # noqa: BLE001 - a failing close must not take the session's cleanup down with it
            log.exception("closing a served environment failed")


class _TransitionsBody(BaseModel):
    transitions: list[dict[str, Any]] = Field(description="transition records (dreamgym.types.Transition.to_dict)")
    seed_data: bool = Field(default=False, description="offline real seed data (evicted last)")


def create_env_app(host: EnvHost, *, token: str | None = None, limits: serving.Limits | None = None) -> FastAPI:
    """The server's app: OpenEnv's routes for `host`'s environments, the limits, the token, stats and buffer routes."""
    cfg = host.config
    limits = limits or cfg.limits()
    app = create_app(functools.partial(ServedEnv, host), TextAction, TextObservation, env_name=cfg.env,
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=cfg.max_sessions,
                                                          session_timeout=cfg.idle_timeout_s))
    # OpenEnv's MCP routes (POST /mcp, WS /mcp) serve MCP tools, which these environments have none of; its HTTP
    # form also creates sessions no connection holds, which would take the session slots until the idle timeout.
    # Sessions are what this server documents: WebSocket connections at /ws.
    # OpenEnv's /schema and HTTP /state answer with its base `State` (episode_id, step_count): replaced below by
    # ones that carry what `ServedEnv.state` returns (task, seed, provenance, how the episode ended).
    app.router.routes = [r for r in app.router.routes
                         if not (isinstance(r, (APIRoute, APIWebSocketRoute)) and r.path in ("/mcp", "/schema"))
                         and not (isinstance(r, APIRoute) and r.path == "/state")]
    serving.install(app, limits, error_body)
    app.state.host = host

    @app.post("/mcp")
    async def mcp(request: Request) -> dict[str, Any]:
        """MCP's JSON-RPC endpoint, as OpenEnv's tools probe it: no tools, and no sessions (those are /ws)."""
        try:
            call = JsonRpcRequest.model_validate_json(await request.body())
        except ValidationError as e:
            problem = serving.validation_message(e.errors(), drop=0)
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_REQUEST,
                                                  f"not a JSON-RPC 2.0 request: {problem}").model_dump()
        if call.method == "tools/list":
            return JsonRpcResponse.success({"tools": []}, request_id=call.id).model_dump()
        return JsonRpcResponse.error_response(JsonRpcErrorCode.METHOD_NOT_FOUND, (
            f"{call.method}: this server has no MCP tools; an environment session is a WebSocket connection at /ws "
            "(see GET /schema for its messages)"), request_id=call.id).model_dump()

    @app.get("/schema", response_model=SchemaResponse, tags=["Schema"])
    def schema() -> SchemaResponse:
        return SchemaResponse(action=TextAction.model_json_schema(), observation=TextObservation.model_json_schema(),
                              state=EpisodeState.model_json_schema())

    @app.get("/state", response_model=EpisodeState, tags=["State Management"])
    def fresh_state() -> EpisodeState:
        """OpenEnv's stateless form: the state of a fresh environment (a session's is its `state` message)."""
        env = ServedEnv(host)
        try:
            return env.state
        finally:
            env.close()

    @app.exception_handler(HTTPException)
    async def _http(request: Request, e: HTTPException) -> JSONResponse:
        # OpenEnv answers an invalid action with pydantic's error list as the detail: kept as the list, and said
        # in one line as the message.
        if isinstance(e.detail, list):
            body = error_body(e.status_code, serving.validation_message(e.detail, drop=0),
                              jsonable_encoder(e.detail))
        else:
            body = error_body(e.status_code, str(e.detail))
        return JSONResponse(body, status_code=e.status_code, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        # FastAPI's (and OpenEnv's) status and list for a request that does not validate.
        return JSONResponse(error_body(422, serving.validation_message(e.errors()), jsonable_encoder(e.errors())),
                            status_code=422)

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return host.stats()

    if host.buffer is not None:
        buffer = host.buffer

        @app.post("/buffer/transitions")
        async def add_transitions(body: _TransitionsBody) -> dict[str, Any]:
            trs = []
            for i, d in enumerate(body.transitions):
                try:
                    trs.append(Transition.from_dict(d))
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    raise HTTPException(400, f"transitions[{i}]: not a transition record ({type(e).__name__}: "
                                             f"{e})") from e
            added = await asyncio.wrap_future(host.gatherer.call(lambda: buffer.add(trs, seed_data=body.seed_data)))
            host.count("buffer_added_remotely", int(added))
            return {"added": int(added), "size": await asyncio.wrap_future(host.gatherer.call(lambda: len(buffer)))}

        @app.get("/buffer/stats")
        async def buffer_stats() -> dict[str, Any]:
            return await asyncio.wrap_future(host.gatherer.call(buffer.stats))

    app.add_middleware(Guard, token=token, max_message_bytes=limits.max_body_bytes)
    return app


def _make_server(app: FastAPI, limits: serving.Limits, **kwargs: Any) -> Any:
    srv = serving.make_server(app, **kwargs)
    srv.config.ws_max_size = max(16 << 20, 4 * limits.max_body_bytes)
    return srv


class EnvServerHandle:
    """A server running on a background thread of this process; `url` is its root (http://host:port)."""

    def __init__(self, running: serving.RunningServer, host: EnvHost):
        self._running, self.host = running, host
        self.url = running.base

    def stop(self) -> None:
        self._running.stop()
        self.host.close()

    def __enter__(self) -> EnvServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_env_server(cfg: EnvServerConfig, *, model: Any = None, buffer: Any = None, token: str | None = None,
                     host: str = "127.0.0.1", port: int = 0) -> EnvServerHandle:
    """Serve `cfg` from a background thread (`port=0` picks a free one); returns once it accepts requests. A dream
    may be given its experience model and buffer instead of loading them from `cfg.em`."""
    env_host = EnvHost(cfg, model=model, buffer=buffer)
    try:
        app = create_env_app(env_host, token=token)
        running = serving.start(_make_server(app, cfg.limits()), host, port)
    except BaseException:
        env_host.close()
        raise
    return EnvServerHandle(running, env_host)


CONFIG_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "env": ("--env", {"help": "the environment family (env=)"}),
    "split": ("--split", {"help": "task split of resets that name no task (split=)"}),
    "dream": ("--dream", {"action": "store_const", "const": True, "help": "serve the synthetic environment (needs "
                                                                          "--em; dream=true)"}),
    "em": ("--em", {"help": "experience-model checkpoint folder, from dreamgym train-em (em=)"}),
    "em_data": ("--em-data", {"help": "trajectories that seed the buffer; default: the EM's data (em_data=)"}),
    "buffer": ("--buffer", {"help": "replay-buffer folder this server owns; default: in memory (buffer=)"}),
    "device": ("--device", {"help": "experience model device: cpu, cuda (device=)"}),
    "max_sessions": ("--max-sessions", {"type": int, "help": "max_sessions="}),
    "idle_timeout_s": ("--idle-timeout-s", {"type": float, "help": "idle_timeout_s="}),
    "batch_wait_ms": ("--batch-wait-ms", {"type": float, "help": "batch_wait_ms="}),
    "max_batch": ("--max-batch", {"type": int, "help": "max_batch="}),
    "max_body_mb": ("--max-body-mb", {"type": float, "help": "max_body_mb="}),
}
"""The options of `dreamgym serve-env` that set a config field (field -> option, argparse settings): shortcuts for
`key=value`, applied after the config file and the overrides and checked by the same validation pass."""


def parse_command(argv: list[str] | None = None) -> tuple[EnvServerConfig, argparse.Namespace]:
    """`dreamgym serve-env`'s command line: the config it serves (bad config raises ConfigError) and the process
    options (host, port, token file, threads). A usage error exits with code 2."""
    from dreamgym.config import CommandParser, at_least, describe, load_config

    parser = CommandParser(prog="dreamgym serve-env", description=(
        "Serve an environment family over OpenEnv's protocol (WebSocket sessions at /ws, /reset, /step, /state,\n"
        f"/schema). A bearer token is read from ${TOKEN_ENV} or --token-file. What it serves: the config fields\n"
        "from --config FILE, then key=value overrides, then the options below that name a field."),
                           epilog="config fields (key=value):\n" + describe(EnvServerConfig),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="YAML file with EnvServerConfig fields")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. dream=true em=runs/em max_batch=1")
    for name, (option, kw) in CONFIG_OPTIONS.items():  # each sets its field (`env`, ...) only when given
        parser.add_argument(option, dest=name, default=None, **kw)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=at_least(0, 65535), default=8100, help="port; 0 picks a free one (printed)")
    parser.add_argument("--token-file", default="", help="a file holding the bearer token")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads (dream)")
    args = parser.parse_intermixed_args(argv)
    flags = {name: value for name in CONFIG_OPTIONS if (value := vars(args)[name]) is not None}
    return load_config(EnvServerConfig, args.config, args.overrides, flags), args


def main(argv: list[str] | None = None) -> int:
    from dreamgym.config import fail

    try:
        cfg, args = parse_command(argv)
    except ConfigError as e:
        return fail("serve-env", e)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    token = os.environ.get(TOKEN_ENV) or None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            return fail("serve-env", f"--token-file {args.token_file}: {e.strerror or e}")
        if not token:
            return fail("serve-env", f"--token-file {args.token_file} is empty")
    if args.threads and cfg.dream:
        import torch

        torch.set_num_threads(args.threads)
    try:
        env_host = EnvHost(cfg)
    except ConfigError as e:
        return fail("serve-env", e)
    except Exception as e:  # noqa: BLE001 - a checkpoint or buffer that cannot be opened: one line, exit 2
        return fail("serve-env", f"{type(e).__name__}: {e}")
    try:
        serve(env_host, token=token, host=args.host, port=args.port)
    except OSError as e:
        return fail("serve-env", str(e))
    return 0


def serve(env_host: EnvHost, *, token: str | None = None, host: str = "127.0.0.1", port: int = 8100,
          log_level: str = "info") -> None:
    """Serve `env_host` in the foreground until interrupted, then close it. Prints the URL it serves (`port=0`
    picks a free one) once it listens. Raises OSError when the address cannot be bound. The command's body, and
    the way to serve a dream whose experience model was built in this process (`EnvHost(cfg, model=, buffer=)`)
    as its own process."""
    cfg = env_host.config
    limits = cfg.limits()
    app = create_env_app(env_host, token=token, limits=limits)
    try:
        sock = serving.bind(host, port, limits.backlog)
    except OSError as e:
        env_host.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    bound_host, bound_port = sock.getsockname()[:2]
    serving.warn_if_open("serve-env", bound_host, token, TOKEN_ENV, "play its environments"
                         + (" and add transitions to its dream's replay buffer" if cfg.dream else ""))
    kind = f"synthetic, experience model {cfg.em or 'given'}" if cfg.dream else "real"
    print(f"serving {cfg.env} ({kind}) at http://{bound_host}:{bound_port} (OpenEnv: "
          f"ws://{bound_host}:{bound_port}/ws; Ctrl-C stops)", flush=True)
    try:
        serving.run_foreground(_make_server(app, limits, log_level=log_level), sock)
    finally:
        env_host.close()
