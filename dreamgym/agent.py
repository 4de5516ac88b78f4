"""The agent policy's text interface: the prompt it reads each turn and the reply format it writes.

Owns: the system prompt, `build_messages` (the chat request for one turn, rebuilt every turn from the task,
the last H turns and the current state, so context stays bounded on long episodes), the reply format
`<think>…</think><action>…</action>`, `format_response` (the inverse, used to turn demonstrations into
training targets), `parse_action`, and `ground_action` (an action mapped onto the environment's admissible
actions by string similarity).
Must not know: models, tokenizers, torch, environments (states are plain strings), trainers.

Reply format (documented contract between the prompt, SFT targets and the rollout engine):

    <think>free-text reasoning, may be empty</think><action>exactly one action string</action>

`parse_action` returns the stripped text between the first `<action>` and the following `</action>`; it
returns None when either tag is missing or the action is empty. Text outside the tags is ignored. The rollout
engine stops generation at `</action>` (ACTION_STOP) so a reply never holds two actions. What happens with a
reply that has no parseable action is the rollout engine's decision (see dreamgym.rl.rollout).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz

from dreamgym.config import ranged
from dreamgym.llm.base import ChatRequest
from dreamgym.types import Task

ACTION_STOP = "</action>"

# Worded with the vocabulary the tiny preset's tokenizer was trained on, so it costs few tokens there.
SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. Read the task and the current state, think step by step "
    "inside <think> </think>, then give exactly one action inside <action> </action>."
)

# An admissible entry such as `search[<query>]` is a form: every `search[...]` is valid where it is offered.
_FORM_RE = re.compile(r"^([\w-]+)\[<[^<>\[\]]*>\]$")
_VERB_RE = re.compile(r"^([\w-]+)\[")


@dataclass
class AgentConfig:
    history: int = ranged(2, ge=0)
    """H: how many of the most recent (state, action) turns are shown in the prompt."""
    show_admissible: bool = True
    """List the environment's admissible actions in the prompt when it can name them."""
    max_admissible: int = ranged(60, ge=0)
    """At most this many admissible actions are listed (long ALFWorld lists are cut, with a count)."""
    system_prompt: str = ""
    """Replaces the default system prompt when non-empty."""


def build_messages(task: Task, history: Sequence[tuple[str, str]], state: str,
                   admissible_actions: Sequence[str] | None = None,
                   config: AgentConfig | None = None) -> ChatRequest:
    """The chat request for one turn.

    `history` is the episode's earlier turns as (state seen, action taken), oldest first (the same shape as
    `Transition.history`); only the last `config.history` are shown. `state` is the current (abstract) state.
    """
    cfg = config or AgentConfig()
    shown = list(history)[-cfg.history:] if cfg.history > 0 else []
    parts = [f"Task: {task.instruction}"]
    if shown:
        first = len(history) - len(shown) + 1
        lines = [f"Step {first + i}:\n{s}\nAction: {a}" for i, (s, a) in enumerate(shown)]
        parts.append("History:\n" + "\n".join(lines))
    parts.append(f"Current state:\n{state}")
    if cfg.show_admissible and admissible_actions:
        acts = list(admissible_actions)
        listed = " | ".join(acts[: cfg.max_admissible])
        more = f" (and {len(acts) - cfg.max_admissible} more)" if len(acts) > cfg.max_admissible else ""
        parts.append(f"Available actions: {listed}{more}")
    return [{"role": "system", "content": cfg.system_prompt or SYSTEM_PROMPT},
            {"role": "user", "content": "\n\n".join(parts)}]


def format_response(action: str, thought: str = "") -> str:
    """The reply the policy should write for `action` (with an optional thought): the SFT/DPO target text."""
    return f"<think>{thought}</think><action>{action}</action>"


def _between(text: str, opening: str, closing: str) -> str | None:
    """The text between the first `opening` tag and the next `closing` tag, or None when either is missing.

    Two `str.find` scans, so linear in `len(text)`. (A lazy `<tag>(.*?)</tag>` regex search rescans the rest of
    the text from every opening tag: 12 s for 32k repeated `<action>`, benchmarks/bench_parser.py.) Only the first
    opening tag needs trying: a closing tag after a later one is also after the first."""
    start = text.find(opening)
    if start < 0:
        return None
    start += len(opening)
    end = text.find(closing, start)
    return None if end < 0 else text[start:end]


def parse_action(text: str) -> str | None:
    """The action in a reply, or None when the reply has no complete, non-empty `<action>…</action>`."""
    inner = _between(text, "<action>", ACTION_STOP)
    action = " ".join(inner.split()) if inner is not None else ""
    return action or None


def parse_thought(text: str) -> str:
    """The reasoning inside `<think>…</think>` ("" when absent)."""
    inner = _between(text, "<think>", "</think>")
    return inner.strip() if inner is not None else ""


def ground_action(action: str, admissible: Sequence[str], min_similarity: float) -> str:
    """`action` mapped onto the environment's admissible actions: itself when it is admissible (up to case and
    whitespace) or fills a form the list offers (`search[...]` where `search[<query>]` is listed), else the most
    similar listed action when the similarity (rapidfuzz's normalised Indel similarity, 2·LCS / (len a + len b), on
    lower-cased text, in [0, 1]) is at least `min_similarity`, else unchanged (the environment then answers with
    its invalid-action notice).

    Why: a small policy that means `click[B0A7Q2X9K1]` but writes one character wrong wastes the step and, with
    greedy decoding, repeats it until the step limit. Mapping a generated action to the closest admissible one
    is the usual grounding step for LLM agents (Huang et al. 2022, "Language Models as Zero-Shot Planners").
    The policy is still trained on the tokens it generated; the mapping is part of the environment as the
    policy sees it, the same in real and synthetic environments.
    """
    key = " ".join(action.split()).lower()
    norm = [" ".join(c.split()).lower() for c in admissible]
    forms = {m.group(1) for m in map(_FORM_RE.match, norm) if m}
    verb = _VERB_RE.match(key)
    if key in norm or (verb and verb.group(1) in forms):
        return action
    # Admissible already (the usual case) costs no similarity computation; otherwise the first most similar wins.
    scored = [(fuzz.ratio(key, c, processor=None) / 100.0, i)
              for i, c in enumerate(norm) if not _FORM_RE.match(c)]
    if not scored:
        return action
    ratio, i = max(scored, key=lambda r: (r[0], -r[1]))
    return admissible[i] if ratio >= min_similarity else action
