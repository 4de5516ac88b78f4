"""Line edits of an abstract state: the change from one state to the next written as which lines go, which come and
which stay as anchors, deriving one from a recorded pair of states and applying one to a state.

Owns: the edit's text form (below), `derive_edit` (difflib's line diff written in that form), `parse_edit` (lenient),
`apply_edit` and `EditError` (an edit that cannot apply), `clip_edit`, and the regexes of an edit's body for structured
decoding (`EDIT_BODY`, `bounded_edit_body`).
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
"""

from __future__ import annotations

import difflib

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
