"""What an OpenAI-compatible server can do, found out at start-up, and how its refusals reach a caller.

Owns: the endpoint errors (`LLMEndpointError`: unreachable or failing after retries; `LLMTimeoutError`: no answer in
time; `Rejected`: a 4xx to one request), the capability probe (`probe_server`: token-id prompts with ids returned,
log-probs, runtime LoRA loading, structured output checked by the answer matching, not the status) and its one-line
report (`ServerCapabilities`), and the refusal of a server that lacks what a run needs (`ServerCapabilityError`, a
one-line `ConfigError`).
Must not know: how requests are sent, retried or spread over servers (`dreamgym.llm.http`; the probe talks through
the `ProbeClient` seam that `OpenAIHTTPBackend` satisfies), environments, trainers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dreamgym.config import ConfigError
from dreamgym.llm.base import ChatRequest, Completion, GenerationTimeout, OutputConstraint, SamplingParams


class LLMEndpointError(RuntimeError):
    """The endpoint could not be reached or kept failing after retries, or rejected every request of a batch."""


class LLMTimeoutError(LLMEndpointError, GenerationTimeout):
    """A request the server got but did not answer within the client's timeout; it was not sent again."""


class Rejected(Exception):
    """A 4xx answer to one request: retrying cannot help, the request itself is at fault."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class ProbeClient(Protocol):
    """The one-request calls of an OpenAI-compatible client the probe needs (`OpenAIHTTPBackend` has them)."""

    base_url: str

    @property
    def model(self) -> str: ...

    def _one_ids(self, model: str, prompt: list[int], params: SamplingParams, seed: int | None) -> Completion: ...

    def _one(self, model: str, request: ChatRequest, params: SamplingParams, seed: int | None) -> Completion: ...

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
              parse: bool = True) -> dict[str, Any]: ...


CAPABILITIES = {"token_ids": "token-id prompts", "logprobs": "log-probs", "lora": "runtime LoRA loading",
                "structured": "structured output"}
"""What `probe_server` finds out about a server, each with the words its one line uses."""

PROBE_REQUEST: ChatRequest = [{"role": "user", "content": "Write a number."}]
"""The prompt of the probe's requests (sent as token ids, or as chat where ids are refused)."""

PROBE_REGEX = "[0-9]{2}"
"""The probe's structured-output regex: an unconstrained model is all but sure to write something else, so a server
that accepts the field yet ignores it (vLLM answers the retired `guided_regex` with 200 and ignores it; servers that
drop unknown fields) is caught by its answer, not by its status."""


class ServerCapabilityError(ConfigError):
    """A server cannot serve what the run needs (or no server answered at start-up): one line naming the server and
    the missing endpoint or capability, found before any work starts."""

    def __init__(self, url: str, problem: str):
        super().__init__(url, problem)


@dataclass(frozen=True)
class ServerCapabilities:
    """What one OpenAI-compatible server was found to do at start-up (`probe_server`)."""

    url: str
    model: str
    token_ids: bool
    """`POST /completions` takes token-id prompts and returns the sampled ids (vLLM's `return_token_ids`); without
    it rows go to `POST /chat/completions` and the local tokenizer re-derives the ids from the text."""
    logprobs: bool
    """The answers of the endpoint used carry the sampled tokens' log-probs."""
    lora: bool
    """`POST /load_lora_adapter` exists (vLLM with runtime LoRA updating, `dreamgym serve-model`)."""
    structured: bool
    """A `structured_outputs` regex is accepted and the answer matches it; without it constraints are not sent and
    answers are parsed leniently."""
    why_not: dict[str, str] = field(default_factory=dict)
    """Each missing capability -> what the server answered."""

    def has(self) -> dict[str, bool]:
        """Capability -> found, in the order of `CAPABILITIES`."""
        return {"token_ids": self.token_ids, "logprobs": self.logprobs, "lora": self.lora,
                "structured": self.structured}

    def line(self) -> str:
        """The probe's outcome and what is used instead of each missing capability, in one line."""
        instead = {"token_ids": "chat completions, token ids re-derived by the local tokenizer",
                   "logprobs": "the learner recomputes them when a trainer needs them",
                   "lora": "no adapters can be pushed", "structured": "constraints not sent, answers parsed leniently"}
        parts = [f"{CAPABILITIES[k]} yes" if ok else
                 f"{CAPABILITIES[k]} no ({shorten(self.why_not.get(k, ''))}; {instead[k]})"
                 for k, ok in self.has().items()]
        return f"server {self.url} (model {self.model}): " + "; ".join(parts)

    def missing(self, needs: Mapping[str, str]) -> str | None:
        """One line naming the first capability of `needs` (capability -> what needs it) this server lacks, else
        None."""
        for key, purpose in needs.items():
            if not self.has()[key]:
                return (f"the server has no {CAPABILITIES[key]} ({shorten(self.why_not.get(key, ''))}), which "
                        f"{purpose}")
        return None


def probe_server(client: ProbeClient, prompt_ids: Sequence[int]) -> ServerCapabilities:
    """Find out what the server behind `client` does with a few tiny greedy requests: a token-id completion of
    `prompt_ids` (else a chat completion of `PROBE_REQUEST`), an empty `POST /load_lora_adapter` (a 404 or 405 means
    no such endpoint; a refusal of the empty body means there is one) and a completion constrained to
    `PROBE_REGEX` whose answer must match it. Raises `LLMEndpointError` when the server is unreachable and
    `ServerCapabilityError` when it serves neither kind of completion."""
    model = client.model
    why: dict[str, str] = {}
    params = SamplingParams(temperature=0.0, max_tokens=4, seed=0)
    ids = [int(t) for t in prompt_ids]
    token_ids = logprobs = False
    try:
        logprobs = bool(client._one_ids(model, ids, params, 0).logprobs)
        token_ids = True
    except Rejected as e:
        why["token_ids"] = f"POST /completions: {e}"
    if not token_ids:
        try:
            logprobs = bool(client._one(model, PROBE_REQUEST, params, 0).logprobs)
        except Rejected as e:
            raise ServerCapabilityError(client.base_url, f"serves neither token-id completions ({why['token_ids']}) "
                                                         f"nor chat completions (POST /chat/completions: {e})") from e
    if not logprobs:
        why["logprobs"] = "the answers carry none"
    lora = True
    try:
        client._call("POST", "/load_lora_adapter", {}, parse=False)
    except Rejected as e:
        lora = e.status not in (404, 405)
        if not lora:
            why["lora"] = f"POST /load_lora_adapter: {e}"
    constrained = SamplingParams(temperature=0.0, max_tokens=8, seed=0, constraint=OutputConstraint(PROBE_REGEX))
    structured = False
    try:
        answer = (client._one_ids(model, ids, constrained, 0) if token_ids else
                  client._one(model, PROBE_REQUEST, constrained, 0)).text
        structured = re.fullmatch(PROBE_REGEX, answer) is not None
        if not structured:
            why["structured"] = f"accepted, but the answer {answer[:40]!r} ignores the regex {PROBE_REGEX}"
    except Rejected as e:
        why["structured"] = str(e)
    return ServerCapabilities(client.base_url, model, token_ids, logprobs, lora, structured, why)


def shorten(text: str, limit: int = 160) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
