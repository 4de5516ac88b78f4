"""Types of the LLM seam. A request is a list of OpenAI-style chat messages; a completion carries text,
generated token ids, per-token logprobs and a finish reason so trainers can train on exactly what was sampled.

Must not know: any backend, environments, trainers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from dreamgym.utils.seeds import row_seed as row_seed  # the seam's seed rule (dreamgym.utils.seeds), re-exported here

ChatRequest = list[dict[str, str]]  # [{"role": "system"|"user"|"assistant", "content": str}, ...]


class ConstraintError(ValueError):
    """An `OutputConstraint` a backend cannot enforce (an invalid or unsupported regex)."""


GENERATION_TIMEOUT_S = 120.0
"""The default seconds a generation server may take to answer one request (every `*_timeout_s` setting's default)."""


CLOSE_TIMEOUT_S = 3.0
"""Seconds a policy backend's closing unload waits for its one try: a clean-up, bounded whatever the server does."""


def adapter_root() -> Path:
    """The folder policy backends write their temporary adapter folders under (`$TMPDIR/dreamgym-adapters`), and the
    one `dreamgym serve-model` loads runtime adapters from unless told another: a client can make it read nothing
    else."""
    return Path(tempfile.gettempdir()) / "dreamgym-adapters"


class GenerationTimeout(RuntimeError):
    """A generation that ran past the backend's time limit. A caller should not send it again: the same request
    would take as long again, on a backend already too slow for it (its message names the setting to raise)."""


@dataclass(frozen=True)
class FieldBudget:
    """At most `max_tokens` generated tokens (None: no count of its own) in the field that opens with the
    `after`-th `OutputConstraint.mark` of a completion, and none once only `reserve` of the request's `max_tokens`
    remain: then the next token must hold a mark, which ends the field (the regex keeps marks out of fields)."""

    after: int
    max_tokens: int | None = None
    reserve: int = 0


@dataclass(frozen=True)
class OutputConstraint:
    """Structured output: every completion matches `regex` whole (it is written token by token inside the regex's
    language, so nothing else can be written). Backends that decode locally enforce it and `budgets` at each
    token. A server cannot count tokens per field: it receives `server_regex` (else `regex`) as vLLM's
    `structured_outputs: {"regex": ...}`, and a request's `max_tokens` of `server_max_tokens` where its context has
    room (`dreamgym.llm.http`)."""

    regex: str
    mark: str = "<"
    """The character that opens and closes the fields of `budgets` (kept out of their contents by `regex`)."""
    budgets: tuple[FieldBudget, ...] = ()
    server_regex: str | None = None
    """`regex` with each budgeted field bounded in characters (a language inside `regex`'s), so a server closes
    every field within `server_max_tokens` tokens; None: servers receive `regex`."""
    server_max_tokens: int = 0
    """The most characters (each one byte in ASCII text, and a token writes at least one byte) an answer matching
    `server_regex` holds: a server asked for this many tokens always completes it."""


@dataclass
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_tokens: int = 128
    """Upper bound on generated tokens per request."""
    stop: list[str] = field(default_factory=list)
    """Generation stops at the first of these strings; the stop string is kept in the text."""
    seed: int | None = None
    """Seed for sampling; the same seed and inputs give the same outputs on the same backend."""
    constraint: OutputConstraint | None = None
    """What the completion must match (None: free text)."""


@dataclass
class Completion:
    text: str
    token_ids: list[int] = field(default_factory=list)
    """Generated token ids (prompt excluded), exactly the ones sampled."""
    logprobs: list[float] = field(default_factory=list)
    """log p(token_ids[i] | prompt, token_ids[:i]) under the sampling distribution's model (temperature 1)."""
    finish_reason: str = "stop"
    """'stop' (eos or stop string), 'length' (max_tokens reached) or 'error'."""
    prompt_token_ids: list[int] = field(default_factory=list)
    """The prompt as the backend tokenized it (empty for backends that cannot say)."""


@runtime_checkable
class LLM(Protocol):
    def generate(self, requests: list[ChatRequest], params: SamplingParams | Sequence[SamplingParams], *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per request, in order. `params` is shared by every request or one per request (the
        experience model's edit format constrains each request to its own state); `row_seed(params.seed, i)` then
        reads request i's own. `seeds`, when given, is one sampling seed per request, used instead of
        `row_seed(params.seed, i)`: requests that carry the same seed meet the same sampling noise wherever they sit
        in a batch (common random numbers, e.g. the members of a GRPO group in a dream)."""
        ...
