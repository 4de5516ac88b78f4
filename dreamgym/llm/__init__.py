"""The LLM seam: one small interface (`LLM.generate`) and its backends.

Owns: `ChatRequest`, `SamplingParams`, `Completion`, the `LLM` protocol, and `load_llm` which picks a backend.
Must not know: environments, trainers, the experience model.

Backends live in their own modules: `dreamgym.llm.fake` (scripted, for unit tests), `dreamgym.llm.hf`
(local transformers model, token ids and logprobs), `dreamgym.llm.http` (any OpenAI-compatible endpoint).
"""

from dreamgym.llm.base import LLM, ChatRequest, Completion, SamplingParams

__all__ = ["LLM", "ChatRequest", "Completion", "SamplingParams"]
