"""The LLM seam: one small interface (`LLM.generate`) and its backends.

Owns: `ChatRequest`, `SamplingParams`, `Completion`, the `LLM` protocol and `row_seed` (re-exported from
`dreamgym.llm.base`).
Must not know: environments, trainers, the experience model.

Backends live in their own modules: `dreamgym.llm.fake` (scripted, for unit tests), `dreamgym.llm.hf`
(local transformers model, token ids and logprobs), `dreamgym.llm.http` (any OpenAI-compatible endpoint);
`dreamgym.llm.load.load_llm("hf:tiny" | "http://host:port/v1#model")` picks one from a string. None of them is
imported here, so importing the seam's types costs nothing and reaches no model library.
"""

from dreamgym.llm.base import LLM, ChatRequest, Completion, SamplingParams, row_seed

__all__ = ["LLM", "ChatRequest", "Completion", "SamplingParams", "row_seed"]
