"""The reasoning experience model M_exp: prompt format, strict output format, robust parser, batched
prediction, SFT training and the `dreamgym train-em` command.

Owns: how a transition query is written as a chat request (task, history window, current abstract state,
action, k retrieved transitions), the documented output format and its parser, the failure state, the
experience-model checkpoint layout, and the supervised training that teaches a preset the format.
Must not know: any concrete environment (families are reached through `dreamgym.envs.family` only for their
reasoning traces and, with `compact_states` / `write_observation` / `copy_hidden_outcomes` /
`reject_contradictions`, their `model_state` / `complete_state` / `model_observation` / `state_after` /
`hidden_outcome_key` / `outcome_contradiction` hooks), trainers of the agent, the replay buffer's storage (it
is used through `add`/`retrieve`).
torch, transformers and peft are imported inside the functions that need them, so prediction through another
backend of the LLM seam (and the synthetic environment built on it) never loads them.

Input (one chat request per query; `render_user` below):

    Task: <instruction>
    Examples:                       (k retrieved transitions; absent with use_retrieval=False)
    ## 1
    State: <s clipped>
    Action: <a>
    <state>
    <s' clipped>
    </state>
    <reward><r></reward>
    <done><true|false></done>
    ...                             (the example's outcome in the output format, so it can be copied)
    History: <a_{t-H}> ; ... ; <a_{t-1}>   (absent with use_history=False or at the first step)
    State:
    <s_t>
    Action: <a_t>

Output (strict; the model is trained to write exactly this, the parser is lenient about whitespace and case):

    <think>why a_t in s_t leads to s_{t+1} and r</think>     (absent with use_reasoning=False)
    <state>
    <s_{t+1}, the next abstract state>
    </state>
    <reward><r: 0 or 1, or a decimal in [0, 1] with binary_reward=False></reward>
    <done><true|false></done>

`done` means the task dynamics ended the episode (the real environment's `terminated`); truncation by a step
limit is the synthetic environment's business, not the model's. The initial state of an episode is the answer
to the pseudo-action `[reset]` on the empty state, so the model can also write initial states for tasks the real
environment cannot reset to (curriculum variants).

Failure state (our choice, after the paper's "an invalid action leads to a failure state with reward 0"): when
an output stays malformed (unparseable, or, with `reject_contradictions`, a next state the family says cannot
answer the action) after `retries` re-generations (sampled at `retry_temperature`, one batched call per
retry round), the prediction is `FAILURE_STATE` with reward 0.0 and done True, `failed=True`, and
`model.stats["failures"]` is incremented. Done is True because there is no valid state to continue from; the
synthetic environment reports it as a truncation (the world did not end the task; the simulator gave up) with
`info["em_failure"] = True`, so trainers can tell it from a real outcome. Nothing here raises on bad output.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.config import ConfigError, describe, load_config, to_dict
from dreamgym.llm.base import ChatRequest, SamplingParams
from dreamgym.paths import atomic_write_text
from dreamgym.types import Task, Trajectory, Transition

log = logging.getLogger(__name__)

RESET_ACTION = "[reset]"
"""Pseudo-action whose answer is the initial state of an episode (the query's state is empty)."""
FAILURE_STATE = "[failure] The simulated environment could not produce a valid next state. The episode ends."
"""The state returned when the model's output stays malformed after all retries."""
STOP = "</done>"
FORMAT_VERSION = 4
"""Bump when the prompt or output format changes: checkpoints record it, cached test artifacts key on it."""
EM_CONFIG_FILE = "em_config.json"
MODEL_SUBDIR = "model"
TRAIN_STATE_FILE = "trainer_state.pt"

SYSTEM_PROMPT = (
    "You are an experience model. Given the task, the history, the current state and the agent's action, reason "
    "about what the action does inside <think> </think>, then write the next state inside <state> </state>, the "
    "reward inside <reward> </reward> and whether the episode ends inside <done> </done>.")
"""System message (sent when `ExperienceModelConfig.system_prompt` is on; the tiny preset learns without it)."""


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


# --------------------------------------------------------------------------------------------------- format


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n)].rstrip() + " …"


def format_reward(r: float) -> str:
    return f"{round(float(r), 3):g}"


def _family_hook(env: str, name: str) -> Callable[..., str] | None:
    if not env:
        return None
    from dreamgym.envs import family

    try:
        return getattr(family(env), name, None)
    except (ImportError, ValueError):  # an unknown family, or one whose optional dependency is missing
        return None


def _observation_hooks(env: str) -> tuple[Callable[..., str], Callable[..., str]] | None:
    """The family's (`model_observation`, `state_after`) pair, or None unless it has both."""
    observe, after = _family_hook(env, "model_observation"), _family_hook(env, "state_after")
    return (observe, after) if observe and after else None


def written_state(tr: Transition, cfg: ExperienceModelConfig) -> str:
    """`tr.next_state` as the model writes it: only its observation (the family's `model_observation`) under
    `cfg.write_observation`, else compacted by the family's `model_state` under `cfg.compact_states`; whole
    after `[reset]` (there is no previous state to complete it from)."""
    if not tr.state.strip():
        return tr.next_state
    hooks = _observation_hooks(tr.task.env) if cfg.write_observation else None
    if hooks:
        return hooks[0](tr.next_state)
    if not cfg.compact_states:
        return tr.next_state
    fn = _family_hook(tr.task.env, "model_state")
    return fn(tr.next_state) if fn else tr.next_state


def completed_state(written: str, query: Transition, cfg: ExperienceModelConfig, env: str | None = None) -> str:
    """The inverse of `written_state`: the whole next state from the model's text and the query's state."""
    if not query.state.strip():
        return written
    hooks = _observation_hooks(env or query.task.env) if cfg.write_observation else None
    if hooks:
        return hooks[1](query.state, written)
    if not cfg.compact_states:
        return written
    fn = _family_hook(env or query.task.env, "complete_state")
    return fn(written, query.state) if fn else written


def render_example(i: int, ex: Transition, cfg: ExperienceModelConfig) -> str:
    """One retrieved transition. Its outcome is written exactly as the model writes its own answer (with the
    reasoning trace when `example_reasoning` is on and the example has one), so a small model can copy what
    applies: the tags make the copied span unambiguous."""
    show = cfg.use_reasoning and cfg.example_reasoning and bool(ex.reasoning)
    outcome = format_completion(_clip(written_state(ex, cfg), cfg.example_next_state_chars), ex.reward, ex.done,
                                _clip(ex.reasoning or "", cfg.example_next_state_chars), use_reasoning=show)
    return f"## {i}\nState: {_clip(ex.state, cfg.example_state_chars)}\nAction: {ex.action}\n{outcome}"


def render_user(query: Transition, examples: list[Transition], cfg: ExperienceModelConfig,
                history: int | None = None, state_chars: int | None = None) -> str:
    """The user message for one query (see the module docstring). `history`/`state_chars` override the config
    while a prompt is being fitted to the token budget."""
    parts = [f"Task: {query.task.instruction}"]
    if cfg.use_retrieval and examples:
        parts.append("Examples:")
        parts += [render_example(i + 1, ex, cfg) for i, ex in enumerate(examples)]
    h = cfg.history if history is None else history
    if cfg.use_history and h > 0 and query.history:
        items = []
        for s, a in query.history[-h:]:
            if cfg.history_state_chars > 0:
                first = s.strip().splitlines()[0] if s.strip() else ""
                items.append(f"{_clip(first, cfg.history_state_chars)} -> {a}")
            else:
                items.append(a)
        parts.append("History: " + " ; ".join(items))
    state = _clip(query.state, cfg.max_state_chars if state_chars is None else state_chars)
    parts.append(f"State:\n{state if state.strip() else '(none)'}\nAction: {query.action}")
    return "\n".join(parts)


def build_request(query: Transition, examples: list[Transition], cfg: ExperienceModelConfig,
                  count_tokens: Callable[[ChatRequest], int] | None = None,
                  stats: Counter | None = None) -> ChatRequest:
    """The chat request for `query`, fitted to `cfg.max_prompt_tokens` when `count_tokens` is given: drop
    examples from the end, then the history, then halve the state until it fits."""

    def make(ex: list[Transition], h: int, sc: int) -> ChatRequest:
        msgs = [{"role": "system", "content": SYSTEM_PROMPT}] if cfg.system_prompt else []
        return msgs + [{"role": "user", "content": render_user(query, ex, cfg, history=h, state_chars=sc)}]

    examples = list(examples[: cfg.k]) if cfg.use_retrieval else []
    h, sc = cfg.history, cfg.max_state_chars
    req = make(examples, h, sc)
    if count_tokens is None:
        return req
    while count_tokens(req) > cfg.max_prompt_tokens:
        if examples:
            examples.pop()
            what = "examples_dropped"
        elif h > 0 and query.history and cfg.use_history:
            h = 0
            what = "history_dropped"
        elif sc > 64:
            sc = min(sc, len(query.state)) // 2
            what = "state_clipped"
        else:
            break
        if stats is not None:
            stats[what] += 1
        req = make(examples, h, sc)
    return req


def format_completion(next_state: str, reward: float, done: bool, reasoning: str | None,
                      use_reasoning: bool = True) -> str:
    """The training target in the strict output format (see the module docstring)."""
    think = f"<think>{' '.join((reasoning or '').split())}</think>\n" if use_reasoning else ""
    return (f"{think}<state>\n{next_state.strip()}\n</state>\n<reward>{format_reward(reward)}</reward>\n"
            f"<done>{'true' if done else 'false'}</done>")


@dataclass
class ParsedOutput:
    next_state: str
    reward: float
    done: bool
    reasoning: str


_STATE_RE = re.compile(r"<state>(.*?)(?:</state>|(?=<reward>)|(?=<done>))", re.S | re.I)
_REWARD_RE = re.compile(r"<reward>\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?|true|false)\s*(?:</reward>)?", re.I)
_DONE_RE = re.compile(r"<done>\s*(true|false|yes|no|1|0)\b", re.I)
_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|(?=<state>))", re.S | re.I)


def parse_completion(text: str) -> tuple[ParsedOutput | None, str]:
    """(parsed, "") for a well-formed output, else (None, reason). Lenient about whitespace, case, a missing
    </state> or </reward> before the next tag, and text around the tags; strict about the presence of a
    non-empty state, a reward in [0, 1] and a done flag."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty output"
    m_state = _STATE_RE.search(text)
    if not m_state:
        return None, "no <state> block"
    state = m_state.group(1).strip("\n").strip()
    if not state:
        return None, "empty <state>"
    tail = text[m_state.end():]
    m_r = _REWARD_RE.search(tail)
    if not m_r:
        return None, "no parseable <reward>"
    raw = m_r.group(1).lower()
    reward = 1.0 if raw == "true" else 0.0 if raw == "false" else float(raw)
    if not (0.0 <= reward <= 1.0) or math.isnan(reward):
        return None, f"reward {raw} outside [0, 1]"
    m_d = _DONE_RE.search(tail[m_r.end():]) or _DONE_RE.search(tail)
    if not m_d:
        return None, "no parseable <done>"
    done = m_d.group(1).lower() in ("true", "yes", "1")
    m_t = _THINK_RE.search(text[: m_state.start()])
    reasoning = " ".join(m_t.group(1).split()) if m_t else ""
    return ParsedOutput(next_state=state, reward=reward, done=done, reasoning=reasoning), ""


# ------------------------------------------------------------------------------------------------ prediction


@dataclass
class Prediction:
    """The experience model's answer for one query."""

    next_state: str
    reward: float
    done: bool
    reasoning: str = ""
    failed: bool = False
    """True when every attempt was malformed: next_state is FAILURE_STATE, reward 0, done True."""
    error: str = ""
    """Why the last malformed attempt was rejected (empty when parsed)."""
    attempts: int = 1
    text: str = ""
    """The raw text of the accepted (or last) attempt."""
    examples: list[Transition] = field(default_factory=list)
    """The retrieved transitions that were in the prompt."""


def query_for(task: Task, state: str, action: str, history: list[tuple[str, str]] | None = None,
              trajectory_id: str = "", step_index: int = 0, seed: int | None = None) -> Transition:
    """A query is a Transition whose outcome fields are empty."""
    return Transition(task=task, history=list(history or []), state=state, action=action, next_state="",
                      reward=0.0, done=False, trajectory_id=trajectory_id, step_index=step_index, seed=seed)


class ExperienceModel:
    """M_exp over any LLM-seam backend, grounded by an optional replay buffer.

    `predict(queries)` retrieves k neighbours for all queries at once (excluding each query's own trajectory),
    makes one `llm.generate` call for the batch, one more per retry round for the malformed ones, and never
    raises on bad output. `stats` counts predictions, generate calls, malformed outputs, retries, failures and
    prompt-fitting events.
    """

    def __init__(self, llm: Any, buffer: Any = None, config: ExperienceModelConfig | None = None,
                 env: str | None = None):
        self.llm = llm
        self.buffer = buffer
        self.config = config or ExperienceModelConfig()
        self.env = env
        self.stats: Counter = Counter()
        # copy_hidden_outcomes: (env, the family's key) -> the first real transition recorded under it, and how
        # many of the buffer's real transitions (in insertion order) the table has read.
        self._hidden: dict[tuple[str, str], Transition] = {}
        self._hidden_read = 0

    # Token counting is only possible when the backend exposes its prompt tokenization (HFBackend does).
    def _count_tokens(self) -> Callable[[ChatRequest], int] | None:
        fn = getattr(self.llm, "prompt_ids", None)
        return (lambda req: len(fn(req))) if callable(fn) else None

    def retrieve(self, queries: list[Transition]) -> list[list[Transition]]:
        cfg = self.config
        if not (cfg.use_retrieval and cfg.k > 0 and self.buffer is not None and queries):
            return [[] for _ in queries]
        try:
            # Twins from other episodes stay: a synthetic query carries no answer, so training and fidelity
            # queries (which do) must retrieve exactly what a synthetic step would.
            return self.buffer.retrieve(queries, k=cfg.k, env=self.env, real_only=cfg.retrieve_real_only,
                                        mmr_lambda=cfg.mmr_lambda, exclude_same_trajectory=True,
                                        exclude_twins=False)
        except Exception as e:  # noqa: BLE001 - retrieval helps; losing it for one batch must not end a rollout
            self.stats["retrieval_errors"] += 1
            log.warning("experience model: retrieval failed (%s: %s); predicting without examples",
                        type(e).__name__, e)
            return [[] for _ in queries]

    def requests(self, queries: list[Transition], examples: list[list[Transition]] | None = None) -> list[ChatRequest]:
        if examples is None:
            examples = self.retrieve(queries)
        count = self._count_tokens()
        return [build_request(q, ex, self.config, count, self.stats) for q, ex in zip(queries, examples)]

    def _params(self, temperature: float, seed: int | None) -> SamplingParams:
        return SamplingParams(temperature=temperature, top_p=self.config.top_p,
                              max_tokens=self.config.max_new_tokens, stop=[STOP], seed=seed)

    def _generate(self, reqs: list[ChatRequest], params: SamplingParams,
                  seeds: list[int] | None = None) -> list[str]:
        self.stats["generate_calls"] += 1
        try:
            # Without per-query seeds the call stays the seam's plain form, which any backend accepts.
            comps = self.llm.generate(reqs, params) if seeds is None else self.llm.generate(reqs, params, seeds=seeds)
            texts = [c.text for c in comps]
            if len(texts) != len(reqs):
                raise RuntimeError(f"backend returned {len(texts)} completions for {len(reqs)} requests")
            return texts
        except Exception as e:  # noqa: BLE001 - a backend error is a malformed output for every request in it
            self.stats["backend_errors"] += 1
            log.warning("experience model: generate failed (%s: %s)", type(e).__name__, e)
            return [""] * len(reqs)

    def _hidden_key(self, tr: Transition) -> tuple[str, str] | None:
        fn = _family_hook(tr.task.env, "hidden_outcome_key") if tr.state.strip() else None
        key = fn(tr.task, tr.state, tr.action) if fn else None
        return (tr.task.env, key) if key else None

    def _hidden_table(self) -> dict[tuple[str, str], Transition]:
        """The real transitions of the buffer by hidden-outcome key, read incrementally (the buffer only appends;
        a smaller buffer than last time means it was rebuilt, and the table is too)."""
        try:
            real = self.buffer.transitions(env=self.env, real_only=True)
        except Exception as e:  # noqa: BLE001 - the copy is an optimisation of fidelity; the model still answers
            self.stats["retrieval_errors"] += 1
            log.warning("experience model: reading the buffer failed (%s: %s)", type(e).__name__, e)
            return {}
        if len(real) < self._hidden_read:
            self._hidden, self._hidden_read = {}, 0
        for tr in real[self._hidden_read:]:
            key = self._hidden_key(tr)
            if key is not None:
                self._hidden.setdefault(key, tr)
        self._hidden_read = len(real)
        return self._hidden

    def _copied_outcomes(self, queries: list[Transition]) -> dict[int, Prediction]:
        """Predictions, by query index, that a real transition (`copy_hidden_outcomes`) or the state itself
        (`derive_determined_outcomes`) fixes."""
        copy = self.config.copy_hidden_outcomes and self.buffer is not None
        if not (copy or self.config.derive_determined_outcomes):
            return {}
        from dreamgym.reasoning import EnvTeacher

        table = self._hidden_table() if copy else {}
        out: dict[int, Prediction] = {}
        for i, q in enumerate(queries):
            hooks = _observation_hooks(q.task.env)
            if hooks is None:
                continue
            observe, after = hooks
            key = self._hidden_key(q) if copy else None
            hit = table.get(key) if key is not None else None
            derived = self._determined(q) if hit is None else None
            if hit is not None:
                tr = dataclasses.replace(q, next_state=after(q.state, observe(hit.next_state)), reward=hit.reward,
                                         done=hit.done)
                self.stats["hidden_copied"] += 1
            elif derived is not None:
                # Reward and end are not the state's to say here: the synthetic env grounds them (reward_from).
                tr = dataclasses.replace(q, next_state=after(q.state, derived), reward=0.0, done=False)
                self.stats["determined"] += 1
            else:
                continue
            # The trace is re-derived for this state by the teacher the model was trained on (the recorded one
            # speaks of the other episode's goal conditions); a family without one gives an empty trace.
            reasoning = EnvTeacher().explain([tr])[0] if self.config.use_reasoning else ""
            out[i] = Prediction(tr.next_state, float(tr.reward), bool(tr.done), reasoning, attempts=0, text="",
                                examples=[hit] if hit is not None else [])
        return out

    def predict(self, queries: list[Transition], *, examples: list[list[Transition]] | None = None,
                seed: int | None = None, seeds: list[int] | None = None) -> list[Prediction]:
        """One prediction per query, in order. `examples` overrides retrieval (one list per query); `seed`
        seeds sampling (used by retries, and by every attempt when `temperature` > 0); `seeds` instead gives
        each query its own sampling seed (the LLM seam's common random numbers), retries included. With
        `copy_hidden_outcomes`, the queries a real transition answers are not sent to the model."""
        if not queries:
            return []
        if seeds is not None and len(seeds) != len(queries):
            raise ValueError("predict: seeds must be one per query")
        copied = self._copied_outcomes(queries)
        if not copied:
            return self._predict_model(queries, examples=examples, seed=seed, seeds=seeds)
        rest = [i for i in range(len(queries)) if i not in copied]
        answers = self._predict_model([queries[i] for i in rest],
                                      examples=None if examples is None else [examples[i] for i in rest],
                                      seed=seed, seeds=None if seeds is None else [seeds[i] for i in rest])
        self.stats["predictions"] += len(copied)
        out: list[Prediction] = [copied[i] if i in copied else None for i in range(len(queries))]  # type: ignore[misc]
        for i, p in zip(rest, answers):
            out[i] = p
        return out

    def _determined(self, q: Transition) -> str | None:
        fn = _family_hook(q.task.env, "determined_outcome") if self.config.derive_determined_outcomes else None
        return fn(q.task, q.state, q.action) if fn and q.state.strip() else None

    def _contradiction(self, query: Transition, next_state: str) -> str:
        """Why `next_state` cannot answer `query` (the family's `outcome_contradiction`), or ""."""
        fn = _family_hook(query.task.env, "outcome_contradiction") if self.config.reject_contradictions else None
        reason = fn(query.task, query.state, query.action, next_state) if fn else ""
        return f"contradicts the action: {reason}" if reason else ""

    def _predict_model(self, queries: list[Transition], *, examples: list[list[Transition]] | None = None,
                       seed: int | None = None, seeds: list[int] | None = None) -> list[Prediction]:
        if not queries:
            return []
        if examples is None:
            examples = self.retrieve(queries)
        reqs = self.requests(queries, examples)
        base = 0 if seed is None else int(seed)
        texts = self._generate(reqs, self._params(self.config.temperature, base), seeds)
        results: list[Prediction | None] = [None] * len(queries)
        attempts = [1] * len(queries)
        pending = list(range(len(queries)))
        errors = [""] * len(queries)
        for attempt in range(self.config.retries + 1):
            still = []
            for i, text in zip(pending, texts):
                parsed, err = parse_completion(text)
                state = completed_state(parsed.next_state, queries[i], self.config, self.env) if parsed else ""
                if parsed is not None and (err := self._contradiction(queries[i], state)):
                    self.stats["contradicted"] += 1
                    parsed = None
                if parsed is None:
                    self.stats["malformed"] += 1
                    errors[i] = err
                    still.append((i, text))
                else:
                    results[i] = Prediction(state, parsed.reward, parsed.done, parsed.reasoning,
                                            attempts=attempts[i], text=text, examples=examples[i])
            if not still or attempt == self.config.retries:
                pending_texts = dict(still)
                break
            pending = [i for i, _ in still]
            self.stats["retries"] += len(pending)
            for i in pending:
                attempts[i] += 1
            shift = 1000 * (attempt + 1)
            texts = self._generate([reqs[i] for i in pending],
                                   self._params(self.config.retry_temperature, base + shift),
                                   None if seeds is None else [seeds[i] + shift for i in pending])
        else:  # pragma: no cover - the loop always breaks
            pending_texts = {}
        for i, r in enumerate(results):
            if r is None:
                self.stats["failures"] += 1
                results[i] = Prediction(FAILURE_STATE, 0.0, True, "", failed=True, error=errors[i],
                                        attempts=attempts[i], text=pending_texts.get(i, ""), examples=examples[i])
        self.stats["predictions"] += len(queries)
        return results  # type: ignore[return-value]

    def initial_states(self, tasks: list[Task], *, seed: int | None = None,
                       trajectory_ids: list[str] | None = None) -> list[Prediction]:
        """Model-written initial states: the answer to `[reset]` on the empty state, one per task."""
        ids = trajectory_ids or [""] * len(tasks)
        return self.predict([query_for(t, "", RESET_ACTION, trajectory_id=i) for t, i in zip(tasks, ids)],
                            seed=seed)

    @classmethod
    def load(cls, path: str | Path, buffer: Any = None, *, device: str | None = None, batch_size: int = 32,
             config_overrides: dict[str, Any] | None = None) -> "ExperienceModel":
        """A trained checkpoint (see `train`) with an HFBackend. `buffer` is used for retrieval as is; build one
        with `buffer_for(...)` from the training data to match training."""
        from dreamgym.llm.hf import HFBackend

        meta = read_checkpoint_meta(path)
        # Checkpoints from before `compact_states` were trained on whole states.
        cfg = dataclasses.replace(ExperienceModelConfig(**{"compact_states": False, **meta["model"]}),
                                  **(config_overrides or {}))
        model, tokenizer = load_checkpoint_model(path, device=device)
        return cls(HFBackend(model, tokenizer, batch_size=batch_size), buffer=buffer, config=cfg,
                   env=meta.get("env"))


# ------------------------------------------------------------------------------------------------ data


def _binary(r: float) -> float:
    return 1.0 if r >= 1.0 - 1e-6 else 0.0


def em_transitions(trajectories: list[Trajectory], history: int = 3, *, initial_states: bool = True,
                   binary_reward: bool = True) -> list[Transition]:
    """Experience-model transitions from real trajectories.

    `done` is the step's `terminated` (a step-limit truncation is not the world's doing); a missing
    `next_state` is taken from the following step; trajectories without an id get a stable one (their index),
    so retrieval can exclude a transition's own trajectory; with `initial_states` each trajectory also yields
    the `[reset]` transition to its initial state.
    """
    out: list[Transition] = []
    for n, traj in enumerate(trajectories):
        tid = traj.id or f"traj-{n}"
        if not traj.steps:
            continue
        trs = traj.transitions(history=history)
        for i, (tr, step) in enumerate(zip(trs, traj.steps)):
            tr.trajectory_id = tid
            tr.done = bool(step.terminated)
            if not tr.next_state and i + 1 < len(traj.steps):
                tr.next_state = traj.steps[i + 1].state
            if binary_reward:
                tr.reward = _binary(tr.reward)
        trs = [t for t in trs if t.next_state]
        if initial_states:
            init = traj.initial_state or traj.steps[0].state
            trs.insert(0, Transition(task=traj.task, history=[], state="", action=RESET_ACTION, next_state=init,
                                     reward=0.0, done=False, reasoning="The episode starts in its initial state.",
                                     source=traj.source, seed=traj.seed, trajectory_id=tid, step_index=-1))
        out += trs
    return out


class MemoEmbedder:
    """Wraps an embedder with a text -> vector memo: identical texts are embedded once, and the training
    transitions embedded when the buffer is seeded are not embedded again when they are the queries."""

    def __init__(self, inner: Any):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._memo: dict[str, Any] = {}

    def encode(self, texts: list[str]) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for t, v in zip(missing, np.asarray(self.inner.encode(missing), dtype=np.float32)):
                self._memo[t] = v
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._memo[t] for t in texts])


def buffer_for(transitions: list[Transition], embedder: str = "minilm", path: str | Path | None = None) -> Any:
    """A replay buffer seeded with `transitions` (real seed data), as retrieval sees it during training.
    The embedder is memoized (see `MemoEmbedder`), which makes seeding plus retrieval one embedding pass."""
    from dreamgym.buffer import ReplayBuffer
    from dreamgym.embed import make_embedder

    buf = ReplayBuffer(path, MemoEmbedder(make_embedder(embedder)))
    if transitions:
        buf.add(transitions, seed_data=True)
    return buf


def buffer_spec(meta: dict[str, Any], data: str | Path) -> tuple[str, str, int, bool, str | None]:
    """Everything a checkpoint's seed buffer depends on: (data, embedder, history, binary reward, the family
    whose env teacher annotates the examples or None). Equal specs give equal buffers, so callers may share one."""
    m = meta["model"]
    traced = (m.get("use_reasoning", True) and m.get("example_reasoning")
              and meta.get("train", {}).get("teacher") == "env")
    return (str(data), m.get("embedder", "minilm"), m.get("history", 3), m.get("binary_reward", True),
            meta["env"] if traced else None)


def checkpoint_buffer(checkpoint: str | Path, data: str | Path | None = None,
                      path: str | Path | None = None) -> Any:
    """The replay buffer a checkpoint was trained against: seeded with the transitions of `data` (default: the
    checkpoint's own training data), with the checkpoint's embedder and history window, and the reasoning
    traces its examples showed in training. `path` makes it persistent (reopening an existing buffer only adds
    what is missing)."""
    from dreamgym.data import load_trajectories

    meta = read_checkpoint_meta(checkpoint)
    src = data or meta.get("train", {}).get("data")
    if not src:
        raise ValueError(f"{checkpoint}: no training data recorded; pass data=")
    src, embedder, history, binary_reward, teacher_env = buffer_spec(meta, src)
    trs = em_transitions(load_trajectories(src), history=history, binary_reward=binary_reward)
    if teacher_env is not None:
        from dreamgym.reasoning import EnvTeacher, annotate

        trs = annotate(trs, EnvTeacher(teacher_env))  # examples carry the traces they had in training
    return buffer_for(trs, embedder, path)


# -------------------------------------------------------------------------------------------------- training


@dataclass
class TrainEMConfig:
    """`dreamgym train-em`: SFT of the experience model on annotated real transitions."""

    env: str = "dial"
    """Environment family of the data (dial, webshop, alfworld, ...)."""
    data: str = ""
    """Offline real trajectories (JSONL)."""
    preset: str = "tiny"
    """Model preset, local path or Hugging Face id to start from."""
    out: str = ""
    """Run directory for the checkpoint (default runs/em-<env>-<preset>)."""
    model: ExperienceModelConfig = field(default_factory=ExperienceModelConfig)
    """Prompt/output settings (saved with the checkpoint)."""
    teacher: str = "env"
    """Reasoning traces: 'env' (family explain, fills only missing traces) or 'keep' (use stored traces)."""
    lora: bool | None = None
    """LoRA via PEFT; None: full fine-tuning below `presets.FULL_FT_MAX_PARAMS` parameters (tiny), LoRA above."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    lr: float | None = None
    """Peak learning rate; None: 1e-3 for full fine-tuning, 2e-4 for LoRA."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    batch_size: int = 16
    """Sequences per optimizer step."""
    epochs: float = 2.0
    """Passes over the data (ignored when max_steps > 0)."""
    max_steps: int = 0
    """Optimizer steps; 0: derived from epochs."""
    warmup_steps: int = 30
    """Linear warm-up before the cosine decay."""
    max_transitions: int = 0
    """Use at most this many transitions (0: all), sampled with the seed."""
    balance_outcomes: int = 4
    """Repeat the final transitions of the rarer outcome (won vs not won) up to this many times so both outcomes
    weigh alike (1: off). Offline data from good policies ends mostly in success; a small model trained on it
    learns to always predict success, which is exactly the false-success error that breaks RL in the dream."""
    context_dropout: float = 0.1
    """Share of training prompts without their retrieved examples (and, independently, without history), so
    the model also answers when the buffer has nothing relevant (a fresh buffer, a new task)."""
    seed: int = 0
    """Seed for data order and dropout."""
    threads: int = 2
    """CPU threads of torch and of numpy's BLAS (retrieval scores); both change the trained weights, not only the
    speed (README section 1)."""
    device: str | None = None
    """'cpu', 'cuda' or None (pick automatically)."""
    log_every: int = 20
    """Log the loss every N steps."""
    save_every: int = 500
    """Checkpoint (with optimizer and RNG state, for resume) every N steps."""
    resume: bool = True
    """Continue from the checkpoint in `out` when one exists."""
    task_writing: int = 2000
    """Also teach the curriculum's two prompts (write harder variants of a task; pick one): at most this many
    variant examples, and as many selection examples, built from the tasks the data shows solved (harder = a
    win took more steps; `curriculum.writing_examples`). 0: none -- a model trained from scratch on
    transitions alone then writes no parseable task and the curriculum adds nothing."""


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path) / EM_CONFIG_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{path} is not an experience-model checkpoint (no {EM_CONFIG_FILE})")
    return json.loads(p.read_text())


def load_checkpoint_model(path: str | Path, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a checkpoint: full weights, or the base preset plus the LoRA adapter (merged)."""
    from dreamgym.presets import load_preset

    meta = read_checkpoint_meta(path)
    mdir = Path(path) / MODEL_SUBDIR
    if meta.get("lora"):
        from peft import PeftModel
        from transformers import AutoTokenizer

        base, _ = load_preset(meta["preset"], device=device)
        model = PeftModel.from_pretrained(base, str(mdir)).merge_and_unload()
        model.eval()
        return model, AutoTokenizer.from_pretrained(str(mdir))
    return load_preset(str(mdir), device=device)


def _lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    if step < warmup:
        return peak * (step + 1) / max(1, warmup)
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def encode_examples(transitions: list[Transition], examples: list[list[Transition]], cfg: ExperienceModelConfig,
                    backend: Any, stats: Counter) -> list[tuple[list[int], int]]:
    """Token ids of prompt + completion for each transition, and the prompt length (the loss mask boundary);
    the strict output format is the completion (`encode_chat_examples` does the tokenizing)."""
    count = lambda req: len(backend.prompt_ids(req))  # noqa: E731
    pairs = ((build_request(tr, ex, cfg, count, stats),
              format_completion(written_state(tr, cfg), tr.reward, tr.done, tr.reasoning, cfg.use_reasoning))
             for tr, ex in zip(transitions, examples))
    return encode_chat_examples(pairs, backend, cfg.max_new_tokens, stats)


def encode_chat_examples(pairs: Iterable[tuple[list[dict[str, str]], str]], backend: Any, max_new_tokens: int,
                         stats: Counter) -> list[tuple[list[int], int]]:
    """Token ids of prompt + completion for each (chat request, target text) pair, and the prompt length.

    The prompt is tokenized exactly as generation will see it (`backend.prompt_ids`, chat template applied
    once); the completion is the target followed by the tokenizer's end-of-turn token. Pairs whose completion
    exceeds `max_new_tokens` are skipped (counted): a model trained on cut-off targets would learn never to
    close its tags."""
    tok = backend.tokenizer
    out = []
    for request, target in pairs:
        prompt = backend.prompt_ids(request)
        comp = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if len(comp) > max_new_tokens:
            stats["skipped_long_completion"] += 1
            continue
        out.append((list(prompt) + comp, len(prompt)))
    return out


def completion_loss(model: Any, ids: Any, mask: Any, labels: Any) -> Any:
    """Mean next-token cross-entropy over the completion tokens only.

    ids/mask/labels: [B, T] (labels -100 on prompt and padding). The decoder runs over all positions, but the
    LM head (a [hidden, vocab] matmul, a large share of a tiny model's compute) only over the positions whose
    next token is supervised. Falls back to the model's own loss when it does not expose decoder and head.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if decoder is None or head is None:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, H]
    target = labels[:, 1:]                                               # [B, T-1]
    sel = target != -100
    logits = head(hidden[:, :-1][sel])                                    # [N, V]
    return torch.nn.functional.cross_entropy(logits.float(), target[sel])


def _batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (sorted within windows of 50 batches) to cut padding."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    window = batch_size * 50
    batches = []
    for w in range(0, len(idx), window):
        chunk = sorted(idx[w:w + window], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def balance_outcomes(transitions: list[Transition], examples: list[list[Transition]], max_repeat: int,
                     ) -> tuple[list[Transition], list[list[Transition]]]:
    """Repeat the terminal transitions (done) of the rarer outcome (reward >= 1 vs below) so the two outcomes
    weigh alike, at most `max_repeat` copies each. Non-terminal transitions are untouched."""
    ends = {True: [], False: []}
    for i, t in enumerate(transitions):
        if t.done:
            ends[t.reward >= 1.0].append(i)
    small, big = sorted(ends.values(), key=len)
    if max_repeat <= 1 or not small:
        return transitions, examples
    extra = min(max_repeat, len(big) // len(small)) - 1
    if extra <= 0:
        return transitions, examples
    idx = list(range(len(transitions))) + small * extra
    return [transitions[i] for i in idx], [examples[i] for i in idx]


def train(cfg: TrainEMConfig, trajectories: list[Trajectory] | None = None,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """SFT of the experience model; writes the checkpoint to `cfg.out` and returns a summary.

    Loss (the paper's joint loss in our format): mean token cross-entropy over the whole completion,
    -log P(R*, s_{t+1}, r, done | task, H, s_t, a_t, D_k), prompt tokens masked with -100. Inputs are the
    transitions' own histories and the k neighbours retrieved from a buffer of the training data, excluding
    each transition's own trajectory (so the model learns to use examples it did not come from) but not the
    identical steps of other episodes: a synthetic step retrieves those too, and in a deterministic
    environment copying them is right (excluding them taught the model that the nearest example's outcome is
    usually wrong; measured on the dial: trained that way, the model gave every submit the same reward).

    Shapes: a batch is input_ids/labels/attention_mask of [batch_size, longest sequence in the batch].
    """
    import torch

    from dreamgym.llm.hf import HFBackend
    from dreamgym.metrics import MetricsLogger, pin_threads
    from dreamgym.presets import load_preset, wants_lora

    say = progress or (lambda m: log.info(m))
    t_start = time.perf_counter()
    # Both pools: numpy's BLAS scores the retrieved examples of every training prompt, so the shell's
    # OMP_NUM_THREADS would otherwise change the trained weights.
    pin_threads(max(1, cfg.threads))
    out = Path(cfg.out or f"runs/em-{cfg.env}-{Path(cfg.preset).name}")
    out.mkdir(parents=True, exist_ok=True)
    mcfg = cfg.model

    if trajectories is None:
        from dreamgym.data import load_trajectories

        trajectories = load_trajectories(cfg.data)
    transitions = em_transitions(trajectories, history=mcfg.history, binary_reward=mcfg.binary_reward)
    rng = random.Random(cfg.seed)
    if cfg.max_transitions and len(transitions) > cfg.max_transitions:
        transitions = rng.sample(transitions, cfg.max_transitions)
    if mcfg.use_reasoning and cfg.teacher == "env":
        from dreamgym.reasoning import EnvTeacher, annotate

        transitions = annotate(transitions, EnvTeacher(cfg.env))
    say(f"{len(trajectories)} trajectories -> {len(transitions)} transitions")

    t0 = time.perf_counter()
    if mcfg.use_retrieval and mcfg.k > 0:
        buf = buffer_for(transitions, mcfg.embedder)
        examples: list[list[Transition]] = []
        for i in range(0, len(transitions), 512):
            examples += buf.retrieve(transitions[i:i + 512], k=mcfg.k, env=None, real_only=False,
                                     mmr_lambda=mcfg.mmr_lambda, exclude_same_trajectory=True,
                                     exclude_twins=False)
    else:
        examples = [[] for _ in transitions]
    t_retrieval = time.perf_counter() - t0
    if cfg.context_dropout > 0:
        drop = random.Random(cfg.seed + 1)
        examples = [[] if drop.random() < cfg.context_dropout else ex for ex in examples]
        transitions = [dataclasses.replace(t, history=[]) if t.history and drop.random() < cfg.context_dropout
                       else t for t in transitions]

    transitions, examples = balance_outcomes(transitions, examples, cfg.balance_outcomes)

    device = cfg.device
    state_path = out / TRAIN_STATE_FILE
    resuming = cfg.resume and state_path.is_file() and (out / MODEL_SUBDIR).is_dir()
    # A resumed full fine-tune saved whole weights (config.json); a resumed LoRA run saved an adapter.
    resumed_full = resuming and (out / MODEL_SUBDIR / "config.json").is_file()
    model, tokenizer = load_preset(str(out / MODEL_SUBDIR) if resumed_full else cfg.preset, device=device)
    if resuming and cfg.lora is not None and cfg.lora == resumed_full:
        raise ConfigError(f"lora={cfg.lora} but the run in {out} trained "
                          f"{'all weights' if resumed_full else 'a LoRA adapter'}; resume with the same setting")
    use_lora = not resumed_full and (resuming or wants_lora(cfg.lora, model))
    if use_lora:
        from peft import LoraConfig, PeftModel, get_peft_model

        if resuming:
            model = PeftModel.from_pretrained(model, str(out / MODEL_SUBDIR), is_trainable=True)
        else:
            model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    backend = HFBackend(model, tokenizer)
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if max_pos and mcfg.max_prompt_tokens + mcfg.max_new_tokens > max_pos:
        raise ConfigError(f"model.max_prompt_tokens + model.max_new_tokens = "
                          f"{mcfg.max_prompt_tokens + mcfg.max_new_tokens} exceeds the model's {max_pos} positions")

    stats: Counter = Counter()
    t0 = time.perf_counter()
    data = encode_examples(transitions, examples, mcfg, backend, stats)
    if cfg.task_writing > 0:
        from dreamgym.curriculum import CurriculumConfig, solved_task_steps, writing_examples

        pairs = writing_examples(solved_task_steps(trajectories), n_variants=CurriculumConfig().n_variants,
                                 max_examples=cfg.task_writing, seed=cfg.seed)
        writing = encode_chat_examples(pairs, backend, mcfg.max_new_tokens, stats)
        stats["task_writing_examples"] += len(writing)
        data += writing
    t_encode = time.perf_counter() - t0
    if not data:
        raise ValueError("no training examples (empty data, or every completion longer than max_new_tokens)")
    lengths = [len(ids) for ids, _ in data]
    n_batches = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps or max(1, int(round(cfg.epochs * n_batches)))
    say(f"{len(data)} examples (mean {sum(lengths) / len(lengths):.0f} tokens, max {max(lengths)}), "
        f"{total} steps of {cfg.batch_size}; counts {dict(stats)}")

    peak = cfg.lr if cfg.lr is not None else (2e-4 if use_lora else 1e-3)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=peak, weight_decay=cfg.weight_decay, betas=(0.9, 0.98), foreach=True)
    step = 0
    if resuming:
        st = torch.load(state_path, map_location="cpu", weights_only=False)
        opt.load_state_dict(st["optimizer"])
        step = int(st["step"])
        torch.set_rng_state(st["torch_rng"])
        say(f"resuming from step {step}")

    meta = {"env": cfg.env, "preset": cfg.preset, "lora": use_lora, "model": to_dict(mcfg),
            "train": {k: v for k, v in to_dict(cfg).items() if k != "model"}, "format_version": FORMAT_VERSION}

    def save(final: bool) -> None:
        model.save_pretrained(str(out / MODEL_SUBDIR))
        tokenizer.save_pretrained(str(out / MODEL_SUBDIR))
        atomic_write_text(out / EM_CONFIG_FILE, json.dumps({**meta, "steps": step, "final": final}, indent=1))
        buf = __import__("io").BytesIO()
        torch.save({"optimizer": opt.state_dict(), "step": step, "torch_rng": torch.get_rng_state()}, buf)
        from dreamgym.paths import atomic_write_bytes

        atomic_write_bytes(state_path, buf.getvalue())

    # The batch schedule is a pure function of (seed, epoch), so a resumed run sees the same batches.
    def schedule(epoch: int) -> list[list[int]]:
        return _batches(lengths, cfg.batch_size, random.Random(cfg.seed * 1000 + epoch))

    metrics = MetricsLogger(out, tensorboard=False)
    model.train()
    pad = tokenizer.pad_token_id
    t0 = time.perf_counter()
    tokens_seen, loss_sum, loss_n = 0, 0.0, 0
    last_loss = float("nan")
    try:
        while step < total:
            epoch, pos = divmod(step, n_batches)
            batch = schedule(epoch)[pos]
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                seq, plen = data[i]
                ids[r, :len(seq)] = torch.tensor(seq)
                labels[r, plen:len(seq)] = torch.tensor(seq[plen:])
                mask[r, :len(seq)] = 1
            dev = next(model.parameters()).device
            for g in opt.param_groups:
                g["lr"] = _lr_at(step, peak, cfg.warmup_steps, total)
            loss = completion_loss(model, ids.to(dev), mask.to(dev), labels.to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            tokens_seen += int(mask.sum())
            loss_sum, loss_n = loss_sum + float(loss.detach()), loss_n + 1
            if step % cfg.log_every == 0 or step == total:
                last_loss = loss_sum / loss_n
                el = time.perf_counter() - t0
                metrics.log(step, {"loss": last_loss, "lr": opt.param_groups[0]["lr"],
                                   "tokens_per_s": tokens_seen / max(el, 1e-9)}, prefix="em/")
                say(f"step {step}/{total} loss {last_loss:.4f} ({el:.0f}s)")
                loss_sum, loss_n = 0.0, 0
            if cfg.save_every and step % cfg.save_every == 0 and step < total:
                save(final=False)
    finally:
        metrics.close()
    model.eval()
    save(final=True)
    summary = {"out": str(out), "steps": step, "examples": len(data), "transitions": len(transitions),
               "final_loss": last_loss, "train_time_s": time.perf_counter() - t0,
               "retrieval_time_s": t_retrieval, "encode_time_s": t_encode,
               "total_time_s": time.perf_counter() - t_start, "lora": use_lora, "counts": dict(stats)}
    atomic_write_text(out / "train_summary.json", json.dumps(summary, indent=1))
    return summary


def train_main(argv: list[str] | None = None) -> int:
    """`dreamgym train-em --env dial --data traj.jsonl [--preset tiny] [--out dir] [--config y.yaml] key=value…`"""
    p = argparse.ArgumentParser(prog="dreamgym train-em", description=train_main.__doc__,
                                epilog="config fields (key=value):\n" + describe(TrainEMConfig),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", help="environment family")
    p.add_argument("--data", help="offline trajectories (JSONL)")
    p.add_argument("--preset", help="model preset, path or HF id (default tiny)")
    p.add_argument("--out", help="checkpoint directory")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.k=2 epochs=3")
    a = p.parse_intermixed_args(argv)
    over = list(a.overrides) + [f"{k}={v}" for k in ("env", "data", "preset", "out")
                                if (v := getattr(a, k)) is not None]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg = load_config(TrainEMConfig, a.config, over)
        if not cfg.data:
            raise ConfigError("data: give the offline trajectories with --data")
        summary = train(cfg, progress=print)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"dreamgym train-em: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0
