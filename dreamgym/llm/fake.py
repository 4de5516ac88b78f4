"""A scripted LLM for unit tests only: answers from a function of the request or a fixed queue of texts.

Must not know: environments, trainers. Never used as a default anywhere outside tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dreamgym.llm.base import ChatRequest, Completion, SamplingParams


class FakeLLM:
    """`FakeLLM(fn)` answers `fn(request)`; `FakeLLM(["a", "b"])` answers the texts in turn (cycling)."""

    def __init__(self, script: Callable[[ChatRequest], str] | Iterable[str]):
        self._fn = script if callable(script) else None
        self._queue = [] if callable(script) else list(script)
        self._i = 0
        self.calls: list[ChatRequest] = []
        self.seeds: list[list[int] | None] = []
        """The per-request `seeds` of each call (None where the call had none), for tests of seeding."""
        self.params: list[list[SamplingParams]] = []
        """Each call's sampling settings, one per request (a shared one repeated)."""

    def generate(self, requests: list[ChatRequest], params: SamplingParams | Sequence[SamplingParams], *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        # A script has no sampling noise: `seeds` is recorded, not used.
        self.seeds.append(None if seeds is None else [int(x) for x in seeds])
        plist = list(params) if isinstance(params, Sequence) else [params] * len(requests)
        self.params.append(plist)
        out = []
        for req, p in zip(requests, plist):
            self.calls.append(req)
            if self._fn is not None:
                text = self._fn(req)
            else:
                text = self._queue[self._i % len(self._queue)]
                self._i += 1
            finish = "stop"
            for s in p.stop:
                if s in text:
                    text = text[: text.index(s) + len(s)]
            if len(text.split()) > p.max_tokens:
                text, finish = " ".join(text.split()[: p.max_tokens]), "length"
            # Byte ids stand in for tokens so code that needs ids and logprobs still has them.
            ids = list(text.encode("utf-8"))
            out.append(Completion(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish))
        return out
