"""The structured-output regexes a model server takes from its clients, bounded: `RegexGate`.

Owns: the length cap (`MAX_REGEX_CHARS`), the compile-time cap (`REGEX_TIMEOUT_S`) and the one thread that compiles
clients' regexes, and what a refusal says (`RegexRefused`: status, code, message).
Must not know: HTTP and routes (`dreamgym.llm.server` answers a refusal), how a regex is compiled or judged to match
nothing (the backend's `check_constraint`).

A regex costs its compile once (the backend caches it), and that cost grows faster than its length: alternations of
1, 4, 8 and 16 thousand characters took 0.15, 0.30, 0.90 and 2.6 s (`benchmarks/bench_serve_model_regex.py`), a 300 k
one 13.2 s and +285 MB, 1 MB none in 60 s. So a regex over the length cap is refused before it is parsed, and a
compile is waited for `timeout_s` at most; it runs on a thread of its own, which releases the GIL (xgrammar), so a
costly compile holds one core, never the server.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from dreamgym.llm.base import ConstraintError, OutputConstraint

MAX_REGEX_CHARS = 16 << 10
"""Longest `structured_outputs.regex` accepted by default, in characters: DreamGym's own experience-model regex is
about 120; a 16 KiB regex of alternations already compiles for seconds (a measured 300 k: 13 s and +285 MB)."""
REGEX_TIMEOUT_S = 5.0
"""Default seconds a regex may take to compile before its request is refused."""


class RegexRefused(Exception):
    """A client's regex refused: the HTTP `status` to answer (400, or 503 to come again), an error `code` (None: no
    code of its own) and the message."""

    def __init__(self, status: int, code: str | None, message: str):
        super().__init__(message)
        self.status, self.code = status, code


class RegexGate:
    """Compiles the regexes requests bring, within `max_chars` characters and `timeout_s` seconds each, on one
    thread of its own: a costly compile holds one core, never the server (xgrammar releases the GIL)."""

    def __init__(self, backend: Any, max_chars: int = MAX_REGEX_CHARS, timeout_s: float = REGEX_TIMEOUT_S):
        if max_chars < 1 or not timeout_s > 0:
            raise ValueError(f"max_regex_chars must be >= 1 and regex_timeout_s > 0, got {max_chars}, {timeout_s}")
        self.backend, self.max_chars, self.timeout_s = backend, max_chars, timeout_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serve-model-regex")
        self._ready: Future | None = None

    def check(self, constraint: OutputConstraint) -> None:
        """Refuse (400) a regex over the length cap before parsing it, one that does not compile or matches nothing,
        and one not compiled within the timeout (the compile goes on and is cached for a later request); 503 when
        the timeout passed with the regex still queued behind such a compile."""
        n = len(constraint.regex)
        if n > self.max_chars:
            raise RegexRefused(400, "regex_too_long", f"structured_outputs.regex has {n} characters; this server "
                               f"accepts at most {self.max_chars} (dreamgym serve-model --max-regex-chars)")
        if self._ready is None:
            # The first regex also builds the vocabulary's tables (a second or so, whatever the regex): that set-up
            # is waited for untimed, so the timeout measures the regex alone.
            self._ready = self._pool.submit(self.backend.check_constraint, OutputConstraint(regex="x"))
        self._ready.result()
        compiling = self._pool.submit(self.backend.check_constraint, constraint)
        try:
            compiling.result(timeout=self.timeout_s)
        except FutureTimeout:
            if compiling.cancel():  # never started: an earlier costly regex still holds the compiling thread
                raise RegexRefused(503, "regex_compiler_busy", f"this server is still compiling an earlier regex "
                                   f"past its {self.timeout_s:g} s limit; send this one again shortly") from None
            raise RegexRefused(400, "regex_too_costly", f"structured_outputs.regex did not compile within "
                               f"{self.timeout_s:g} s (dreamgym serve-model --regex-timeout-s); a regex this costly is "
                               "refused") from None
        except ConstraintError as e:
            raise RegexRefused(400, None, f"structured_outputs.regex: {e}") from e

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
