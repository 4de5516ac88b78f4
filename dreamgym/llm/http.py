"""The OpenAI-compatible HTTP backend of the LLM seam (vLLM, llama.cpp server, `dreamgym serve-model`, hosted APIs).

Owns: the chat-completions request/response mapping, concurrency for a batch, timeouts, retries with
exponential backoff, and the errors a caller sees when an endpoint is dead or rejects a request.
Must not know: environments, trainers, torch, any local model.

Each request of a batch is one HTTP call (sent concurrently from a thread pool) with `n=1`; request `i` of a
call seeded with `s` is sent with seed `row_seed(s, i)` (or the call's own per-request `seeds[i]`), which is what a
local `HFBackend` uses for that row.
Token ids come back when the server provides them (`dreamgym serve-model` always does; vLLM does when the
request carries `return_token_ids`, pass it through `extra_body`); logprobs when the server supports them.
The stop string is kept in the text as the seam promises: servers that strip it but report `stop_reason`
(vLLM, ours) get it re-appended; servers that report neither (the OpenAI API itself) return text without it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from dreamgym.llm.base import ChatRequest, Completion, SamplingParams, row_seed

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 429}  # plus every 5xx


class LLMEndpointError(RuntimeError):
    """The endpoint could not be reached or kept failing after retries, or rejected every request of a batch."""


class _Rejected(Exception):
    """A 4xx answer to one request: retrying cannot help, the request itself is at fault."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class OpenAIHTTPBackend:
    """`LLM` over `POST {base_url}/chat/completions`. `base_url` includes the API prefix, e.g.
    `http://127.0.0.1:8000/v1`. `model=None` asks the server (`GET /models`) and uses the first model listed."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 120.0, connect_timeout: float = 5.0, max_retries: int = 3, backoff: float = 0.5,
                 concurrency: int = 16, logprobs: bool = True, extra_body: dict[str, Any] | None = None):
        self.base_url = base_url.rstrip("/")
        self._model = model
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.errors = 0
        """Requests answered with finish_reason 'error' so far (rejected by the server)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llm-http")

    # ------------------------------------------------------------------------------------------ public API

    @property
    def model(self) -> str:
        if self._model is None:
            names = self.models()
            if not names:
                raise LLMEndpointError(f"{self.base_url}/models lists no model; pass model= explicitly")
            self._model = names[0]
        return self._model

    def models(self) -> list[str]:
        """Model ids the server lists at `GET {base_url}/models`."""
        data = self._call("GET", "/models")
        return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and "id" in m]

    def generate(self, requests: list[ChatRequest], params: SamplingParams, *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per request, in order. Raises `LLMEndpointError` when the endpoint is unreachable (after
        retries) or rejects every request; a request the server rejects alone gets finish_reason 'error'."""
        if not requests:
            return []
        model = self.model
        if seeds is not None and len(seeds) != len(requests):
            raise ValueError("seeds must be one per request")
        if seeds is None and params.seed is not None:
            seeds = [row_seed(params.seed, i) for i in range(len(requests))]
        futures = [self._pool.submit(self._one, model, req, params, None if seeds is None else int(seeds[i]))
                   for i, req in enumerate(requests)]
        out: list[Completion] = []
        rejected: list[_Rejected] = []
        for f in futures:
            try:
                out.append(f.result())
            except _Rejected as e:
                rejected.append(e)
                out.append(Completion(text="", finish_reason="error"))
        if rejected:
            self.errors += len(rejected)
            if len(rejected) == len(requests):
                raise LLMEndpointError(f"{self.base_url} rejected all {len(requests)} requests: {rejected[0]}")
            log.warning("%s rejected %d of %d requests (first: %s)", self.base_url, len(rejected), len(requests),
                        rejected[0])
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

    def __enter__(self) -> OpenAIHTTPBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ internals

    def _one(self, model: str, request: ChatRequest, params: SamplingParams, seed: int | None) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": request, "n": 1, "temperature": params.temperature,
                                "top_p": params.top_p, "max_tokens": params.max_tokens}
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = seed % (1 << 63)  # servers parse seeds as signed 64-bit
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        data = self._call("POST", "/chat/completions", body)
        try:
            return _parse_choice(data, params)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _Rejected(200, f"malformed chat completion from {self.base_url}: {e!r}") from e

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One HTTP call with retries on connection errors, timeouts, 429 and 5xx (exponential backoff with
        jitter, honouring Retry-After). 4xx raises `_Rejected` at once."""
        url = self.base_url + path
        last, last_response = "", None
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1) * (1 + 0.1 * random.random())
                time.sleep(max(delay, _retry_after(last_response) if last_response is not None else 0.0))
            last_response = None
            try:
                resp = self._client.request(method, url, json=body)
            except httpx.TransportError as e:  # refused, DNS, timeouts, dropped connections
                last = f"{type(e).__name__}: {e}"
                continue
            if resp.status_code < 400:
                try:
                    return resp.json()
                except ValueError as e:
                    raise _Rejected(resp.status_code, f"response is not JSON: {resp.text[:200]!r}") from e
            message = _error_message(resp)
            if resp.status_code in _RETRY_STATUS or resp.status_code >= 500:
                last, last_response = f"HTTP {resp.status_code}: {message}", resp
                continue
            raise _Rejected(resp.status_code, message)
        hint = ("the server is reachable but kept failing" if last_response is not None else
                "is the server running and is the URL right? A local one starts with `dreamgym serve-model`")
        raise LLMEndpointError(
            f"OpenAI-compatible endpoint {url} failed after {self.max_retries + 1} attempts ({last}); {hint}")


def _retry_after(resp: httpx.Response) -> float:
    try:
        return min(float(resp.headers.get("retry-after", 0.0)), 60.0)
    except ValueError:
        return 0.0


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error", resp.json())
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    except (ValueError, AttributeError):
        return resp.text[:500]


def _parse_choice(data: dict[str, Any], params: SamplingParams) -> Completion:
    choice = data["choices"][0]
    text = choice["message"].get("content") or ""
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    stop_reason = choice.get("stop_reason")
    if finish == "stop" and isinstance(stop_reason, str) and stop_reason in params.stop \
            and not text.endswith(stop_reason):
        text += stop_reason  # the server stripped the stop string; the seam keeps it
    logprobs: list[float] = []
    tokens: list[str] = []
    if isinstance(choice.get("logprobs"), dict) and choice["logprobs"].get("content"):
        logprobs = [float(c["logprob"]) for c in choice["logprobs"]["content"]]
        tokens = [c.get("token", "") for c in choice["logprobs"]["content"]]
    ids = choice.get("token_ids")
    if ids is None and tokens and all(t.startswith("token_id:") for t in tokens):
        ids = [int(t.split(":", 1)[1]) for t in tokens]  # vLLM's return_tokens_as_token_ids
    prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids") or []
    return Completion(text=text, token_ids=[int(t) for t in ids or []], logprobs=logprobs, finish_reason=finish,
                      prompt_token_ids=[int(t) for t in prompt_ids])
