"""`load_llm(spec)`: one string picks and builds an LLM backend ("hf:tiny", "http://host:8000/v1#model").

Owns: the spec syntax. Must not know: environments, trainers.
Kept out of `dreamgym.llm/__init__` on purpose: the seam's types must stay importable by light modules
(environments, buffer, curriculum) without even a lazy path to torch or transformers.
"""

from __future__ import annotations

from typing import Any

from dreamgym.llm.base import LLM


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
