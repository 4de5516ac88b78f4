"""The experience model's settings: what it sees in a prompt, what it writes, how it samples and retries, and
which environment shortcuts answer steps without it.

Owns: `ExperienceModelConfig`, saved in every checkpoint's `em_config.json` under "model" (field names and
defaults are part of the checkpoint format: prompts at inference must be built exactly as in training).
Must not know: how prompts are rendered, models, torch, training, any concrete environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from dreamgym.config import ConfigError, ranged


@dataclass
class ExperienceModelConfig:
    """What the experience model sees and how it answers. Saved with each checkpoint: prompts at inference
    must be built exactly as in training. Why each default is what it is: docs/decisions.md."""

    # Fixed settings that earlier versions saved as fields (`dreamgym.experience.checkpoint` reads old checkpoints
    # that hold them, and refuses one that holds another value): not settable, read by the prompt format.
    history_state_chars: ClassVar[int] = 0
    """History shows actions only, no states."""
    example_state_chars: ClassVar[int] = 240
    """Each retrieved example's state is clipped to this many characters."""

    k: int = ranged(2, ge=0)
    """Retrieved transitions per query (the paper's top-k demonstrations)."""
    history: int = ranged(3, ge=0)
    """Last H actions shown as history."""
    use_retrieval: bool = True
    """Ablation switch: False drops the retrieved examples from the prompt."""
    use_reasoning: bool = True
    """Ablation switch: False drops the <think> trace from the output (and its supervision)."""
    use_history: bool = True
    """Ablation switch: False drops the history line from the prompt."""
    example_reasoning: bool = True
    """Show each retrieved example's reasoning trace in its outcome (with use_reasoning)."""
    example_next_state_chars: int = ranged(400, ge=0)
    """Each retrieved example's next state is clipped to this many characters."""
    max_state_chars: int = ranged(4000, ge=1)
    """The current state is clipped to this many characters (before token-level fitting)."""
    max_prompt_tokens: int = ranged(1280, ge=1)
    """Prompts longer than this drop examples (last first), then history, then clip the state."""
    max_new_tokens: int = ranged(512, ge=1)
    """Generation budget per prediction (and the longest completion kept for training)."""
    system_prompt: bool = False
    """Send SYSTEM_PROMPT as a system message (useful for pretrained instruct models)."""
    temperature: float = ranged(0.0, ge=0)
    """Sampling temperature of predictions; 0 is greedy (deterministic for the same prompts)."""
    top_p: float = ranged(1.0, gt=0, le=1)
    """Nucleus mass when sampling."""
    retries: int = ranged(1, ge=0)
    """Re-generations of a malformed output (sampled) before the failure state."""
    structured_output: bool = True
    """Decode inside the output format (a regex the backend enforces), so no answer is malformed; turn off for a
    server that rejects vLLM's `structured_outputs` request field."""
    max_think_tokens: int = ranged(160, ge=1)
    """Tokens the <think> trace may take before structured decoding closes it, so it leaves room for the state."""
    binary_reward: bool = True
    """Train on the paper's outcome reward (1 at a successful final step, else 0) instead of the env's raw reward."""
    embedder: str = "minilm"
    """Retrieval embedder (dreamgym.replay.embed.make_embedder): 'minilm' or 'hashing[:dim]', optionally
    '+action[:weight]'."""
    mmr_lambda: float | None = ranged(None, ge=0, le=1)
    """Diversity re-ranking of retrieved examples (maximal marginal relevance); None: plain top-k."""
    compact_states: bool = True
    """Write only the part of the next state the family's `model_state` keeps; `complete_state` restores the rest."""
    write_observation: bool = False
    """Write only the observation; the family's `state_after` folds it into the previous state."""
    state_format: Literal["whole", "edit"] = "whole"
    """How the next state is written: 'whole', or 'edit' (the line edit of the current state, whole where shorter)."""
    copy_hidden_outcomes: bool = False
    """At inference, answer a step whose outcome depends only on the task's hidden world from a real step of the
    same task under the same `hidden_outcome_key`, without a model call."""
    derive_determined_outcomes: bool = False
    """At inference, answer a step whose outcome the state alone fixes with the family's `determined_outcome`."""
    reject_contradictions: bool = False
    """Treat an output whose next state contradicts the action (the family's `outcome_contradiction`) as malformed."""

    def validate(self) -> None:
        try:
            from dreamgym.replay.embed import make_embedder

            make_embedder(self.embedder, cache=False)  # parses the spec; MiniLM loads lazily, on first encode
        except ValueError as e:
            raise ConfigError("embedder", str(e), "minilm or hashing[:dim], optionally +action[:weight]") from None
