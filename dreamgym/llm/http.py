"""The OpenAI-compatible HTTP backend of the LLM seam (vLLM, llama.cpp server, `dreamgym serve-model`, hosted APIs),
and the backends whose samples come from one or more such servers (vLLM or `dreamgym serve-model`).

Owns: the chat-completions and token-id completions request/response mapping, vLLM's runtime LoRA calls
(`load_lora_adapter` / `unload_lora_adapter`), concurrency for a batch, timeouts, retries with exponential backoff, the
errors a caller sees when an endpoint is dead, too slow or rejects a request; `HTTPTokenBackend`: an `LLM` whose prompts
are tokenized here (an experience model fitted exactly as in training) and whose rows are spread over several
servers with failover; and `HTTPPolicyBackend`: the rollout engine's `PolicyBackend` over those servers, which pushes
the locally trained policy's LoRA adapter to all of them whenever its weights changed since the last push.
Must not know: environments, trainers, torch (the policy backend handles its local model through the model's own
`parameters()` and `save_pretrained`), how the server samples.

Each request of a batch is one HTTP call (sent concurrently from a thread pool) with `n=1`; request `i` of a
call seeded with `s` is sent with seed `row_seed(s, i)` (or the call's own per-request `seeds[i]`), which is what a
local `HFBackend` uses for that row.
Token ids come back when the server provides them (`dreamgym serve-model` always does; vLLM does when the
request carries `return_token_ids`, pass it through `extra_body`); logprobs when the server supports them.
The stop string is kept in the text as the seam promises: servers that strip it but report `stop_reason`
(vLLM, ours) get it re-appended; servers that report neither (the OpenAI API itself) return text without it.

A request whose params carry an `OutputConstraint` sends its regex as vLLM's `structured_outputs: {"regex": ...}`
(honoured by vLLM on both endpoints and by `dreamgym serve-model`; vLLM's older `guided_regex` is silently ignored by
current servers, so it is not used). A server cannot count a field's tokens, so what it receives is the constraint's
`server_regex` (its fields bounded in characters) where there is one, and a token-id request asks for up to the
constraint's `server_max_tokens` (the longest answer, one token per character) as far as the served model's context
(`max_model_len` in `GET /models`, as vLLM and `serve-model` report it) leaves room beside the prompt: then every
answer completes inside the format. A chat request, whose prompt length is not known here, keeps `max_tokens`.

Start-up capability probe (`dreamgym.llm.capabilities.probe_server`, run by `HTTPTokenBackend` for each server):
token-id prompts with ids returned, log-probs, runtime LoRA loading and structured output (checked by the answer
matching, not the status) are found out with a few tiny greedy requests and printed in one line. A server without
token-id prompts (a chat-only one, e.g. `transformers serve`, which refuses vLLM's fields with 422) gets chat requests
and the local tokenizer re-derives the ids from the text; one without structured output gets no constraint; one
lacking what the caller `needs` (the policy backend: runtime LoRA) is refused at once with `ServerCapabilityError`, a
one-line `ConfigError`.

Retries: a request the server never got (refused or timed-out connection, a dropped one) and one it answered with
408, 409, 429 or a 5xx is sent again after a backoff; 4xx otherwise is the request's own fault and is not. A POST
that got no answer within `timeout` is not sent again (`LLMTimeoutError`, naming `timeout_field`, the setting to
raise): the server got it and may still be generating it. vLLM aborts a generation whose client disconnects (its
OpenAI routes are wrapped in `with_cancellation`), `dreamgym serve-model` finishes it regardless, and the copy sent
again would be as long, on the same loaded server, as the one that ran out of time; so a re-send would only add
load where there is too much. Only a GET (the model listing) is sent again after a read timeout. Several servers: a
timeout does not mark its server down either (it is slow, not gone), so the row is not failed over.

Token-id generation (`generate_from_ids`) uses `POST {base_url}/completions` with the prompt as token ids,
`return_token_ids`, `include_stop_str_in_output` and `logprobs: 0`, the fields of vLLM's OpenAI server: ids and
log-probs come back exactly as sampled, so a trainer can train on them (vLLM's default log-probs are the raw
model's, before temperature, which is what `Completion.logprobs` means).
"""

from __future__ import annotations

import logging
import random
import shutil
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from dreamgym.llm.base import (CLOSE_TIMEOUT_S, GENERATION_TIMEOUT_S, ChatRequest, Completion, SamplingParams,
                               adapter_root, row_seed)
from dreamgym.llm.capabilities import (PROBE_REQUEST, LLMEndpointError, LLMTimeoutError, ServerCapabilities,
                                       ServerCapabilityError, probe_server, shorten)
from dreamgym.llm.capabilities import Rejected as _Rejected

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 429}  # plus every 5xx
_CHAT_PROMPTS_KEPT = 4096  # prompts remembered for chat-only servers (a few rollout batches' worth)


class OpenAIHTTPBackend:
    """`LLM` over `POST {base_url}/chat/completions`. `base_url` includes the API prefix, e.g.
    `http://127.0.0.1:8000/v1`. `model=None` asks the server (`GET /models`) and uses the first model listed.
    `timeout`: seconds a request waits for its answer; `timeout_field`: the setting that sets it (a config field such
    as `dream.em_timeout_s`), named in the error of a request that ran past it."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = GENERATION_TIMEOUT_S, timeout_field: str = "timeout", connect_timeout: float = 5.0,
                 max_retries: int = 3, backoff: float = 0.5, concurrency: int = 16, logprobs: bool = True,
                 extra_body: dict[str, Any] | None = None):
        self.base_url = base_url.rstrip("/")
        self._model = model
        self.timeout, self.timeout_field = float(timeout), timeout_field
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.errors = 0
        """Requests answered with finish_reason 'error' so far (rejected by the server)."""
        self._context: int | None = None
        self._context_asked = False
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

    def context_length(self) -> int | None:
        """The served model's context length in tokens as `GET /models` reports it (`max_model_len`: vLLM's and
        `dreamgym serve-model`'s cards), None when the server does not say. Asked once."""
        if not self._context_asked:
            try:
                listed = self._call("GET", "/models").get("data", [])
            except _Rejected:  # a server without the listing says nothing about its context
                listed = []
            cards = [m for m in listed if isinstance(m, dict)]
            sizes = [m.get("max_model_len") for m in cards if m.get("id") == self.model] + \
                [m.get("max_model_len") for m in cards]
            self._context = next((int(n) for n in sizes if isinstance(n, int) and n > 0), None)
            self._context_asked = True
        return self._context

    def generate(self, requests: list[ChatRequest], params: SamplingParams | Sequence[SamplingParams], *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per request, in order; `params` shared or one per request, seeds as in
        `generate_from_ids`. Raises `LLMEndpointError` when the endpoint is unreachable (after retries) or rejects
        every request; a request the server rejects alone gets finish_reason 'error'."""
        plist, rows = per_row(len(requests), params, seeds, "request")
        if not requests:
            return []
        model = self.model
        return self._gather([self._pool.submit(self._one, model, req, p, s)
                             for req, p, s in zip(requests, plist, rows)])

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
                          *, seeds: Sequence[int] | None = None, model: str | None = None) -> list[Completion]:
        """Token-in/token-out generation through `POST {base_url}/completions` (vLLM's token-id prompts), one
        request per prompt, all in flight together. `params` is shared or one per prompt; seeds as in `generate`
        (per prompt, else `row_seed(params.seed, i)`). `model` overrides the served model name (a LoRA adapter's
        name). Failures as in `generate`."""
        plist, row = per_row(len(prompts), params, seeds)
        if not prompts:
            return []
        name = model or self.model
        return self._gather([self.submit_ids(name, list(map(int, pr)), p, s) for pr, p, s in zip(prompts, plist, row)])

    def submit_ids(self, model: str, prompt: list[int], params: SamplingParams, seed: int | None) -> Future:
        """One token-id completion request, sent from the thread pool; the future raises `_Rejected` on a 4xx and
        `LLMEndpointError` when the server stays unreachable."""
        return self._pool.submit(self._one_ids, model, prompt, params, seed)

    def submit_chat(self, model: str, request: ChatRequest, params: SamplingParams, seed: int | None) -> Future:
        """One chat completion request, sent from the thread pool; failures as in `submit_ids`."""
        return self._pool.submit(self._one, model, request, params, seed)

    def load_lora_adapter(self, name: str, path: str, *, inplace: bool = False) -> None:
        """vLLM's runtime LoRA loading: the server reads the PEFT adapter folder `path` (a path on the server's
        machine) and serves it as model `name`. Raises `LLMEndpointError` when the server refuses."""
        body: dict[str, Any] = {"lora_name": name, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        try:
            self._call("POST", "/load_lora_adapter", body, parse=False)
        except _Rejected as e:
            raise LLMEndpointError(f"{self.base_url} refused LoRA adapter {name!r} from {path}: {e} (a vLLM "
                                   "server needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)") from e

    def unload_lora_adapter(self, name: str, *, timeout: float | None = None, retries: int | None = None) -> None:
        """Drop a LoRA adapter loaded with `load_lora_adapter` (`timeout`, `retries`: this call's, else the client's).
        Raises `LLMEndpointError` when the server refuses."""
        try:
            self._call("POST", "/unload_lora_adapter", {"lora_name": name}, parse=False, timeout=timeout,
                       retries=retries)
        except _Rejected as e:
            raise LLMEndpointError(f"{self.base_url} refused to unload LoRA adapter {name!r}: {e}") from e

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

    def __enter__(self) -> OpenAIHTTPBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ internals

    def _gather(self, futures: list[Future]) -> list[Completion]:
        """The batch's completions in order; a rejected request becomes finish_reason 'error', all rejected raises."""
        out: list[Completion] = []
        rejected: list[_Rejected] = []
        for f in futures:
            try:
                out.append(f.result())
            except _Rejected as e:
                rejected.append(e)
                out.append(Completion(text="", finish_reason="error"))
        self.errors += len(rejected)
        return _settle(out, rejected, self.base_url)

    def _one_ids(self, model: str, prompt: list[int], params: SamplingParams, seed: int | None) -> Completion:
        body: dict[str, Any] = {"model": model, "prompt": prompt, "n": 1, "temperature": params.temperature,
                                "top_p": params.top_p, "max_tokens": self._answer_tokens(params, len(prompt)),
                                "logprobs": 0, "return_token_ids": True, "include_stop_str_in_output": True}
        _add_sampling(body, params, seed)
        body.update(self.extra_body)
        data = self._call("POST", "/completions", body)
        try:
            return _parse_text_choice(data, params, prompt)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _Rejected(200, f"malformed completion from {self.base_url}: {e!r}") from e

    def _one(self, model: str, request: ChatRequest, params: SamplingParams, seed: int | None) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": request, "n": 1, "temperature": params.temperature,
                                "top_p": params.top_p, "max_tokens": params.max_tokens}
        _add_sampling(body, params, seed)
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        data = self._call("POST", "/chat/completions", body)
        try:
            return _parse_choice(data, params)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _Rejected(200, f"malformed chat completion from {self.base_url}: {e!r}") from e

    def _answer_tokens(self, params: SamplingParams, prompt_tokens: int) -> int:
        """The request's `max_tokens`: `params.max_tokens`, raised towards the constraint's `server_max_tokens` (the
        longest answer its `server_regex` allows) as far as the served model's context leaves room beside a prompt
        of `prompt_tokens` tokens; not raised when the context is not reported (a raise could be refused)."""
        c = params.constraint
        if c is None or c.server_max_tokens <= params.max_tokens:
            return params.max_tokens
        context = self.context_length()
        if context is None:
            return params.max_tokens
        return max(params.max_tokens, min(c.server_max_tokens, context - prompt_tokens))

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *, parse: bool = True,
              timeout: float | None = None, retries: int | None = None) -> dict[str, Any]:
        """One HTTP call with retries on connection errors, timeouts, 429 and 5xx (exponential backoff with
        jitter, honouring Retry-After), except a POST's read timeout, which raises `LLMTimeoutError` at once (see
        the module's doc). 4xx raises `_Rejected` at once. `parse=False` for endpoints that answer success in plain
        text (vLLM's LoRA endpoints): the answer is then `{"text": ...}`. `timeout`, `retries`: this call's."""
        url = self.base_url + path
        last, last_response = "", None
        max_retries = self.max_retries if retries is None else max(0, retries)
        wait = self.timeout if timeout is None else timeout
        request_timeout = httpx.USE_CLIENT_DEFAULT if timeout is None else httpx.Timeout(timeout)
        for attempt in range(max_retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1) * (1 + 0.1 * random.random())
                time.sleep(max(delay, _retry_after(last_response) if last_response is not None else 0.0))
            last_response = None
            try:
                resp = self._client.request(method, url, json=body, timeout=request_timeout)
            except httpx.ReadTimeout as e:
                if method != "GET":
                    raise LLMTimeoutError(
                        f"{url} sent no answer within {wait:g} s and the request was not sent again (the "
                        f"server may still be generating it); raise {self.timeout_field} (now {self.timeout:g}) if "
                        "its generations take longer on a loaded server") from e
                last = f"{type(e).__name__}: {e}"
                continue
            except httpx.TransportError as e:  # refused, DNS, connect timeouts, dropped connections
                last = f"{type(e).__name__}: {e}"
                continue
            if resp.status_code < 400:
                if not parse:
                    return {"text": resp.text}
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
            f"OpenAI-compatible endpoint {url} failed after {max_retries + 1} attempts ({last}); {hint}")


def per_row(n: int, params: SamplingParams | Sequence[SamplingParams], seeds: Sequence[int] | None,
            row: str = "prompt") -> tuple[list[SamplingParams], list[int | None]]:
    """(params, seed) of each of `n` rows: `params` shared or one per row; the row's own seed when `seeds` is
    given, else `row_seed(params.seed, i)` (None for an unseeded row). `row`: what the error calls a row."""
    plist = list(params) if isinstance(params, Sequence) else [params] * n
    if len(plist) != n or (seeds is not None and len(seeds) != n):
        raise ValueError(f"params and seeds must be one per {row}")
    return plist, [int(seeds[i]) if seeds is not None else None if p.seed is None else row_seed(p.seed, i)
                   for i, p in enumerate(plist)]


def _add_sampling(body: dict[str, Any], params: SamplingParams, seed: int | None) -> None:
    """The sampling fields both endpoints take: stop strings, the seed and the output constraint."""
    if params.stop:
        body["stop"] = list(params.stop)
    if seed is not None:
        body["seed"] = seed % (1 << 63)  # servers parse seeds as signed 64-bit
    if params.constraint is not None:
        body["structured_outputs"] = {"regex": params.constraint.server_regex or params.constraint.regex}


def _settle(out: list[Completion], rejected: list[_Rejected], where: str) -> list[Completion]:
    """A batch's completions once every request answered: rejected ones already hold finish_reason 'error'; a batch
    the server(s) rejected whole raises, since no caller can use it."""
    if rejected:
        if len(rejected) == len(out):
            raise LLMEndpointError(f"{where} rejected all {len(out)} requests: {rejected[0]}")
        log.warning("%s rejected %d of %d requests (first: %s)", where, len(rejected), len(out), rejected[0])
    return out


def _retry_after(resp: httpx.Response) -> float:
    try:
        return min(float(resp.headers.get("retry-after", 0.0)), 60.0)
    except ValueError:
        return 0.0


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        err = body.get("error") or body.get("detail") or body  # OpenAI/vLLM's error object, FastAPI's detail
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


def _parse_text_choice(data: dict[str, Any], params: SamplingParams, prompt: list[int]) -> Completion:
    """A `/completions` answer as a `Completion`: ids from `token_ids` (vLLM's `return_token_ids`), log-probs from
    the legacy `logprobs.token_logprobs`."""
    choice = data["choices"][0]
    ids = choice.get("token_ids")
    if ids is None:
        raise ValueError("the completion carries no token_ids (a vLLM server older than return_token_ids?)")
    lp = choice.get("logprobs") or {}
    logprobs = [float(x) for x in lp.get("token_logprobs") or []]
    if len(logprobs) != len(ids):
        raise ValueError(f"{len(ids)} token ids but {len(logprobs)} log-probs")
    text = choice.get("text") or ""
    stop_reason = choice.get("stop_reason")
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    if finish == "stop" and isinstance(stop_reason, str) and stop_reason in params.stop \
            and not text.endswith(stop_reason):
        text += stop_reason  # a server that ignored include_stop_str_in_output; the seam keeps it
    return Completion(text=text, token_ids=[int(t) for t in ids], logprobs=logprobs, finish_reason=finish,
                      prompt_token_ids=[int(t) for t in choice.get("prompt_token_ids") or prompt])


def split_urls(spec: str) -> tuple[list[str], str | None]:
    """(base URLs, served model name) from a config's server string: one URL or several separated by commas, with
    the model name after `#` (`http://a:8000/v1,http://b:8000/v1#policy`). Every URL must be http(s)."""
    urls, names = [], set()
    for part in (p.strip() for p in spec.split(",")):
        url, _, name = part.partition("#")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{part!r} is not an http(s) URL")
        urls.append(url)
        if name:
            names.add(name)
    if len(names) > 1:
        raise ValueError(f"the servers name different models ({', '.join(sorted(names))}); give one #MODEL")
    return urls, names.pop() if names else None


class HTTPTokenBackend:
    """`LLM` over one or more vLLM-style servers that all serve the same model, with prompts written here.

    `tokenizer` renders each chat request (its chat template, or the local backend's fallback) and tokenizes it,
    exactly as `HFBackend.prompt_ids` does, and the ids go to `POST /completions`: the server's own chat template
    and tokenizer never touch the prompt, so a model trained on prompts fitted by `tokenizer` sees the same ids
    wherever it runs, and `prompt_ids` lets callers fit prompts to a token budget as in training.

    Several servers: the rows of a batch are dealt round-robin over them (the start rotating between calls) and sent
    together. A server that stays unreachable after the client's retries is marked down for this backend's lifetime and
    its rows go to the others (`failovers` counts them; a row past its timeout is not, see above); when every server is
    down the call raises `LLMEndpointError` naming each one and why. Seeds are fixed per row before the rows are dealt,
    so which server answers a row does not change its sample.
    """

    def __init__(self, base_url: str | Sequence[str], tokenizer: Any, *, served_model: str | None = None,
                 needs: Mapping[str, str] | None = None, **http: Any):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("HTTPTokenBackend needs at least one server URL")
        self.clients = [OpenAIHTTPBackend(u, model=served_model, **http) for u in urls]
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            from dreamgym.llm.hf import FALLBACK_CHAT_TEMPLATE  # the local backend's template, for the same prompts

            tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        self.down: dict[str, str] = {}
        """Servers marked down: base URL -> the error that took it out."""
        self.failovers = 0
        self._next = 0
        self.capabilities: dict[str, ServerCapabilities] = {}
        """What each server was found to do at start-up (base URL -> its probe)."""
        self._chat_prompts: dict[tuple[int, ...], ChatRequest] = {}
        self._probe(needs or {})

    @property
    def client(self) -> OpenAIHTTPBackend:
        """The first server's client (the only one when a single URL was given)."""
        return self.clients[0]

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """Token ids of the chat-templated request with the generation prompt, exactly as `HFBackend.prompt_ids`."""
        text = self.tokenizer.apply_chat_template(request, tokenize=False, add_generation_prompt=True)
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if any(not c.token_ids for c in self.capabilities.values()):
            self._remember_chat_prompt(ids, request)
        return ids

    def generate(self, requests: list[ChatRequest], params: SamplingParams | Sequence[SamplingParams], *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        return self.generate_from_ids([self.prompt_ids(r) for r in requests], params, seeds=seeds)

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
                          *, seeds: Sequence[int] | None = None, model: str | None = None) -> list[Completion]:
        """Token-in/token-out generation spread over the live servers; `model` names a LoRA adapter loaded on all of
        them (default: the served model). Seeds and failures as in `OpenAIHTTPBackend.generate_from_ids`."""
        plist, rows = per_row(len(prompts), params, seeds)
        if not prompts:
            return []
        live = self._live()
        start, self._next = self._next, self._next + len(prompts)
        futures: list[tuple[OpenAIHTTPBackend, Future]] = []
        for i, (pr, p, s) in enumerate(zip(prompts, plist, rows)):
            c = live[(start + i) % len(live)]
            futures.append((c, self._submit(c, model or c.model, list(map(int, pr)), p, s)))
        out: list[Completion] = []
        rejected: list[_Rejected] = []
        for i, (c, f) in enumerate(futures):
            while True:
                try:
                    out.append(self._as_sampled(c, f.result(), prompts[i]))
                    break
                except _Rejected as e:
                    c.errors += 1
                    rejected.append(e)
                    out.append(Completion(text="", finish_reason="error"))
                    break
                except LLMTimeoutError:  # a slow server, not a gone one: failing the row over would re-send it
                    raise
                except LLMEndpointError as e:  # this server is gone: the row goes to another one
                    self._mark_down(c, e)
                    c = self._live()[i % len(self._live())]
                    self.failovers += 1
                    f = self._submit(c, model or c.model, list(map(int, prompts[i])), plist[i], rows[i])
        return _settle(out, rejected, ", ".join(c.base_url for c in self.clients))

    def load_lora_adapter(self, name: str, path: str) -> None:
        """Load the PEFT adapter folder `path` as model `name` on every live server."""
        for c in self._live():
            c.load_lora_adapter(name, path)

    def unload_lora_adapter(self, name: str, *, timeout: float | None = None, retries: int | None = None) -> None:
        """Drop adapter `name` on every live server (`timeout`, `retries`: as the client's `unload_lora_adapter`)."""
        for c in self._live():
            c.unload_lora_adapter(name, timeout=timeout, retries=retries)

    def close(self) -> None:
        self._close_clients()

    def _close_clients(self) -> None:
        for c in self.clients:
            c.close()

    def __enter__(self) -> HTTPTokenBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _live(self) -> list[OpenAIHTTPBackend]:
        live = [c for c in self.clients if c.base_url not in self.down]
        if not live:
            raise LLMEndpointError("every server is down: " + "; ".join(f"{u}: {e}" for u, e in self.down.items()))
        return live

    def _mark_down(self, client: OpenAIHTTPBackend, error: Exception) -> None:
        if client.base_url not in self.down:
            self.down[client.base_url] = str(error)
            log.warning("server %s marked down (%s); its requests go to the other servers", client.base_url, error)

    # -------------------------------------------------------------------------------- capabilities and chat rows
    def _probe(self, needs: Mapping[str, str]) -> None:
        """Probe every server (`probe_server`), print what each one does in one line, and refuse at once a server
        that lacks a capability of `needs` (capability -> what needs it). A server unreachable now is marked down,
        as it would be at its first request; none reachable is refused too."""
        ids = self.prompt_ids(PROBE_REQUEST)
        for c in self.clients:
            try:
                caps = probe_server(c, ids)
            except LLMEndpointError as e:
                self.down[c.base_url] = str(e)  # said below: at once when none answered, else as a warning
                continue
            problem = caps.missing(needs)
            if problem is not None:
                self._close_clients()  # not `close`: a subclass is not built yet
                raise ServerCapabilityError(c.base_url, problem)
            self.capabilities[c.base_url] = caps
            print(caps.line(), file=sys.stderr, flush=True)
        if not self.capabilities:
            self._close_clients()
            raise ServerCapabilityError(", ".join(self.down), "no server answered at start-up: "
                                        + "; ".join(shorten(e) for e in self.down.values()))
        for url, error in self.down.items():
            log.warning("server %s marked down at start-up (%s); its requests go to the other servers", url, error)

    def _submit(self, client: OpenAIHTTPBackend, model: str, prompt: list[int], params: SamplingParams,
                seed: int | None) -> Future:
        """One row to `client` the way its probe allows: token ids, or the chat request `prompt_ids` rendered into
        `prompt`; a constraint the server does not honour is left out (the callers' parsers are lenient)."""
        caps = self.capabilities.get(client.base_url)
        if caps is None or caps.token_ids:
            return client.submit_ids(model, prompt, params if caps is None or caps.structured else
                                     replace(params, constraint=None), seed)
        request = self._chat_prompts.get(tuple(prompt))
        if request is None:
            raise LLMEndpointError(f"{client.base_url} takes chat requests only, and this prompt's ids were not "
                                   "written by this backend's prompt_ids, so its messages are unknown")
        return client.submit_chat(model, request, params if caps.structured else replace(params, constraint=None),
                                  seed)

    def _as_sampled(self, client: OpenAIHTTPBackend, completion: Completion, prompt: Sequence[int]) -> Completion:
        """A chat answer as the seam's token-in/token-out row: the ids re-derived from its text by the local
        tokenizer (the server's own ids are not returned), its log-probs kept only when they are one per re-derived
        id, the prompt ids those the row was asked with. Token-id answers pass unchanged."""
        caps = self.capabilities.get(client.base_url)
        if caps is None or caps.token_ids:
            return completion
        ids = [int(t) for t in self.tokenizer(completion.text, add_special_tokens=False)["input_ids"]]
        logprobs = completion.logprobs if len(completion.logprobs) == len(ids) else []
        return replace(completion, token_ids=ids, logprobs=list(logprobs), prompt_token_ids=[int(t) for t in prompt])

    def _remember_chat_prompt(self, ids: list[int], request: ChatRequest) -> None:
        """Keep the request behind `ids` for a chat-only server (bounded: the oldest go first; a rollout asks for a
        turn's prompts just before it generates them)."""
        self._chat_prompts[tuple(ids)] = request
        if len(self._chat_prompts) > _CHAT_PROMPTS_KEPT:
            del self._chat_prompts[next(iter(self._chat_prompts))]


class HTTPPolicyBackend(HTTPTokenBackend):
    """The rollout engine's `PolicyBackend` (and an `LLM`) whose samples come from vLLM-style servers while the
    policy it samples, `model` with `tokenizer`, stays here for the trainer to train in place (`backend.model`).

    Before each generation the trainable weights are compared with those last pushed (every optimiser step and every
    checkpoint load changes them; `pushes` counts the pushes): a changed PEFT policy's adapter is saved under
    `adapter_dir` and loaded with `load_lora_adapter` under a new name `<adapter_prefix>-<n>` on every server, which
    the requests then name as their model; the adapter it replaces is unloaded and its folder deleted. So every
    rollout samples the policy as the last update left it, whoever calls the backend (trainer, evaluation), with no
    hook in the loops. The first generation pushes the adapter too (a checkpoint's adapter is not the base model).

    The servers must serve the policy's base weights (`dreamgym serve-model --preset <the trainer's preset>`, or
    `vllm serve <model folder> --enable-lora` with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` and `--max-lora-rank` at
    least the adapter's rank) and read `adapter_dir` at the same path (same machine or a shared filesystem).
    A full-weight policy is sampled as the server serves it, and once its weights change here `generate_from_ids`
    raises `LLMEndpointError`: reloading full weights into a server is not part of vLLM's OpenAI API.

    Its sampler is not the learner (`sampling_model` is None), so trainers recompute "old" log-probs themselves.
    """

    sampling_model = None
    """No local module samples: the trainer's `sampler_matches_learner()` is False for this backend."""

    def __init__(self, base_url: str | Sequence[str], model: Any, tokenizer: Any, *, served_model: str | None = None,
                 adapter_dir: str | Path | None = None, adapter_prefix: str | None = None, **http: Any):
        # The policy trained here reaches the servers as a LoRA adapter after every update (a trainer wraps the model
        # in its adapters after this backend is built): a server without the endpoint is refused now, not at the
        # first push.
        needs = {"lora": "sampling the policy trained here needs, to load its adapter after each update (vLLM: "
                         "--enable-lora with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; or dreamgym serve-model)"}
        super().__init__(base_url, tokenizer, served_model=served_model, needs=needs, **http)
        self.model = model
        self._own_dir = adapter_dir is None
        if adapter_dir is None:
            adapter_root().mkdir(exist_ok=True)
        self.adapter_dir = Path(adapter_dir) if adapter_dir is not None else \
            Path(tempfile.mkdtemp(prefix="policy-", dir=adapter_root()))
        # A temporary adapter folder goes with the backend even when no one calls close (a recipe's row, a crash):
        # every push writes a full adapter there.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.adapter_dir, ignore_errors=True) \
            if self._own_dir else None
        self.adapter_prefix = adapter_prefix or f"policy-{uuid.uuid4().hex[:8]}"
        self.adapter: str | None = None
        """The adapter name requests are sent to (None: the served model itself)."""
        self.pushes = 0
        self.failure: str | None = None  # the first server failure a generation raised (then `close` is brief)
        self._pushed: tuple[int, int] | None = None  # `_weights_version()` at the last push
        self._baseline: tuple[int, int] | None = None  # a full-weight policy's version at its first generation

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
                          *, seeds: Sequence[int] | None = None, model: str | None = None) -> list[Completion]:
        """Token-in/token-out generation on the servers with the current policy (pushed first when it changed)."""
        try:
            self.sync()
            return super().generate_from_ids(prompts, params, seeds=seeds, model=model or self.adapter)
        except LLMEndpointError as e:
            self.failure = self.failure or str(e)  # `close` then cleans up briefly and quietly
            raise

    def sync(self) -> bool:
        """Push the policy to the servers when its trainable weights changed since the last push. True if pushed."""
        version = self._weights_version()
        if not _is_peft(self.model):
            if self._baseline is None:
                self._baseline = version
            elif version != self._baseline:
                raise LLMEndpointError(
                    "the full-weight policy changed but a server cannot reload full weights through vLLM's OpenAI "
                    "API; train LoRA adapters (model.lora = true) to sample from a server")
            return False
        if version == self._pushed:
            return False
        name = f"{self.adapter_prefix}-{self.pushes + 1}"
        path = self.adapter_dir / name
        self.model.save_pretrained(str(path))
        self.load_lora_adapter(name, str(path.resolve()))
        old, self.adapter, self._pushed = self.adapter, name, version
        self.pushes += 1
        if old is not None:
            self.unload_lora_adapter(old)
            shutil.rmtree(self.adapter_dir / old, ignore_errors=True)
        log.info("pushed policy adapter %s to %s", name, ", ".join(c.base_url for c in self._live()))
        return True

    def close(self) -> None:
        """Unload the pushed adapter (one try, `CLOSE_TIMEOUT_S` at most: a server that failed mid-run must not hold
        the shutdown for another timeout) and close the connections; a temporary adapter_dir is deleted. After a
        failure, a failed unload is logged at debug level: the run's one-line error stays the user's last line."""
        if self.adapter is not None:
            try:
                self.unload_lora_adapter(self.adapter, timeout=CLOSE_TIMEOUT_S, retries=0)
            except LLMEndpointError as e:
                log.log(logging.DEBUG if self.failure else logging.WARNING, "could not unload %s: %s",
                        self.adapter, e)
            self.adapter = None
        super().close()
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> HTTPPolicyBackend:
        return self

    def _weights_version(self) -> tuple[int, int]:
        """(identity of the model, sum of its trainable tensors' version counters). Autograd's counter grows with
        every in-place write (optimiser steps, `load_state_dict`), so an unchanged sum means unchanged weights;
        hashing the weights instead would cost a pass over them before every generation."""
        return id(self.model), sum(p._version for p in self.model.parameters() if p.requires_grad)


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")
