"""The experience model's settings: what it sees in a prompt, what it writes, how it samples and retries, and
which environment shortcuts answer steps without it.

Owns: `ExperienceModelConfig`, saved in every checkpoint's `em_config.json` under "model" (field names and
defaults are part of the checkpoint format: prompts at inference must be built exactly as in training).
Must not know: how prompts are rendered, models, torch, training, any concrete environment.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamgym.config import ConfigError


@dataclass
class ExperienceModelConfig:
    """What the experience model sees and how it answers. Saved with each checkpoint: prompts at inference
    must be built exactly as in training."""

    k: int = 2
    """Retrieved transitions per query (the paper's top-k demonstrations; 2 keeps CPU-sized prompts short)."""
    history: int = 3
    """Last H actions shown as history."""
    use_retrieval: bool = True
    """Ablation switch: False drops the retrieved examples from the prompt."""
    use_reasoning: bool = True
    """Ablation switch: False drops the <think> trace from the output (and its supervision)."""
    use_history: bool = True
    """Ablation switch: False drops the history line from the prompt."""
    history_state_chars: int = 0
    """Characters of each history state shown next to its action (0: actions only, the compact default)."""
    example_reasoning: bool = True
    """Show each retrieved example's reasoning trace in its outcome (with use_reasoning): the example then reads
    exactly like the answer, so a small model can copy a whole matching answer, outcome included (measured on
    the dial: without the traces the tiny model never took the reward from an identical retrieved step)."""
    example_state_chars: int = 240
    """Each retrieved example's state is clipped to this many characters."""
    example_next_state_chars: int = 400
    """Each retrieved example's next state is clipped to this many characters."""
    max_state_chars: int = 4000
    """The current state is clipped to this many characters (before token-level fitting)."""
    max_prompt_tokens: int = 1280
    """Prompts longer than this drop examples (last first), then history, then clip the state."""
    max_new_tokens: int = 512
    """Generation budget per prediction (and the longest completion kept for training)."""
    system_prompt: bool = False
    """Send SYSTEM_PROMPT as a system message (useful for pretrained instruct models)."""
    temperature: float = 0.0
    """Sampling temperature of predictions; 0 is greedy (deterministic for the same prompts)."""
    top_p: float = 1.0
    """Nucleus mass when sampling."""
    retries: int = 1
    """Re-generations of a malformed output before the failure state."""
    retry_temperature: float = 0.7
    """Retries sample (greedy would repeat the same malformed text)."""
    binary_reward: bool = True
    """Train on the paper's outcome reward (1 at a successful final step, else 0) instead of the env's raw reward."""
    embedder: str = "minilm"
    """Retrieval embedder (dreamgym.embed.make_embedder): 'minilm' (all-MiniLM-L6-v2) or 'hashing[:dim]' (fast),
    optionally with '+action[:weight]' (the action weighs as much as the task and state in the key)."""
    mmr_lambda: float | None = None
    """Diversity re-ranking of retrieved examples (maximal marginal relevance); None: plain top-k."""
    retrieve_real_only: bool = True
    """Retrieve only real transitions; False retrieves synthetic ones too (the paper's co-evolving buffer).
    Measured on the dial: a model that copies identical retrieved steps also copies its own earlier mistakes
    once they are in the buffer, and synthetic success fell from 22% to 6% over 8 dream iterations. Synthetic
    transitions are stored either way (the curriculum and analyses read them)."""

    compact_states: bool = True
    """Write only the part of the next state the family's `model_state` keeps; `complete_state` restores the rest
    from the state the action was taken in (families without the hooks are unaffected; a `[reset]` answer is
    always whole). ALFWorld: the receptacle list and the unexplored line are carried, not written, which halves
    the characters a synthetic step generates (0.49 on 4,253 real steps) and removes the model's commonest
    copying error. Checkpoints saved before this field read it as False."""
    write_observation: bool = False
    """Write only the observation (the environment's feedback to the action): the family's `model_observation`
    gives it for a real state and `state_after` folds it into the previous state with the real environment's own
    bookkeeping (families without the hooks fall back to `compact_states`; a `[reset]` answer is always whole).
    ALFWorld: the whole state is rebuilt from the observation on 15,648 of 15,648 real steps, and the model no
    longer writes the task, inventory and known contents, which the tiny model miscopied on almost every step."""
    copy_hidden_outcomes: bool = False
    """At inference, answer a step whose outcome depends only on the task's hidden world (the family's
    `hidden_outcome_key`; ALFWorld: the first look into a receptacle) with the observation a real transition of
    the same game recorded under the same key, folded into the current state by the family's `state_after`,
    without a model call. The model answers every other step, and every step no real transition covers.
    Departs from the paper, where the model writes every outcome guided by its retrieved examples: the tiny
    model reproduced a retrieved example holding the exact answer on about 1 step in 8 (README section 11).
    WebShop keys a search, a product's page and its tabs, and results paging by the catalog, so any task's real
    step answers them. Needs the family's `hidden_outcome_key`, `model_observation` and `state_after` hooks;
    training ignores it."""
    derive_determined_outcomes: bool = False
    """At inference, answer a step whose outcome the state alone fixes (the family's `determined_outcome`;
    ALFWorld: a take of an object the state shows at hand's reach, a revisit of a receptacle whose contents are
    known, an admissible move/heat/cool/clean/close/use, inventory, look) with the family's own answer, folded in
    by `state_after`, without a model call. Departs from the paper like `copy_hidden_outcomes`: these were the
    first divergences of the tiny ALFWorld model's dream once hidden steps were copied (README sections 12-13).
    With both on, the model writes only what neither the state nor a real step of the same game fixes (on a game
    the data played: a first look no play recorded, `help`). WebShop: Back to Search and an option click. Needs
    the `determined_outcome`, `model_observation` and `state_after` hooks; training ignores it."""
    reject_contradictions: bool = False
    """Treat an output whose next state contradicts the action (the family's `outcome_contradiction`; ALFWorld:
    feedback that restates another command, "go to stoveburner 3" -> "You arrive at stoveburner 4") as
    malformed: it is counted (`contradicted`) and re-generated like any malformed output, and the failure state
    ends the episode when every retry contradicts too. Families without the hook are unaffected; the ALFWorld hook
    flags none of 27,107 recorded real steps. Off by default: the tiny ALFWorld model repeats the
    same contradiction on retry, so a scripted policy's dream episodes ended in the failure state 61-69% of the
    time (13% without), and a policy's dream GRPO iteration won 0 of 64 (README section 12)."""

    def validate(self) -> None:
        if self.k < 0 or self.history < 0 or self.retries < 0:
            raise ConfigError("k, history and retries must be >= 0")
        try:
            from dreamgym.embed import make_embedder

            make_embedder(self.embedder, cache=False)  # parses the spec; MiniLM loads lazily, on first encode
        except ValueError as e:
            raise ConfigError(f"embedder: {e}") from None
