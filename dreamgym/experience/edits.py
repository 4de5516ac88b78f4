"""Line edits of an abstract state: the change from one state to the next written as which lines go, which come and
which stay as anchors, deriving one from a recorded pair of states and applying one to a state.

Owns: the edit's text form (below), `derive_edit` (difflib's line diff written in that form), `parse_edit` (lenient),
`apply_edit` and `EditError` (an edit that cannot apply), `repeated_insertions` (a decoding loop's trace), `clip_edit`,
and the regexes of an edit's body for structured
decoding: the generic one (`EDIT_BODY`, `bounded_edit_body`) and the one of a given state (`state_edit_body`,
`bounded_state_edit_body`), whose `-` and `=` lines can only name that state's lines.
Must not know: the answer's tags, prompts, configs, models, any environment family (a state here is lines of text).

An edit is one operation per line, each a one-character operation, a space and a whole line of the state, verbatim:

    - <line>     the line goes: the first line equal to it at or after the cursor is removed
    + <line>     the line comes: it is inserted at the cursor
    = <line>     the line stays: the first line equal to it at or after the cursor is kept (an anchor for what follows)

Applied top to bottom with a cursor that only moves forward through the state's lines; the lines no operation
names stay where they are. A changed line is its removal followed by its replacement (`- old` then `+ new`, the new
line lands where the old one was); an insertion after a line that stays is anchored on it (`= line` then `+ new`);
an insertion before any other operation lands at the top. An empty edit leaves the state as it is.

Example, a MiniWoB++ page after `fill('15', 'Tora')`:

    - [15] textbox '', clickable
    + [15] textbox 'Tora', clickable, focused

Why lines by content, not by index: the model copies the line it means from the state in its prompt, as it copies
whole states today, instead of counting lines (which a tiny model does badly and a prompt would have to number);
the line it names is checked when the edit applies, so a wrong reference is caught (`EditError`) rather than
silently editing another line; and an edit stays readable and greppable on its own (`grep '^- '`). The cost, a
removed line written out in full, is paid once per changed line. A line that occurs twice is told apart by the cursor:
`derive_edit` adds `=` anchors where the first match from the cursor would be the wrong occurrence.

Applying is strict about which lines exist and lenient about whitespace: a line named by `-` or `=` matches exactly,
else (when no exact match remains after the cursor) by its words alone, so a re-spaced copy still applies.

A state's own grammar (`state_edit_body`): decoded under the generic body, a model can write `- <any text>`, and a
trained one did so in 66 of 100 held-out MiniWoB++ edits (docs/results/miniwob.md). Under the state's body each `-` and
`=` line is one of the state's lines verbatim, named in the state's order, each at most once (one optional group per
line, `nameable_lines`), so a reference to a line the state lacks, or to one the cursor has passed, cannot be written,
and every edit decoded under it applies. Its cost is the regex's size, about the state's: a state whose lines exceed
`MAX_NAMED_CHARS` gets the generic body (`nameable_lines` returns None; the caller counts it). Servers get a bounded
body whose named lines come in any order (`bounded_state_edit_body`): there `apply_edit` still catches an edit naming
a line the cursor has passed (`EditError`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

EditOp = tuple[str, str]
"""(operation, line): the operation is "-", "+" or "=", the line a whole line of a state."""
OPERATIONS = "-+="
"""Remove, insert, keep (anchor)."""

EDIT_BODY = r"(?:[-+=] [^<\n]*\n)*(?:[-+=] [^<\n]*)?"
"""An edit's body as a regex for structured decoding: lines of an operation, a space and text without "<" (so every
"<" of an answer is a tag's). The last line may end without its newline, so a field budget can close the body mid-line
(the closing tag's "<" is allowed at every point of it)."""


class EditError(ValueError):
    """An edit that cannot apply to a state: it removes or keeps a line the state does not hold (after the cursor)."""


def state_lines(state: str) -> list[str]:
    """The lines an edit addresses: `state` stripped as an answer's state is (`str.strip`), split at newlines; none
    for an empty state."""
    s = state.strip()
    return s.split("\n") if s else []


def _norm(line: str) -> str:
    return " ".join(line.split())


def _find(lines: list[str], line: str, start: int) -> int | None:
    """The index of the first line at or after `start` equal to `line`, else of the first equal to it word for word
    (whitespace aside), else None."""
    for j in range(start, len(lines)):
        if lines[j] == line:
            return j
    want = _norm(line)
    for j in range(start, len(lines)):
        if _norm(lines[j]) == want:
            return j
    return None


def apply_edit(state: str, ops: list[EditOp]) -> str:
    """The state `ops` make of `state` (see the module docstring); raises `EditError` naming the first operation that
    names a line not found after the cursor."""
    lines, out, cursor = state_lines(state), [], 0
    for n, (op, line) in enumerate(ops, 1):
        if op == "+":
            out.append(line)
            continue
        if op not in ("-", "="):
            raise EditError(f"operation {n}: unknown operation {op!r}")
        j = _find(lines, line, cursor)
        if j is None:
            where = "the state" if cursor == 0 else f"the state after line {cursor}"
            raise EditError(f"operation {n} ({op}) names a line not in {where}: {line[:80]!r}")
        out += lines[cursor:j]
        if op == "=":
            out.append(lines[j])
        cursor = j + 1
    out += lines[cursor:]
    return "\n".join(out).strip()


def _anchors_to(lines: list[str], cursor: int, j: int) -> list[EditOp]:
    """The `=` operations that move the cursor from `cursor` to a point where the first match of `lines[j]` is line
    `j` itself (none when it already is): anchors on the lines just before `j`, back to the first one that cannot be
    mistaken for an earlier line."""
    m = j
    while lines[m] in lines[cursor:m]:  # an earlier copy would be matched first: anchor on the line before it
        m -= 1
    return [("=", lines[i]) for i in range(m, j)]


def derive_edit(before: str, after: str) -> list[EditOp]:
    """The edit that turns `before` into `after` (both as `state_lines` reads them): difflib's line diff, each removed
    line named once, anchors only where an insertion follows a kept line or a repeated line needs telling apart.
    `apply_edit(before, derive_edit(before, after)) == after.strip()` for every pair of states."""
    a, b = state_lines(before), state_lines(after)
    ops: list[EditOp] = []
    cursor = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for i in range(i1, i2):  # "delete" and "replace" remove a[i1:i2]
            ops += _anchors_to(a, cursor, i)
            ops.append(("-", a[i]))
            cursor = i + 1
        if j2 > j1:  # "insert" and "replace" add b[j1:j2] where a[i1:i2] was
            if tag == "insert" and i1 > cursor:
                ops += _anchors_to(a, cursor, i1 - 1)
                ops.append(("=", a[i1 - 1]))
                cursor = i1
            ops += [("+", line) for line in b[j1:j2]]
    return ops


def repeated_insertions(ops: Sequence[EditOp]) -> list[int]:
    """The positions of the `+` operations that insert the same line as the operation right before them. A small
    model's greedy decoding loops there (one `+` line twenty times over, docs/results/miniwob.md); a recorded page
    seldom needs it (none of 7,343 MiniWoB++ steps). The answer format drops them from a model's edit and never
    trains on an edit holding one (`dreamgym.experience.format`); `apply_edit` itself applies every operation."""
    return [i for i in range(1, len(ops)) if ops[i][0] == "+" and ops[i] == ops[i - 1]]


def format_edit(ops: list[EditOp]) -> str:
    """The edit's text: one line per operation, each ended by a newline ("" for the empty edit)."""
    return "".join(f"{op} {line}\n" for op, line in ops)


def parse_edit(body: str) -> tuple[list[EditOp] | None, str]:
    """(operations, "") from an edit's text, else (None, reason). Lenient about blank lines, a carriage return and a
    missing space after the operation; a line that opens with no operation is malformed (it could be read neither as
    a line of the state nor as a change to one). Time linear in `len(body)`."""
    ops: list[EditOp] = []
    # Lines count from the one after the opening tag's line break.
    for n, raw in enumerate(body.removeprefix("\n").split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        op, rest = line[0], line[1:]
        if op not in OPERATIONS:
            return None, f"edit line {n} has no operation (-, + or =)"
        ops.append((op, rest[1:] if rest.startswith(" ") else rest))
    return ops, ""


def clip_edit(edit: str, n: int) -> str:
    """An edit's text cut to whole lines within `n` characters (" …" on a line of its own marks the cut), so a clipped
    edit still reads as operations; a first line longer than `n` is cut inside."""
    if len(edit) <= n:
        return edit
    kept = ""
    for line in edit.splitlines(keepends=True):
        if len(kept) + len(line) > n:
            break
        kept += line
    if not kept:
        return edit[: max(0, n)].rstrip() + " …\n"
    return kept + "…\n"


def bounded_edit_body(chars: int) -> str:
    """`EDIT_BODY` with at most `chars` units, for servers, which cannot count a field's tokens but can count what a
    regex matches: a unit is one character of a line, or a line break with the next line's operation and space (3
    characters). So a match holds at most `3 + 3 * chars + 1` characters (`bounded_edit_chars`)."""
    return rf"(?:[-+=] (?:[^<\n]|\n[-+=] ){{0,{chars}}}\n?)?"


def bounded_edit_chars(chars: int) -> int:
    """The most characters a match of `bounded_edit_body(chars)` holds."""
    return 2 + 3 * chars + 1


MAX_NAMED_CHARS = 8 << 10
"""Longest alternation of a state's lines (`nameable_lines`) decoded under, in regex characters. Past it the generic
body is used: the regex is sent with every request and compiled per state (in process and by a server), and both
costs grow with its length (a server refuses a regex over `dreamgym serve-model --max-regex-chars`, 16,384 by
default, and compiled an alternation of 8 k characters in 0.9 s, `dreamgym.llm.regex_gate`); MiniWoB++ pages are
far below it (docs/results/miniwob.md)."""
_REGEX_META = re.compile(r"([\\.^$|?*+()\[\]{}/-])")


def literal_regex(text: str) -> str:
    """A regex matching `text` alone, written in the syntax structured-decoding engines share (xgrammar's, vLLM's):
    only the metacharacters escaped. Python's `re.escape` also escapes spaces, "#", "&" and "~" (for verbose mode),
    which xgrammar reads with a warning per character."""
    return _REGEX_META.sub(r"\\\1", text)


def nameable_lines(state: str) -> list[str] | None:
    """The lines of `state` (`state_lines`) an edit's `-` and `=` lines may name under `state_edit_body`, in the
    state's order, a line that occurs twice once per occurrence, none holding "<" (no field holds one, so such a
    line cannot be written in either form). None when their regex would exceed `MAX_NAMED_CHARS` (the caller falls
    back to the generic body)."""
    lines = [line for line in state_lines(state) if "<" not in line]
    if sum(len(literal_regex(line)) + 1 for line in lines) > MAX_NAMED_CHARS:
        return None
    return lines


_INSERTED = r"\+ [^<\n]*"


def state_edit_body(named: Sequence[str]) -> str:
    """`EDIT_BODY` of a state whose nameable lines are `named` (`nameable_lines`, in the state's order): each `-`
    or `=` line is one of them verbatim and comes after the one named before it in the state, each line named at
    most once, so every edit written under it applies (the cursor only moves forward: `apply_edit` finds each named
    line at or after it); a `+` line is free text without "<", any number of them between two named lines. Every
    named line ends with its line break; the body may end with an inserted line without one (a field budget closes
    the body there, never inside a named line: a budget's reserve holds the longest named line, see
    `dreamgym.experience.format.output_constraint`). Its length is about the state's, one group per line.

    The order is what the earlier body, an alternation of the state's lines at every line, left out: decoded under
    it, the MiniWoB++ edit model's answers that failed on held-out pages all named a line again after the cursor had
    passed it (`= X` / `+ Y` twenty times over; docs/results/miniwob.md)."""
    gap = rf"(?:{_INSERTED}\n)*"
    slots = "".join(rf"(?:[-=] {literal_regex(line)}\n{gap})?" for line in named)
    return rf"{gap}{slots}(?:{_INSERTED})?"


def _edit_line(named: Sequence[str], plus: str) -> str:
    """One line of an edit of a state whose nameable lines are `named`, in any order (the servers' bounded body):
    `- ` or `= ` and one of them, or `+ ` and `plus` (the pattern of an inserted line's text)."""
    add = rf"\+ {plus}"
    if not named:  # nothing to remove or keep (an empty state): insertions only
        return f"(?:{add})"
    return f"(?:[-=] (?:{'|'.join(map(literal_regex, dict.fromkeys(named)))})|{add})"


def bounded_state_edit_body(named: Sequence[str], line_chars: int, lines: int) -> str:
    """The servers' body of a state's edit, bounded: at most `lines` lines ended by a line break and one without, an
    inserted line of at most `line_chars` characters, a named line one of `named` in any order (bounding each of
    `state_edit_body`'s gaps would multiply the regex a server compiles by the state's lines; an edit naming a line
    out of order is caught when it applies). A match holds at most `bounded_state_edit_chars(...)`."""
    line = _edit_line(named, rf"[^<\n]{{0,{line_chars}}}")
    return rf"(?:{line}\n){{0,{lines}}}{line}?"


def bounded_state_edit_chars(named: Sequence[str], line_chars: int, lines: int) -> int:
    """The most characters a match of `bounded_state_edit_body(named, line_chars, lines)` holds."""
    width = 2 + max([line_chars, *map(len, named)])  # an operation, a space and the longest line
    return lines * (width + 1) + width
