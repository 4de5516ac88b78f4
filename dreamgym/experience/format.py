"""The experience model's prompt format and strict output format: how a transition query is written as a chat
request, what the model must answer, the lenient parser of that answer, and what a prediction is.

Owns: the input format (task, history window, current abstract state, action, k retrieved transitions), the
output format, its regex and token budgets for structured decoding (`output_constraint`) and its lenient parser,
the reset pseudo-action, the failure state, `FORMAT_VERSION`, how much of a state
the model writes (`written_state`) and how the whole state is rebuilt from it (`completed_state`, through the
family hooks in `dreamgym.experience.hooks`), whether it writes the next state whole or as an edit of the current
one (`state_format`: `written_edit`, `target_completion`, `answer_state`; the edit itself is
`dreamgym.experience.edits`), and the `Prediction` record every answer is returned as.
Must not know: models, torch or any model library, generation, retrieval, training, any concrete environment.

Input (one chat request per query; `render_user` below):

    Task: <instruction>
    Examples:                       (k retrieved transitions; absent with use_retrieval=False)
    ## 1
    State: <s clipped>
    Action: <a>
    <state>
    <s' clipped>
    </state>                        (under state_format "edit": the example's edit where the model writes one,
    <reward><r></reward>             `<edit>` block below, clipped to whole lines)
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

The edit form (`state_format: edit`; the default "whole" is the form above): where the change is shorter than the
next state, the `<state>` block becomes an `<edit>` block holding a line edit of the current state
(`dreamgym.experience.edits`: one operation per line, `- ` a line that goes, `+ ` a line that comes, `= ` a line
that stays as an anchor; lines named by content, applied with a cursor that only moves forward), e.g. on MiniWoB++

    <think>fill writes 'Tora' into the textbox [15].</think>
    <edit>
    - [15] textbox '', clickable
    + [15] textbox '' value='Tora', clickable, focused
    +   StaticText 'Tora'
    </edit>
    <reward>0</reward>
    <done>false</done>

The model chooses the block: its training targets are edits where the edit is shorter than the state (in
characters) and whole states elsewhere (a new page, every `[reset]`), and the regex lets it open either. Both act on
states as the model writes them (`written_state`: compacted, or the observation), so `answer_state` applies an edit
to the query's state in that form and completes the result as it completes a written state. An edit that cannot
apply (it removes or keeps a line the state does not hold after the cursor) or leaves no line is malformed, as an
answer that does not parse is: re-generated, then the failure state. Everything downstream (the synthetic
environment, fidelity's F1 and exact match, the buffer) sees whole next states only.

With `structured_output` (the default) the answer is decoded inside `output_regex`, which is this format with
no `<` inside a field and a reward the config trains on, so it always parses; budgets close the trace after
`max_think_tokens` and each field in time for the rest to fit in `max_new_tokens`. Servers, which cannot count a
field's tokens, get the budgets as character bounds (`server_regex`). The parser stays lenient for backends that
ignore the constraint (a server without structured outputs, `structured_output: false`).

`done` means the task dynamics ended the episode (the real environment's `terminated`); truncation by a step
limit is the synthetic environment's business, not the model's. The initial state of an episode is the answer
to the pseudo-action `[reset]` on the empty state, so the model can also write initial states for tasks the real
environment cannot reset to (curriculum variants).

Failure state (our choice, after the paper's "an invalid action leads to a failure state with reward 0"): an output
that stays malformed (or whose edit cannot apply) after the model's retries (`dreamgym.experience.model`) becomes
`FAILURE_STATE` with reward 0.0, done True and `failed=True`. Done is True because there is no valid state to
continue from; the synthetic environment reports it as a truncation (the world did not end the task; the simulator
gave up) with `info["em_failure"] = True`, so trainers can tell it from a real outcome.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.edits import (EDIT_BODY, EditError, EditOp, apply_edit, bounded_edit_body, bounded_edit_chars,
                                       bounded_state_edit_body, bounded_state_edit_chars, clip_edit, derive_edit,
                                       format_edit, nameable_lines, parse_edit, repeated_insertions,
                                       state_edit_body)
from dreamgym.experience.hooks import family_hooks
from dreamgym.llm.base import ChatRequest, FieldBudget, OutputConstraint
from dreamgym.types import Task, Transition

RESET_ACTION = "[reset]"
"""Pseudo-action whose answer is the initial state of an episode (the query's state is empty)."""
FAILURE_STATE = "[failure] The simulated environment could not produce a valid next state. The episode ends."
"""The state returned when the model's output stays malformed after all retries."""
STOP = "</done>"
"""Generation stops here: the done tag closes every answer."""
FORMAT_VERSION = 4
"""Bump when the prompt or output format changes: checkpoints record it, cached test artifacts key on it. The edit
form did not bump it: it is a setting saved with the checkpoint (`state_format`, read as "whole" from checkpoints
without it), and the whole-state format's prompts and answers are byte for byte what version 4 wrote."""

SYSTEM_PROMPT = (
    "You are an experience model. Given the task, the history, the current state and the agent's action, reason "
    "about what the action does inside <think> </think>, then write the next state inside <state> </state>, the "
    "reward inside <reward> </reward> and whether the episode ends inside <done> </done>.")
"""System message (sent when `ExperienceModelConfig.system_prompt` is on; the tiny preset learns without it)."""
EDIT_SYSTEM_PROMPT = (
    "You are an experience model. Given the task, the history, the current state and the agent's action, reason "
    "about what the action does inside <think> </think>, then write what changes in the current state inside "
    "<edit> </edit>, one line per change: '- ' and a line of the state that goes, '+ ' and a line that comes, '= ' "
    "and a line that stays, to place what comes after it (or write the whole next state inside <state> </state> "
    "when that is shorter), then the reward inside <reward> </reward> and whether the episode ends inside "
    "<done> </done>.")
"""System message under `state_format: edit`."""


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n)].rstrip() + " …"


def format_reward(r: float) -> str:
    """A reward as the output format writes it (three decimals at most, no trailing zeros)."""
    return f"{round(float(r), 3):g}"


def _written(state: str, env: str, cfg: ExperienceModelConfig) -> str:
    """`state` (of family `env`) in the form the model writes states: its observation under `write_observation`,
    compacted under `compact_states`, else whole."""
    hooks = family_hooks(env) if cfg.write_observation or cfg.compact_states else None
    if hooks is None:
        return state
    if cfg.write_observation and hooks.writes_observations:
        return hooks.model_observation(state)
    return hooks.model_state(state) if cfg.compact_states else state


def written_state(tr: Transition, cfg: ExperienceModelConfig) -> str:
    """`tr.next_state` as the model writes it: only its observation (the family's `model_observation`) under
    `cfg.write_observation`, else compacted by the family's `model_state` under `cfg.compact_states`; whole
    after `[reset]` (there is no previous state to complete it from)."""
    if not tr.state.strip():
        return tr.next_state
    return _written(tr.next_state, tr.task.env, cfg)


def written_edit(tr: Transition, cfg: ExperienceModelConfig) -> str | None:
    """The text of the edit the model writes for `tr` under `state_format: edit` (`dreamgym.experience.edits`): the
    change from its state to its next state, both as the model writes states (`written_state`). None where the model
    writes the whole next state instead: under `state_format: whole`, after `[reset]`, where the edit would be no
    shorter than the state (a new page), and where it would insert one line twice in a row (`repeated_insertions`,
    which `answer_state` drops from a model's edit)."""
    if cfg.state_format != "edit" or not tr.state.strip():
        return None
    after = written_state(tr, cfg)
    ops = derive_edit(_written(tr.state, tr.task.env, cfg), after)
    if repeated_insertions(ops):  # `answer_state` would drop the repeat: such a change is written whole
        return None
    edit = format_edit(ops)
    return edit if len(edit) < len(after.strip()) else None


def target_completion(tr: Transition, cfg: ExperienceModelConfig) -> str:
    """The training target of `tr`: its outcome in the output format, the next state written as an edit where
    `written_edit` gives one, else whole."""
    edit = written_edit(tr, cfg)
    if edit is None:
        return format_completion(written_state(tr, cfg), tr.reward, tr.done, tr.reasoning, cfg.use_reasoning)
    return format_edit_completion(edit, tr.reward, tr.done, tr.reasoning, cfg.use_reasoning)


def completed_state(written: str, query: Transition, cfg: ExperienceModelConfig, env: str | None = None) -> str:
    """The inverse of `written_state`: the whole next state from the model's text and the query's state."""
    if not query.state.strip():
        return written
    hooks = family_hooks(env or query.task.env) if cfg.write_observation or cfg.compact_states else None
    if hooks is None:
        return written
    if cfg.write_observation and hooks.writes_observations:
        return hooks.state_after(query.state, written)
    return hooks.complete_state(written, query.state) if cfg.compact_states else written


def render_example(i: int, ex: Transition, cfg: ExperienceModelConfig) -> str:
    """One retrieved transition. Its outcome is written exactly as the model writes its own answer (with the
    reasoning trace when `example_reasoning` is on and the example has one; under `state_format: edit` as the edit
    of its state where the model would write one), so a small model can copy what applies: the tags make the copied
    span unambiguous."""
    show = cfg.use_reasoning and cfg.example_reasoning and bool(ex.reasoning)
    n = cfg.example_next_state_chars
    trace = _clip(ex.reasoning or "", n)
    edit = written_edit(ex, cfg)
    if edit is None:
        outcome = format_completion(_clip(written_state(ex, cfg), n), ex.reward, ex.done, trace, use_reasoning=show)
    else:
        outcome = format_edit_completion(clip_edit(edit, n), ex.reward, ex.done, trace, use_reasoning=show)
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
        system = EDIT_SYSTEM_PROMPT if cfg.state_format == "edit" else SYSTEM_PROMPT
        msgs = [{"role": "system", "content": system}] if cfg.system_prompt else []
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
    return _completion(f"<state>\n{next_state.strip()}\n</state>", reward, done, reasoning, use_reasoning)


def format_edit_completion(edit: str, reward: float, done: bool, reasoning: str | None,
                           use_reasoning: bool = True) -> str:
    """The strict output format with the next state written as `edit`, an edit's text (`format_edit`: one line per
    operation, each ended by a newline; "" leaves the state as it is)."""
    return _completion(f"<edit>\n{edit}</edit>", reward, done, reasoning, use_reasoning)


def _completion(block: str, reward: float, done: bool, reasoning: str | None, use_reasoning: bool) -> str:
    think = f"<think>{' '.join((reasoning or '').split())}</think>\n" if use_reasoning else ""
    return f"{think}{block}\n<reward>{format_reward(reward)}</reward>\n<done>{'true' if done else 'false'}</done>"


# The output format as a regex, for structured decoding. Fields hold no "<", so every "<" of an answer opens or
# closes a tag: `_MARK` counts fields for the token budgets, and a token holding one ends the field it is in.
_MARK = "<"
_FIELD = r"[^<]*"
_STATE = r"[^<]*[^<\s][^<]*"  # at least one visible character: an empty state does not parse
_BINARY_REWARD = "(0|1)"
_DECIMAL_REWARD = r"(0(\.[0-9]{1,3})?|1(\.0{1,3})?)"  # format_reward's three decimals in [0, 1]
_LONGEST_REWARD = "0.125"


def output_regex(cfg: ExperienceModelConfig, named: Sequence[str] | None = None) -> str:
    """The strict output format (module docstring) as a regex: what structured decoding lets the model write. The
    reward is one the config trains on (0 or 1 with `binary_reward`), the answer ends at `STOP`. Under
    `state_format: edit`, `named` (`edit_named_lines`) makes the edit's body the query state's own
    (`dreamgym.experience.edits.state_edit_body`: its `-` and `=` lines name only those lines, in their order);
    None: the generic body, any text after `-` and `=`."""
    return _answer_regex(cfg, _FIELD, _STATE, EDIT_BODY if named is None else state_edit_body(named))


def edit_named_lines(query: Transition, cfg: ExperienceModelConfig, env: str | None = None) -> list[str] | None:
    """The lines an edit answering `query` may name with `-` and `=` under structured decoding: the lines of the
    query's state as the model writes states (the state `answer_state` applies the edit to), in order
    (`dreamgym.experience.edits.nameable_lines`); none for `[reset]` (the empty state). None where the edit's body is
    the generic one: under `state_format: whole` (no edit is written), and for a state whose named lines' regex
    would be longer than `edits.MAX_NAMED_CHARS` (the caller counts that fallback)."""
    if cfg.state_format != "edit":
        return None
    base = _written(query.state, env or query.task.env, cfg) if query.state.strip() else ""
    return nameable_lines(base)


def _answer_regex(cfg: ExperienceModelConfig, think: str, state: str, edit: str) -> str:
    """The output format as a regex with `think`, `state` and `edit` as the patterns of those fields; the `<edit>`
    block is an alternative to the `<state>` block under `state_format: edit` only."""
    trace = f"<think>{think}</think>\n" if cfg.use_reasoning else ""
    reward = _BINARY_REWARD if cfg.binary_reward else _DECIMAL_REWARD
    block = f"<state>\n{state}</state>"
    if cfg.state_format == "edit":
        block = f"({block}|<edit>\n{edit}</edit>)"
    return f"{trace}{block}\n<reward>{reward}</reward>\n<done>(true|false){re.escape(STOP)}"


def output_constraint(cfg: ExperienceModelConfig, named: Sequence[str] | None = None) -> OutputConstraint:
    """`output_regex(cfg, named)` with per-field token budgets: the <think> trace closes after `max_think_tokens`
    tokens or when only the rest of the answer fits in `max_new_tokens`; the state (or the edit) closes when only its
    tail fits. Each token writes at least one byte, so a tail of n bytes fits in n tokens whatever the tokenizer.
    Servers get the budgets as character bounds (`server_regex`).

    With `named` (an edit of the query's state) the edit can close only after a named line's line break, so a budget
    that falls inside a `-` or `=` line lets the line finish first: its reserve also holds the longest named line (with
    its operation and line break), which closes the `<state>` alternative that much earlier too. The trace's reserve is
    unchanged: an edit opened with no more room than that closes at once, empty (the state as it is), which applies."""
    reward = "1" if cfg.binary_reward else _LONGEST_REWARD
    # `</state>` is the longer closer: an edit's tail fits in the same reserve.
    tail = len(f"</state>\n<reward>{reward}</reward>\n<done>false{STOP}".encode())
    line = 3 + max((len(x.encode()) for x in named), default=0) if named else 0
    state_opening = len(b"</think>\n<state>\n") + 1  # and one character of state
    state = FieldBudget(after=3 if cfg.use_reasoning else 1, reserve=tail + line)
    budgets = (FieldBudget(after=1, max_tokens=cfg.max_think_tokens, reserve=tail + state_opening), state) \
        if cfg.use_reasoning else (state,)
    server_regex, longest = _server_regex(cfg, tail, named)
    return OutputConstraint(regex=output_regex(cfg, named), mark=_MARK, budgets=budgets, server_regex=server_regex,
                            server_max_tokens=longest)


SERVER_CHARS_PER_TOKEN = 4
"""Characters a field sent to a server may hold per token of its budget: English text runs at about 4 characters
per token under BPE tokenizers (WebShop's states at ~3.75 under the tiny preset's), so a field bounded this way
holds about what its token budget holds in process; a bound of one character per token would cut such states."""
_LEADING_SPACE = 16  # whitespace a state may open with before its first visible character


def _server_regex(cfg: ExperienceModelConfig, tail: int, named: Sequence[str] | None = None) -> tuple[str, int]:
    """(`output_regex` with each field bounded in characters, the most characters a match holds). A server cannot
    count a field's tokens, but it can count its characters: the <think> trace holds `SERVER_CHARS_PER_TOKEN` per
    token of `max_think_tokens`, the state as many per token of the most it may take in process (`max_new_tokens`
    less the tags around it). Asked for as many tokens as the longest match has characters, a server completes every
    answer, as a token writes at least one byte (one character in ASCII text).

    An edit of a named state (`named`) is bounded by lines instead (its named lines are whole strings, which a
    count of characters cannot cut): each inserted line holds as many characters as a state, and there are at most
    `_server_edit_lines` lines. Its longest match is far longer than the generic body's; a request asks for it only
    as far as the served model's context leaves room (`dreamgym.llm.http`), which the generic body's already
    exceeds at the default budgets (about 6,000 characters against a context of 2,048 tokens)."""
    opening = "<think></think>\n<state>\n" if cfg.use_reasoning else "<state>\n"
    think_chars = SERVER_CHARS_PER_TOKEN * cfg.max_think_tokens
    state_chars = SERVER_CHARS_PER_TOKEN * max(1, cfg.max_new_tokens - len(opening) - tail)
    if named is None:
        edit, edit_chars = bounded_edit_body(state_chars), bounded_edit_chars(state_chars)
    else:
        lines = _server_edit_lines(named)
        edit = bounded_state_edit_body(named, state_chars, lines)
        edit_chars = bounded_state_edit_chars(named, state_chars, lines)
    regex = _answer_regex(cfg, f"[^<]{{0,{think_chars}}}",
                          rf"\s{{0,{_LEADING_SPACE}}}[^<\s][^<]{{0,{state_chars - 1}}}", edit)
    body = _LEADING_SPACE + state_chars
    if cfg.state_format == "edit":  # the longer of the two blocks' bodies
        body = max(body, edit_chars - 2)  # an edit's tags are a character shorter each
    longest = len(opening) + tail + (think_chars if cfg.use_reasoning else 0) + body
    return regex, longest


def _server_edit_lines(named: Sequence[str]) -> int:
    """The most lines ended by a line break a server lets an edit of a state with lines `named` write (one more may
    end the body without it): one `-` or `=` per line of the state (the cursor only moves forward), as many `+`
    again, and 16 more for a state of a few lines. An edit is the answer only where it is shorter than the next
    state, so a change that needs more lines is a new page, written whole."""
    return 2 * len(named) + 16


@dataclass
class ParsedOutput:
    """A well-formed output's fields, as written (the state not yet completed by `completed_state`, an edit not yet
    applied: `answer_state` does both)."""

    next_state: str
    """The `<state>` block's text; "" when the answer is an edit."""
    reward: float
    done: bool
    reasoning: str
    edit: list[EditOp] | None = None
    """The `<edit>` block's operations (`dreamgym.experience.edits`); None when the answer writes the whole state."""


# The parser is linear in its input: every search below is a single left-to-right scan. A lazy `<tag>(.*?)</tag>`
# search would rescan the rest of the text from every opening tag (quadratic: 40 s for 40k repeated `<state>` tags,
# benchmarks/bench_parser.py). The first opening tag decides: the closers a later one could use all lie after the
# first one too, so when the first has no closer, none has, and searching from it alone is the same answer.
_ANSWER_OPEN = re.compile(r"<(state|edit)>", re.I)  # whichever opens first holds the answer's next state
_STATE_CLOSE = re.compile(r"(</state>)|<reward>|<done>", re.I)  # a missing </state> ends at the next tag
_EDIT_CLOSE = re.compile(r"(</edit>)|<reward>|<done>", re.I)
_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"(</think>)|<state>|<edit>", re.I)
_REWARD_RE = re.compile(r"<reward>\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?|true|false)\s*(?:</reward>)?", re.I)
_DONE_RE = re.compile(r"<done>\s*(true|false|yes|no|1|0)\b", re.I)


def _block(text: str, opener: re.Pattern[str], closer: re.Pattern[str],
           endpos: int | None = None) -> tuple[int, int, int, int] | None:
    """(start, content start, content end, end) of the block the first opening tag in `text[:endpos]` opens, or
    None when there is no opening tag or no closer after it. A closer's group 1 (its own closing tag) belongs to
    the block; any other closer (the next block's tag) is left after it."""
    end = len(text) if endpos is None else endpos
    m_open = opener.search(text, 0, end)
    if m_open is None:
        return None
    m_close = closer.search(text, m_open.end(), end)
    if m_close is None:
        return None
    stop = m_close.end() if m_close.group(1) is not None else m_close.start()
    return m_open.start(), m_open.end(), m_close.start(), stop


def parse_completion(text: str) -> tuple[ParsedOutput | None, str]:
    """(parsed, "") for a well-formed output, else (None, reason). Lenient about whitespace, case, a missing
    </state>, </edit> or </reward> before the next tag, and text around the tags; strict about the presence of a
    non-empty state or of an edit whose every line is an operation, a reward in [0, 1] and a done flag. Reads either
    form of the next state whatever the config (the first block opened counts). Time linear in `len(text)`."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty output"
    m_open = _ANSWER_OPEN.search(text)
    is_edit = m_open is not None and m_open.group(1).lower() == "edit"
    b_state = _block(text, _ANSWER_OPEN, _EDIT_CLOSE if is_edit else _STATE_CLOSE)
    if b_state is None:
        return None, "no <state> or <edit> block"
    s_start, c_start, c_end, s_end = b_state
    edit: list[EditOp] | None = None
    if is_edit:
        edit, why = parse_edit(text[c_start:c_end])
        if edit is None:
            return None, why
        state = ""
    else:
        state = text[c_start:c_end].strip("\n").strip()
        if not state:
            return None, "empty <state>"
    m_r = _REWARD_RE.search(text, s_end)
    if not m_r:
        return None, "no parseable <reward>"
    raw = m_r.group(1).lower()
    reward = 1.0 if raw == "true" else 0.0 if raw == "false" else float(raw)
    if not (0.0 <= reward <= 1.0) or math.isnan(reward):
        return None, f"reward {raw} outside [0, 1]"
    m_d = _DONE_RE.search(text, m_r.end()) or _DONE_RE.search(text, s_end)
    if not m_d:
        return None, "no parseable <done>"
    done = m_d.group(1).lower() in ("true", "yes", "1")
    b_think = _block(text, _THINK_OPEN, _THINK_CLOSE, endpos=s_start)
    reasoning = " ".join(text[b_think[1]:b_think[2]].split()) if b_think else ""
    return ParsedOutput(next_state=state, reward=reward, done=done, reasoning=reasoning, edit=edit), ""


def answer_state(parsed: ParsedOutput, query: Transition, cfg: ExperienceModelConfig, env: str | None = None) -> str:
    """The whole next state a well-formed answer to `query` gives: its state completed (`completed_state`), or its
    edit applied to the query's state as the model writes states, then completed. Raises `EditError` when the edit
    cannot apply (it names a line the state does not hold) or leaves no state: the answer is then malformed."""
    if parsed.edit is None:
        return completed_state(parsed.next_state, query, cfg, env)
    base = _written(query.state, env or query.task.env, cfg) if query.state.strip() else ""
    repeats = set(repeated_insertions(parsed.edit))  # a decoding loop's copies (training targets hold none)
    written = apply_edit(base, [op for i, op in enumerate(parsed.edit) if i not in repeats])
    if not written.strip():
        raise EditError("the edit leaves an empty state")
    return completed_state(written, query, cfg, env)


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
    """Generations spent on it (0 when an outcome resolver answered without the model)."""
    text: str = ""
    """The raw text of the accepted (or last) attempt."""
    examples: list[Transition] = field(default_factory=list)
    """The retrieved transitions that were in the prompt."""


def query_for(task: Task, state: str, action: str, history: list[tuple[str, str]] | None = None,
              trajectory_id: str = "", step_index: int = 0, seed: int | None = None) -> Transition:
    """A query is a Transition whose outcome fields are empty."""
    return Transition(task=task, history=list(history or []), state=state, action=action, next_state="",
                      reward=0.0, done=False, trajectory_id=trajectory_id, step_index=step_index, seed=seed)

