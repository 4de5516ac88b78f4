"""`dreamgym serve-model`: any local model of ours as an OpenAI-compatible endpoint that speaks vLLM's dialect.

Owns: the HTTP surface (`POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/load_lora_adapter`,
`POST /v1/unload_lora_adapter`, `GET /v1/models`, `GET /health`), the request schemas and OpenAI-style errors,
micro-batching of concurrent requests into one `HFBackend` call, the LoRA adapters loaded at runtime, and starting
a server in-process on a loopback port (`start_server`) for tests and for rollout workers in the same process.
Must not know: environments, trainers; how generation works (that is `HFBackend`); how requests are bounded
(that is `dreamgym.utils.serving`, shared with `dreamgym webshop serve`).

Every error is OpenAI's JSON shape `{"error": {"message", "type", "code", "param"}}` with a 4xx/5xx status:
400 invalid fields or malformed JSON, 404 unknown model or path, 405 wrong method, 413 body over `LIMITS`
(4 MiB by default, `--max-body-mb`), 431 head over 32 KiB, 408 body or head too slow, 503 past 256 open
connections, 500 a failed generation. The listen backlog queues 1024 connections not yet accepted.

A prompt is checked against the model's context while it is tokenized: its text is tokenized `CHUNK_CHARS` at a
time and refused (400 `context_length_exceeded`) as soon as the count proves it cannot fit, so a prompt of megabytes
costs about one context's worth of tokenizing, time and memory, not its whole length; only a prompt that may fit is
tokenized whole, for the exact count. Tokenizing and templating run on worker threads, never on the event loop, so
`/health` and other requests are answered meanwhile.

Extensions over the OpenAI chat schema, all optional for clients: each choice carries `token_ids` (the sampled
ids) and `stop_reason` (the stop string that ended it, null on eos/length), the response carries `prompt_token_ids`
(as vLLM's `return_token_ids` does). Choice `j` of a request with seed `s` samples with seed `row_seed(s, j)`.

`/v1/completions` follows vLLM's OpenAI server, so a client written for vLLM (the trainer's `HTTPPolicyBackend`)
runs unchanged against this one on a CPU: `prompt` is text, token ids, or a list of either (prompt `i`, choice `j`
is choice `i * n + j`, sampled with `row_seed(seed, j)` as if each prompt were its own request); `logprobs: 0`
returns the sampled tokens' log-probs (temperature-1 model log-probs, vLLM's raw log-probs) in the legacy
`{tokens, token_logprobs, top_logprobs, text_offset}` shape; `return_token_ids: true` adds `prompt_token_ids` and
`token_ids` to each choice; the stop string is cut from `text` unless `include_stop_str_in_output: true` (token ids
always hold every sampled token, eos included). Top alternatives (`logprobs > 0`), `echo`, `prompt_logprobs` and
streaming are refused with 400 rather than silently ignored.

Structured outputs, as vLLM's: `structured_outputs: {"regex": ...}` on either endpoint makes every choice match
the regex (decoded inside it, token by token); a regex that does not compile, one that no text the model can write
matches (its language empty: `[^\\s\\S]`), another kind of structured output (`json`, `grammar`, `choice`, ...) and
vLLM's removed `guided_*` fields are refused with 400, and so is a regex over `--max-regex-chars` or whose compile
runs past `--regex-timeout-s` (`dreamgym.llm.regex_gate`: 400 `regex_too_long` or `regex_too_costly`; 503
`regex_compiler_busy` for one queued behind such a compile).

Access: with a token (`$DREAMGYM_MODEL_TOKEN` or `--token-file`, as `dreamgym serve-env`) every route but `/health`
needs `Authorization: Bearer TOKEN` (or the token as a Basic password: `http://token:TOKEN@host:port/v1`), else 401.
Runtime adapters load only from inside `adapter_dir` (symlinks resolved; default: where DreamGym's policy backends
write theirs, `dreamgym.llm.base.adapter_root()`), else 403. Bound beyond loopback without a token, it warns.

Runtime LoRA, as vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING` endpoints: `load_lora_adapter {lora_name, lora_path}`
loads a PEFT adapter folder (what DreamGym's trainers save) onto the served model; requests whose `model` is that
name sample with it, others with the bare base model; `load_inplace: true` replaces an adapter of the same name,
`unload_lora_adapter {lora_name}` drops it. Success answers are plain text, as vLLM's. Loading and unloading run on
the batcher's thread between batches, so no decode ever sees the model change under it.
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
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from dreamgym.utils import serving
from dreamgym.llm.base import Completion, OutputConstraint, SamplingParams, adapter_root, row_seed
from dreamgym.llm.regex_gate import MAX_REGEX_CHARS, REGEX_TIMEOUT_S, RegexGate, RegexRefused

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256
# A long chat in JSON is tens of KiB; 4 MiB leaves room for non-ASCII escapes while keeping a rejected body cheap.
LIMITS = serving.Limits(max_body_bytes=4 << 20)
CHUNK_CHARS = 1 << 15
"""Characters of a prompt tokenized at a time while it is checked against the context."""
TOKEN_ENV = "DREAMGYM_MODEL_TOKEN"
"""The environment variable `dreamgym serve-model` reads its bearer token from (a command line would show it)."""
CUT_SLACK = 64
"""Tokens a cut between two pieces may add to their count (a word or a special token's text cut in two, a message
joined to the chat template's text); an early refusal allows this many per piece, so it refuses only prompts that
cannot fit."""


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


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs` request field. Only `regex` is honoured; the other kinds are refused."""

    model_config = ConfigDict(extra="allow")
    regex: str | None = None


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
    structured_outputs: StructuredOutputs | None = None


class CompletionBody(BaseModel):
    """vLLM's `/v1/completions` fields we honour. Unknown fields are accepted and ignored, as vLLM does; the ones
    whose silent omission would mislead (top alternatives, echo, prompt log-probs, streaming) are refused."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str | list[int] | list[str] | list[list[int]]
    n: int = Field(1, ge=1, le=128)
    temperature: float = Field(1.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(16, ge=0)  # the OpenAI and vLLM default for completions
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0)
    echo: bool = False
    stream: bool = False
    prompt_logprobs: int | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputs | None = None


class LoadLoRABody(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class UnloadLoRABody(BaseModel):
    model_config = ConfigDict(extra="allow")  # vLLM also takes lora_int_id; the name is what identifies it here
    lora_name: str = Field(min_length=1)


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
    adapter: str | None = None
    """The LoRA adapter to sample with (None: the base model)."""
    control: Callable[[], Any] | None = None
    """A model change (adapter load/unload) to run between batches instead of a generation."""


class Adapters:
    """LoRA adapters loaded at runtime onto the served model, by name. Used only from the batcher's thread."""

    def __init__(self, backend: Any, folder: str | Path | None = None):
        self.backend = backend
        self.folder = Path(folder if folder is not None else adapter_root()).resolve()
        """The only folder adapters load from (resolved: a symlink out of it is refused)."""
        self.paths: dict[str, str] = {}
        peft_config = getattr(backend.model, "peft_config", None)
        self.own: str | None = backend.model.active_adapter if peft_config else None
        """The adapter of a model served as a PEFT model (its own weights, not a runtime one)."""

    def load(self, name: str, path: str, inplace: bool = False) -> None:
        if name in self.paths and not inplace:
            raise _HTTPError(400, f"The lora adapter {name!r} has already been loaded; unload it first or pass "
                                  "load_inplace=true", code="adapter_exists")
        if not Path(path).resolve().is_relative_to(self.folder):
            raise _HTTPError(403, f"lora_path {path!r} is outside this server's adapter folder {str(self.folder)!r} "
                                  "(dreamgym serve-model --adapter-dir)", kind="permission_error",
                             code="adapter_path_not_allowed")
        if not (Path(path) / "adapter_config.json").is_file():
            raise _HTTPError(400, f"lora_path {path!r} is not a PEFT adapter folder (no adapter_config.json there)",
                             code="invalid_adapter")
        from peft import PeftModel

        model = self.backend.model
        if name in self.paths:
            model.delete_adapter(name)
            del self.paths[name]
        try:
            if isinstance(model, PeftModel):
                model.load_adapter(path, adapter_name=name)
            else:  # the first adapter wraps the base model; unloading the last one unwraps it
                self.backend.model = PeftModel.from_pretrained(model, path, adapter_name=name)
        except Exception as e:  # noqa: BLE001 - an adapter for another base model is the client's input
            raise _HTTPError(400, f"loading LoRA adapter {name!r} from {path!r} failed: {type(e).__name__}: {e}",
                             code="invalid_adapter") from e
        self.backend.model.eval()
        self.paths[name] = path

    def unload(self, name: str) -> None:
        if name not in self.paths:
            raise _HTTPError(404, f"The lora adapter {name!r} cannot be found", code="model_not_found")
        model = self.backend.model
        del self.paths[name]
        if self.own is None and not self.paths:
            # The last runtime adapter: unwrap the base model (a PeftModel left without adapters cannot run).
            self.backend.model = model.unload()
            self.backend.model.eval()
            return
        if name in model.active_adapters:  # activate another first: PEFT warns when the active one goes
            model.set_adapter(self.own or next(iter(self.paths)))
        model.delete_adapter(name)

    @contextmanager
    def selected(self, name: str | None) -> Iterator[None]:
        """The model samples with adapter `name`, or as served at start (None): with the adapter it was served with
        when it came as a PEFT model, with every loaded adapter off otherwise."""
        model = self.backend.model
        if name is not None and name not in self.paths:  # unloaded while the request waited
            raise _HTTPError(404, f"The model {name!r} does not exist (its adapter was unloaded)",
                             code="model_not_found")
        if name is None and self.own is not None:
            model.set_adapter(self.own)
        elif name is not None:
            model.set_adapter(name)
        elif self.paths:
            with model.disable_adapter():
                yield
            return
        yield


class MicroBatcher:
    """Collects requests arriving within `wait_s` of each other (up to the backend's batch size in rows) and
    decodes them in one `generate_from_ids` call per adapter, so concurrent clients share batched decoding.
    Adapter loads and unloads (`call`) run on the same thread between batches."""

    def __init__(self, backend: Any, wait_s: float = 0.005, adapter_dir: str | Path | None = None):
        self.backend = backend
        self.wait_s = wait_s
        self.adapters = Adapters(backend, adapter_dir)
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="serve-model-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], params: SamplingParams, seeds: list[int],
               adapter: str | None = None) -> Future:
        fut: Future = Future()
        self._queue.put(_Job(prompt, params, seeds, fut, adapter))
        return fut

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the batcher's thread once the batch in progress is done; its result or error in the future."""
        fut: Future = Future()
        self._queue.put(_Job([], SamplingParams(), [], fut, control=fn))
        return fut

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.control is not None:
                self._control(job)
                continue
            jobs, rows, after = [job], len(job.seeds), None
            deadline = time.monotonic() + self.wait_s
            while rows < self.backend.batch_size:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                if nxt.control is not None:  # requests queued before a model change sample before it
                    after = nxt
                    break
                jobs.append(nxt)
                rows += len(nxt.seeds)
            for adapter in dict.fromkeys(j.adapter for j in jobs):
                self._run([j for j in jobs if j.adapter == adapter], adapter)
            if after is not None:
                self._control(after)

    def _control(self, job: _Job) -> None:
        assert job.control is not None
        try:
            job.future.set_result(job.control())
        except Exception as e:  # noqa: BLE001 - reported to the caller
            job.future.set_exception(e)

    def _run(self, jobs: list[_Job], adapter: str | None) -> None:
        prompts = [j.prompt for j in jobs for _ in j.seeds]
        params = [j.params for j in jobs for _ in j.seeds]
        seeds = [s for j in jobs for s in j.seeds]
        try:
            with self.adapters.selected(adapter):
                outs = self.backend.generate_from_ids(prompts, params, seeds=seeds)
        except Exception as e:  # noqa: BLE001 - a failed batch is reported to its requests, the server lives on
            if not isinstance(e, _HTTPError):
                log.exception("generation failed for %d requests", len(jobs))
            for j in jobs:
                j.future.set_exception(e)
            return
        k = 0
        for j in jobs:
            j.future.set_result(outs[k:k + len(j.seeds)])
            k += len(j.seeds)


def _pieces(text: str, size: int) -> Iterator[str]:
    """`text` in pieces of at most `size` characters, each cut after a space where one is near the cut."""
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            space = text.rfind(" ", end - size // 32, end)
            end = space + 1 if space > start else end
        yield text[start:end]
        start = end


def provably_over(tokenizer: Any, texts: Iterable[str], room: int, size: int = CHUNK_CHARS) -> int | None:
    """Tokenize `texts` `size` characters at a time and stop once their count, less `CUT_SLACK` per piece, passes
    `room`: that count (a number of tokens the texts hold at least, however they are joined) proves they cannot fit
    in `room` tokens. None when they may fit (then only the exact count of the whole prompt can tell)."""
    count = pieces = 0
    for text in texts:
        for piece in _pieces(text, size):
            count += len(tokenizer(piece, add_special_tokens=False)["input_ids"])
            pieces += 1
            if count - pieces * CUT_SLACK > room:
                return count - pieces * CUT_SLACK
    return None


def create_app(backend: Any, model_name: str, *, batch_wait_s: float = 0.005, limits: serving.Limits = LIMITS,
               token: str | None = None, adapter_dir: str | Path | None = None,
               max_regex_chars: int = MAX_REGEX_CHARS, regex_timeout_s: float = REGEX_TIMEOUT_S) -> FastAPI:
    """The FastAPI app serving `backend` (an `HFBackend`) under the model id `model_name`; with `token`, every route
    but /health needs it; adapters load from `adapter_dir` only (default `adapter_root()`); regexes within
    `max_regex_chars` characters and `regex_timeout_s` seconds of compiling."""
    app = FastAPI(title="DreamGym model server")
    gate = RegexGate(backend, max_regex_chars, regex_timeout_s)
    batcher = MicroBatcher(backend, wait_s=batch_wait_s, adapter_dir=adapter_dir)
    app.state.batcher = batcher
    app.state.regex_gate = gate
    serving.install(app, limits, error_body, token=token)
    context = getattr(backend.model.config, "max_position_embeddings", None)
    # Ids past the embedding table would fail inside the model (a 500); the table may be larger than the tokenizer.
    vocab = max(int(getattr(backend.model.config, "vocab_size", 0) or 0), len(backend.tokenizer))

    @app.exception_handler(_HTTPError)
    async def _http_error(_: Request, e: _HTTPError) -> JSONResponse:
        return JSONResponse(status_code=e.status, content=error_body(e.status, e.message, e.kind, e.code))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    def adapter_of(name: str | None) -> str | None:
        """The runtime adapter a request's `model` names (None: the served model itself)."""
        if not name or name == model_name:
            return None
        if name in batcher.adapters.paths:
            return name
        raise _HTTPError(404, f"model {name!r} is not served here; this server serves {model_name!r}"
                              + (f" and the LoRA adapters {sorted(batcher.adapters.paths)}" if batcher.adapters.paths
                                 else ""), code="model_not_found")

    def check_context(prompt: list[int], max_tokens: int) -> None:
        if context and len(prompt) + max_tokens > context:
            raise _HTTPError(400, f"the prompt has {len(prompt)} tokens; with max_tokens={max_tokens} that exceeds "
                                  f"the model's context length of {context}", code="context_length_exceeded")

    def check_texts(texts: list[str], max_tokens: int) -> None:
        """Refuse texts that cannot fit beside `max_tokens`, having tokenized about a context's worth of them."""
        if not context:
            return
        if max_tokens >= context:
            raise _HTTPError(400, f"max_tokens={max_tokens} leaves no room for a prompt in the model's context length "
                                  f"of {context}", code="context_length_exceeded")
        over = provably_over(backend.tokenizer, texts, context - max_tokens)
        if over is not None:
            raise _HTTPError(400, f"the prompt has at least {over} tokens (counted until that was certain); with "
                                  f"max_tokens={max_tokens} that exceeds the model's context length of {context}",
                             code="context_length_exceeded")

    def chat_prompt(messages: list[dict[str, str]], max_tokens: int) -> list[int]:
        """The request's prompt ids, checked against the context (on a worker thread: it tokenizes)."""
        check_texts([m["content"] for m in messages], max_tokens)
        try:
            prompt = backend.prompt_ids(messages)
        except Exception as e:  # noqa: BLE001 - a template that rejects these messages is the client's input
            raise _HTTPError(400, f"chat template failed on these messages: {e}") from e
        check_context(prompt, max_tokens)
        return list(prompt)

    def completion_prompts(prompt: str | list[int] | list[str] | list[list[int]], max_tokens: int) -> list[list[int]]:
        """Each prompt's ids, checked against the context (on a worker thread: it tokenizes)."""
        prompts = _prompt_ids(backend.tokenizer, prompt, vocab, lambda text: check_texts([text], max_tokens))
        for p in prompts:
            check_context(p, max_tokens)
        return prompts

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {"object": "model", "created": 0, "owned_by": "dreamgym", "max_model_len": context}
        data = [{"id": model_name, "root": model_name, "parent": None, **card}]
        data += [{"id": name, "root": path, "parent": model_name, **card}
                 for name, path in list(batcher.adapters.paths.items())]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionBody) -> dict[str, Any]:
        adapter = adapter_of(body.model)
        if body.stream:
            raise _HTTPError(400, "stream=true is not supported by dreamgym serve-model")
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        prompt = await asyncio.to_thread(chat_prompt, messages, max_tokens)
        constraint = await asyncio.to_thread(_constraint, gate, body)
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        params = SamplingParams(temperature=body.temperature, top_p=body.top_p, max_tokens=max_tokens, stop=stop,
                                seed=body.seed, constraint=constraint)
        base = body.seed if body.seed is not None else secrets.randbits(63)
        fut = batcher.submit(prompt, params, [row_seed(base, j) for j in range(body.n)], adapter)
        outs: list[Completion] = await asyncio.wrap_future(fut)
        return _response(backend.tokenizer, body.model or model_name, prompt, outs, stop, body.logprobs)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody) -> dict[str, Any]:
        adapter = adapter_of(body.model)
        for name, bad in (("stream", body.stream), ("echo", body.echo),
                          ("prompt_logprobs", body.prompt_logprobs is not None)):
            if bad:
                raise _HTTPError(400, f"{name} is not supported by dreamgym serve-model")
        if body.logprobs:
            raise _HTTPError(400, f"logprobs={body.logprobs} asks for top alternatives, which dreamgym serve-model "
                                  "does not compute; logprobs=0 returns the sampled tokens' log-probs")
        max_tokens = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
        prompts = await asyncio.to_thread(completion_prompts, body.prompt, max_tokens)
        constraint = await asyncio.to_thread(_constraint, gate, body)
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        params = SamplingParams(temperature=body.temperature, top_p=body.top_p, max_tokens=max_tokens, stop=stop,
                                seed=body.seed, constraint=constraint)
        base = body.seed if body.seed is not None else secrets.randbits(63)
        seeds = [row_seed(base, j) for j in range(body.n)]
        futs = [batcher.submit(p, params, seeds, adapter) for p in prompts]
        outs: list[list[Completion]] = [await asyncio.wrap_future(f) for f in futs]
        return _completion_response(backend.tokenizer, body.model or model_name, body, prompts, outs, stop)

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(body: LoadLoRABody) -> PlainTextResponse:
        if body.lora_name == model_name:
            raise _HTTPError(400, f"lora_name {body.lora_name!r} is the served model's own name")
        await asyncio.wrap_future(batcher.call(
            lambda: batcher.adapters.load(body.lora_name, body.lora_path, inplace=body.load_inplace)))
        log.info("loaded LoRA adapter %r from %s", body.lora_name, body.lora_path)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: UnloadLoRABody) -> PlainTextResponse:
        await asyncio.wrap_future(batcher.call(lambda: batcher.adapters.unload(body.lora_name)))
        log.info("unloaded LoRA adapter %r", body.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    return app


def _constraint(gate: RegexGate, body: ChatCompletionBody | CompletionBody) -> OutputConstraint | None:
    """The request's `structured_outputs` as a constraint the backend can enforce (compiled here, through `gate`,
    from a worker thread: a bad or costly regex is the client's 400, not the batch's 500). vLLM's older `guided_*`
    fields, which a current vLLM accepts and ignores, are refused, so a client never believes its output
    constrained when it is not."""
    guided = sorted(k for k in body.model_extra or {} if k.startswith("guided_"))
    if guided:
        raise _HTTPError(400, f"{guided[0]} is not supported; send structured_outputs: {{\"regex\": ...}}")
    so = body.structured_outputs
    if so is None:
        return None
    other = sorted(k for k, v in (so.model_extra or {}).items() if v is not None)
    if other:
        raise _HTTPError(400, f"structured_outputs.{other[0]} is not supported by dreamgym serve-model; only regex is")
    if not so.regex:
        raise _HTTPError(400, "structured_outputs has no regex")
    constraint = OutputConstraint(regex=so.regex)
    try:
        gate.check(constraint)
    except RegexRefused as e:
        raise _HTTPError(e.status, str(e), "server_error" if e.status >= 500 else "invalid_request_error",
                         e.code) from e
    return constraint


def _prompt_ids(tokenizer: Any, prompt: str | list[int] | list[str] | list[list[int]], vocab: int,
                check_text: Callable[[str], None]) -> list[list[int]]:
    """The token ids of each prompt of a completions request: text is tokenized as vLLM does (the tokenizer's
    special tokens added) once `check_text` has passed it, ids are checked against the vocabulary."""
    many: list[Any] = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else prompt
    if not many:
        raise _HTTPError(400, "prompt is empty")
    out: list[list[int]] = []
    for p in many:
        if isinstance(p, str):
            check_text(p)
        ids = list(tokenizer(p)["input_ids"]) if isinstance(p, str) else list(p)
        if not ids:
            raise _HTTPError(400, "a prompt has no tokens")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise _HTTPError(400, f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
        out.append(ids)
    return out


def _completion_response(tokenizer: Any, model_name: str, body: CompletionBody, prompts: list[list[int]],
                         outs: list[list[Completion]], stop: list[str]) -> dict[str, Any]:
    choices = []
    for i, (prompt, row) in enumerate(zip(prompts, outs)):
        for j, o in enumerate(row):
            stop_reason = next((s for s in stop if o.finish_reason == "stop" and s and o.text.endswith(s)), None)
            text = o.text if stop_reason is None or body.include_stop_str_in_output else o.text[:-len(stop_reason)]
            lp = None
            if body.logprobs is not None:
                tokens = ([f"token_id:{t}" for t in o.token_ids] if body.return_tokens_as_token_ids
                          else [tokenizer.decode([t]) for t in o.token_ids])
                offsets, at = [], 0
                for tok in tokens:
                    offsets.append(at)
                    at += len(tok)
                lp = {"text_offset": offsets, "token_logprobs": o.logprobs, "tokens": tokens,
                      "top_logprobs": [{tok: p} for tok, p in zip(tokens, o.logprobs)]}
            choice: dict[str, Any] = {"index": i * body.n + j, "text": text, "logprobs": lp,
                                      "finish_reason": o.finish_reason, "stop_reason": stop_reason,
                                      "prompt_logprobs": None, "prompt_token_ids": None, "token_ids": None}
            if body.return_token_ids:
                choice.update(prompt_token_ids=prompt, token_ids=o.token_ids)
            choices.append(choice)
    n_in = sum(len(p) for p in prompts) * body.n
    n_out = sum(len(o.token_ids) for row in outs for o in row)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model_name, "choices": choices,
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}}


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
        self._app.state.regex_gate.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_server(backend: Any, host: str = "127.0.0.1", port: int = 0, *, model_name: str = "local",
                 batch_wait_s: float = 0.005, limits: serving.Limits = LIMITS, **access: Any) -> ServerHandle:
    """Serve `backend` from a background thread; `port=0` picks a free port. Returns once it accepts requests.
    `access`: `create_app`'s token, adapter folder and regex limits."""
    app = create_app(backend, model_name, batch_wait_s=batch_wait_s, limits=limits, **access)
    try:
        running = serving.start(serving.make_server(app), host, port)
    except BaseException:
        app.state.batcher.stop()
        app.state.regex_gate.close()
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
    parser.add_argument("--token-file", default="",
                        help=f"a file holding the bearer token every route but /health then needs (default: "
                             f"${TOKEN_ENV}; neither: no token)")
    parser.add_argument("--adapter-dir", default=None,
                        help="the only folder runtime LoRA adapters load from (default: the folder DreamGym's "
                             "trainers write theirs under, $TMPDIR/dreamgym-adapters)")
    parser.add_argument("--max-regex-chars", type=at_least(1), default=MAX_REGEX_CHARS,
                        help="longest structured_outputs regex accepted, in characters (default: %(default)s)")
    parser.add_argument("--regex-timeout-s", type=float, default=REGEX_TIMEOUT_S,
                        help="seconds a structured_outputs regex may take to compile (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.max_body_mb > 0:
        parser.error(f"--max-body-mb must be > 0, got {args.max_body_mb}")
    if not args.regex_timeout_s > 0:
        parser.error(f"--regex-timeout-s must be > 0, got {args.regex_timeout_s}")
    try:
        token = serving.read_token(TOKEN_ENV, args.token_file)
    except ValueError as e:
        return fail("serve-model", e)
    if args.adapter_dir is not None and not Path(args.adapter_dir).is_dir():
        return fail("serve-model", f"--adapter-dir {args.adapter_dir}: not a folder")
    limits = dataclasses.replace(LIMITS, max_body_bytes=int(args.max_body_mb * 2**20))
    import torch

    from dreamgym.llm.hf import HFBackend
    from dreamgym.utils.metrics import warn_busy_cores
    from dreamgym.llm.presets import PresetError

    if args.threads:
        torch.set_num_threads(args.threads)
        warn_busy_cores(args.threads)
    try:
        backend = HFBackend.from_preset(args.preset, device=args.device, batch_size=args.batch_size)
    except PresetError as e:
        return fail("serve-model", e)
    name = args.served_model_name or args.preset
    app = create_app(backend, name, limits=limits, token=token, adapter_dir=args.adapter_dir,
                     max_regex_chars=args.max_regex_chars, regex_timeout_s=args.regex_timeout_s)
    try:
        sock = serving.bind(args.host, args.port, limits.backlog)
    except OSError as e:
        app.state.batcher.stop()
        app.state.regex_gate.close()
        return fail("serve-model", f"cannot listen on {args.host}:{args.port}: {e}")
    host, port = sock.getsockname()[:2]
    serving.warn_if_open("serve-model", host, token, TOKEN_ENV,
                         f"generate with the model and load LoRA adapters from {app.state.batcher.adapters.folder}")
    print(f"serving {name!r} at http://{host}:{port}/v1 (OpenAI-compatible; Ctrl-C stops)", flush=True)
    try:
        serving.run_foreground(serving.make_server(app, log_level="info", access_log=True), sock)
    finally:
        app.state.batcher.stop()
        app.state.regex_gate.close()
    return 0
