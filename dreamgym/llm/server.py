"""`dreamgym serve-model`: any local model of ours as an OpenAI-compatible chat-completions endpoint.

Owns: the HTTP surface (`POST /v1/chat/completions`, `GET /v1/models`, `GET /health`), the request schema and
OpenAI-style errors, micro-batching of concurrent requests into one `HFBackend` call, and starting a server
in-process on a loopback port (`start_server`) for tests and for rollout workers in the same process.
Must not know: environments, trainers; how generation works (that is `HFBackend`); how requests are bounded
(that is `dreamgym.serving`, shared with `dreamgym webshop serve`).

Every error is OpenAI's JSON shape `{"error": {"message", "type", "code", "param"}}` with a 4xx/5xx status:
400 invalid fields or malformed JSON, 404 unknown model or path, 405 wrong method, 413 body over `LIMITS`
(4 MiB by default, `--max-body-mb`), 431 head over 32 KiB, 408 body or head too slow, 503 past 256 open
connections, 500 a failed generation. The listen backlog queues 1024 connections not yet accepted.

Extensions over the OpenAI schema, all optional for clients: each choice carries `token_ids` (the sampled ids)
and `stop_reason` (the stop string that ended it, null on eos/length), the response carries `prompt_token_ids`
(as vLLM's `return_token_ids` does). Choice `j` of a request with seed `s` samples with seed `row_seed(s, j)`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import secrets
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dreamgym import serving
from dreamgym.llm.base import Completion, SamplingParams, row_seed

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256
# A long chat in JSON is tens of KiB; 4 MiB leaves room for non-ASCII escapes while keeping a rejected body cheap.
LIMITS = serving.Limits(max_body_bytes=4 << 20)


def error_body(status: int, message: str, kind: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error document."""
    kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatCompletionBody(BaseModel):
    """The request fields we honour; unknown fields (e.g. `return_token_ids`) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    n: int = Field(1, ge=1, le=128)
    temperature: float = Field(1.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    stream: bool = False


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code


@dataclass
class _Job:
    prompt: list[int]
    params: SamplingParams
    seeds: list[int]
    future: Future


class MicroBatcher:
    """Collects requests arriving within `wait_s` of each other (up to the backend's batch size in rows) and
    decodes them in one `generate_from_ids` call, so concurrent clients share batched decoding."""

    def __init__(self, backend: Any, wait_s: float = 0.005):
        self.backend = backend
        self.wait_s = wait_s
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="serve-model-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], params: SamplingParams, seeds: list[int]) -> Future:
        fut: Future = Future()
        self._queue.put(_Job(prompt, params, seeds, fut))
        return fut

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, rows = [job], len(job.seeds)
            deadline = time.monotonic() + self.wait_s
            while rows < self.backend.batch_size:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                jobs.append(nxt)
                rows += len(nxt.seeds)
            self._run(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        prompts = [j.prompt for j in jobs for _ in j.seeds]
        params = [j.params for j in jobs for _ in j.seeds]
        seeds = [s for j in jobs for s in j.seeds]
        try:
            outs = self.backend.generate_from_ids(prompts, params, seeds=seeds)
        except Exception as e:  # noqa: BLE001 - a failed batch is reported to its requests, the server lives on
            log.exception("generation failed for %d requests", len(jobs))
            for j in jobs:
                j.future.set_exception(e)
            return
        k = 0
        for j in jobs:
            j.future.set_result(outs[k:k + len(j.seeds)])
            k += len(j.seeds)


def create_app(backend: Any, model_name: str, *, batch_wait_s: float = 0.005,
               limits: serving.Limits = LIMITS) -> FastAPI:
    """The FastAPI app serving `backend` (an `HFBackend`) under the model id `model_name`."""
    app = FastAPI(title="DreamGym model server")
    batcher = MicroBatcher(backend, wait_s=batch_wait_s)
    app.state.batcher = batcher
    serving.install(app, limits, error_body)
    context = getattr(backend.model.config, "max_position_embeddings", None)

    @app.exception_handler(_HTTPError)
    async def _http_error(_: Request, e: _HTTPError) -> JSONResponse:
        return JSONResponse(status_code=e.status, content=error_body(e.status, e.message, e.kind, e.code))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "dreamgym", "max_model_len": context}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionBody) -> dict[str, Any]:
        if body.model and body.model != model_name:
            raise _HTTPError(404, f"model {body.model!r} is not served here; this server serves {model_name!r}",
                             code="model_not_found")
        if body.stream:
            raise _HTTPError(400, "stream=true is not supported by dreamgym serve-model")
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            prompt = backend.prompt_ids(messages)
        except Exception as e:  # noqa: BLE001 - a template that rejects these messages is the client's input
            raise _HTTPError(400, f"chat template failed on these messages: {e}") from e
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        if context and len(prompt) + max_tokens > context:
            raise _HTTPError(400, f"the prompt has {len(prompt)} tokens; with max_tokens={max_tokens} that exceeds "
                                  f"the model's context length of {context}", code="context_length_exceeded")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        params = SamplingParams(temperature=body.temperature, top_p=body.top_p, max_tokens=max_tokens, stop=stop,
                                seed=body.seed)
        base = body.seed if body.seed is not None else secrets.randbits(63)
        fut = batcher.submit(prompt, params, [row_seed(base, j) for j in range(body.n)])
        outs: list[Completion] = await asyncio.wrap_future(fut)
        return _response(backend.tokenizer, model_name, prompt, outs, stop, body.logprobs)

    return app


def _response(tokenizer: Any, model_name: str, prompt: list[int], outs: list[Completion], stop: list[str],
              logprobs: bool) -> dict[str, Any]:
    choices = []
    for j, o in enumerate(outs):
        stop_reason = next((s for s in stop if o.finish_reason == "stop" and s and o.text.endswith(s)), None)
        lp = None
        if logprobs:
            lp = {"content": [{"token": tok, "logprob": p, "bytes": list(tok.encode("utf-8")), "top_logprobs": []}
                              for tok, p in zip((tokenizer.decode([t]) for t in o.token_ids), o.logprobs)]}
        choices.append({"index": j, "message": {"role": "assistant", "content": o.text}, "logprobs": lp,
                        "finish_reason": o.finish_reason, "stop_reason": stop_reason, "token_ids": o.token_ids})
    n_out = sum(len(o.token_ids) for o in outs)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_name, "choices": choices, "prompt_token_ids": prompt,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": n_out, "total_tokens": len(prompt) + n_out}}


class ServerHandle:
    """A server running in a background thread of this process. `url` is the API base (ends in /v1)."""

    def __init__(self, running: serving.RunningServer, app: FastAPI):
        self._running, self._app = running, app
        self.host, self.port = running.host, running.port
        self.url = f"{running.base}/v1"

    def stop(self) -> None:
        self._running.stop()
        self._app.state.batcher.stop()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_server(backend: Any, host: str = "127.0.0.1", port: int = 0, *, model_name: str = "local",
                 batch_wait_s: float = 0.005, limits: serving.Limits = LIMITS) -> ServerHandle:
    """Serve `backend` from a background thread; `port=0` picks a free port. Returns once it accepts requests."""
    app = create_app(backend, model_name, batch_wait_s=batch_wait_s, limits=limits)
    try:
        running = serving.start(serving.make_server(app), host, port)
    except BaseException:
        app.state.batcher.stop()
        raise
    return ServerHandle(running, app)


def main(argv: list[str] | None = None) -> int:
    from dreamgym.config import CommandParser, at_least, fail

    parser = CommandParser(prog="dreamgym serve-model",
                           description="Serve a local model as an OpenAI-compatible endpoint.")
    parser.add_argument("--preset", default="tiny", help="preset name (tiny, smollm2-135m), local path or HF id")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=at_least(0, 65535), default=8000, help="port; 0 picks a free one (printed)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--batch-size", type=at_least(1), default=32, help="most rows decoded together")
    parser.add_argument("--served-model-name", default=None, help="model id clients use (default: --preset)")
    parser.add_argument("--threads", type=at_least(1), default=None,
                        help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--max-body-mb", type=float, default=LIMITS.max_body_bytes / 2**20,
                        help="largest request body accepted, in MiB (larger ones get 413 before being read)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.max_body_mb > 0:
        parser.error(f"--max-body-mb must be > 0, got {args.max_body_mb}")
    limits = dataclasses.replace(LIMITS, max_body_bytes=int(args.max_body_mb * 2**20))
    import torch

    from dreamgym.llm.hf import HFBackend
    from dreamgym.presets import PresetError

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        backend = HFBackend.from_preset(args.preset, device=args.device, batch_size=args.batch_size)
    except PresetError as e:
        return fail("serve-model", e)
    name = args.served_model_name or args.preset
    app = create_app(backend, name, limits=limits)
    try:
        sock = serving.bind(args.host, args.port, limits.backlog)
    except OSError as e:
        app.state.batcher.stop()
        return fail("serve-model", f"cannot listen on {args.host}:{args.port}: {e}")
    host, port = sock.getsockname()[:2]
    print(f"serving {name!r} at http://{host}:{port}/v1 (OpenAI-compatible; Ctrl-C stops)", flush=True)
    try:
        serving.make_server(app, log_level="info", access_log=True).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        app.state.batcher.stop()
    return 0
