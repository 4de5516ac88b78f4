"""The LLM seam: one small interface (`LLM.generate`) and its backends.

Owns: `ChatRequest`, `SamplingParams`, `Completion`, the `LLM` protocol, and `load_llm` which picks a backend.
Must not know: environments, trainers, the experience model.

Backends live in their own modules: `dreamgym.llm.fake` (scripted, for unit tests), `dreamgym.llm.hf`
(local transformers model, token ids and logprobs), `dreamgym.llm.http` (any OpenAI-compatible endpoint).
They are imported only when `load_llm` needs them, so this package stays free of torch and httpx.
"""

from typing import Any

from dreamgym.llm.base import LLM, ChatRequest, Completion, SamplingParams, row_seed

__all__ = ["LLM", "ChatRequest", "Completion", "SamplingParams", "load_llm", "row_seed"]


def load_llm(spec: str, **kwargs: Any) -> LLM:
    """A backend from a one-string spec:

    - `hf:NAME` or a bare preset name: `HFBackend.from_preset(NAME)` (NAME: tiny, smollm2-135m, a local path or a
      Hugging Face id); kwargs go to `from_preset` (device, batch_size, dtype).
    - `http://host:port/v1#MODEL` or `https://...`: `OpenAIHTTPBackend(url, model=MODEL)` (without `#MODEL` the
      server's first listed model); kwargs go to the backend (api_key, timeout, max_retries, ...).
    """
    if spec.startswith(("http://", "https://")):
        from dreamgym.llm.http import OpenAIHTTPBackend

        url, _, model = spec.partition("#")
        return OpenAIHTTPBackend(url, model=model or None, **kwargs)
    from dreamgym.llm.hf import HFBackend

    return HFBackend.from_preset(spec.removeprefix("hf:"), **kwargs)
