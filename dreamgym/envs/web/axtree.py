"""The web abstract state: a page's accessibility tree, pruned, as text; and what can be read back from that text.

Owns: extracting a page's observation with BrowserGym's own code (element marking, the merged accessibility
tree, the DOM snapshot's visibility and clickability) and flattening it with BrowserGym's
`flatten_axtree_to_str`, the pruning on top (hidden and non-visible nodes, inline text boxes, a page's URL
reduced to what tells pages apart), the state's layout (`[goal]`, `[page]`, the tree, `[error]`), and parsing a
state back into its elements (`elements`), what a form field shows (`field_value`, `checked`), the admissible
actions they offer (`admissible_from_state`), the field a `fill` leaves behind (`parse_fill`, `with_typed_value`)
and the fields it leaves alone (`with_values`), and where the focus goes (`with_focus`).
Must not know: Chromium processes, which benchmark a page belongs to, DreamGym's environment contract.

A state reads:

    [goal] Enter "Myron" into the text field and press Submit.
    [page] Enter Text Task
    [15] textbox '', clickable
    [16] button 'Submit', clickable
    [error] ValueError: Could not find element with bid "99"

`[n]` are BrowserGym element ids (`bid`), the arguments of its high-level actions. The `[error]` line is there
only after an action that failed.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

_IGNORED_ROLES = ("LineBreak", "InlineTextBox", "ListMarker")
_LINE_RE = re.compile(r"^(?P<indent> *)(?:\[(?P<bid>[a-zA-Z]*\d+)\] )?(?P<role>[A-Za-z]+)"
                      r"(?: '(?P<name>(?:[^'\\]|\\.)*)')?(?P<rest>.*)$")
# Roles a click acts on; other elements with a bid are offered a click only when BrowserGym finds them clickable.
_CLICK_ROLES = frozenset({"button", "link", "checkbox", "radio", "tab", "menuitem", "option", "treeitem",
                          "switch", "menuitemcheckbox", "menuitemradio", "textbox", "searchbox", "spinbutton",
                          "combobox", "listitem", "cell", "gridcell", "heading", "img"})
FILL_ROLES = frozenset({"textbox", "searchbox", "spinbutton"})
_SELECT_ROLES = frozenset({"combobox", "listbox"})
_QUOTED_RE = re.compile(r'"([^"]+)"')
# BrowserGym prints a field's value right after its name, as Python's repr: single quotes, or double quotes when
# the value holds a single quote.
_VALUE_RE = re.compile(r"""\s*value=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_CHECKED_RE = re.compile(r"\bchecked='(true|false)'")
_SELECTED_RE = re.compile(r"\bselected=(True|False)")


@dataclass(frozen=True)
class Element:
    """One line of the tree in a state."""

    bid: str | None
    role: str
    name: str
    attrs: str
    depth: int

    @property
    def clickable(self) -> bool:
        return "clickable" in self.attrs


def extract_tree(page: Any, *, visible_only: bool = True, retries: int = 3) -> str:
    """The pruned accessibility tree of `page` as text (BrowserGym's flattening, our pruning on top).

    Runs BrowserGym's marking (`_pre_extract`), reads the merged tree and the DOM snapshot's properties, and
    always removes the marks again (`_post_extract`), retrying while frames are still attaching."""
    import playwright.sync_api
    from browsergym.core.observation import (MarkingError, _post_extract, _pre_extract, extract_dom_extra_properties,
                                             extract_dom_snapshot, extract_merged_axtree)
    from browsergym.utils.obs import flatten_axtree_to_str

    for left in reversed(range(retries)):
        try:
            _pre_extract(page, tags_to_mark="standard_html", lenient=left == 0)
            dom = extract_dom_snapshot(page)
            axtree = extract_merged_axtree(page)
            extra = extract_dom_extra_properties(dom, scale_factor=1.0)
            break
        except (playwright.sync_api.Error, MarkingError):
            if left == 0:
                raise
            time.sleep(0.2)
        finally:
            _post_extract(page)
    _keep_clickable_generics(axtree, extra)
    text = flatten_axtree_to_str(axtree, extra_properties=extra, with_clickable=True,
                                 filter_visible_only=visible_only, ignored_roles=list(_IGNORED_ROLES),
                                 hide_bid_if_invisible=False)
    return prune_tree(text)


def _keep_clickable_generics(axtree: dict[str, Any], extra: dict[str, Any]) -> None:
    """BrowserGym's flattening skips every unnamed `generic` node, including a `<span>` the page made clickable
    (a MiniWoB link, a tree node). Such a node, when it has a bid and a click listener, is kept: it gets a
    property the flattening prints, so its id can be clicked."""
    for node in axtree["nodes"]:
        bid = node.get("browsergym_id")
        if node.get("role", {}).get("value") == "generic" and bid and extra.get(bid, {}).get("clickable"):
            node.setdefault("properties", []).append({"name": "clickable", "value": {"value": True}})


def prune_tree(text: str) -> str:
    """Tabs to two spaces, the root's URL cut to its path (a file:// URL to the file name), `clickable=True` (our
    marker, see `_keep_clickable_generics`) merged into BrowserGym's `clickable`, empty static text dropped."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip("\t")
        depth = len(line) - len(stripped)
        if stripped.startswith("StaticText ''"):
            continue
        stripped = stripped.replace(", clickable=True", "")
        stripped = re.sub(r"url='([^']*)'", lambda m: f"url='{short_url(m.group(1))}'", stripped)
        out.append("  " * depth + stripped)
    return "\n".join(out)


def short_url(url: str) -> str:
    """What tells pages of a site apart: path and query for http(s), the file name for file://."""
    p = urlparse(url)
    if p.scheme == "file":
        return p.path.rsplit("/", 1)[-1]
    return (p.path or "/") + (f"?{p.query}" if p.query else "")


def format_state(goal: str, title: str, tree: str, error: str = "") -> str:
    """The abstract state: goal, page title, the tree without its root line, and the last action's error."""
    lines = tree.splitlines()
    if lines and lines[0].startswith("RootWebArea"):
        lines = [ln[2:] if ln.startswith("  ") else ln for ln in lines[1:]]
    parts = [f"[goal] {' '.join(goal.split())}", f"[page] {title}", *lines]
    if error:
        parts.append(f"[error] {' '.join(error.split())[:300]}")
    return "\n".join(parts)


def parse_state(state: str) -> tuple[str, str, list[Element], str]:
    """(goal, page title, elements, error) of a state written by `format_state` (missing parts are empty)."""
    goal = title = error = ""
    elements: list[Element] = []
    for line in state.splitlines():
        if line.startswith("[goal] "):
            goal = line[7:]
        elif line.startswith("[page] "):
            title = line[7:]
        elif line.startswith("[error] "):
            error = line[8:]
        else:
            m = _LINE_RE.match(line)
            if m:
                name = (m.group("name") or "").replace("\\'", "'")
                elements.append(Element(m.group("bid"), m.group("role"), name, m.group("rest") or "",
                                        len(m.group("indent")) // 2))
    return goal, title, elements, error


def elements(state: str) -> list[Element]:
    return parse_state(state)[2]


def shows_error(state: str) -> bool:
    """Whether `state` has the `[error]` line of an action that failed."""
    return any(line.startswith("[error] ") for line in state.splitlines())


def field_value(e: Element) -> str:
    """The value a form field shows (a text field's text, a select list's chosen option; a password field shows
    one bullet per character), "" when the tree prints none."""
    return _shown_value(_VALUE_RE.match(e.attrs))


def _shown_value(m: re.Match[str] | None) -> str:
    """The value a `_VALUE_RE` match holds, "" without one or when it does not read back as a Python string."""
    if not m:
        return ""
    try:
        return str(ast.literal_eval(m.group(1)))
    except (ValueError, SyntaxError):
        return ""


def _parse_call(action: str, verb: str) -> tuple[str, str] | None:
    """(bid, text) of a `verb('bid', 'text')` action, None for any other text (read as a Python call with literal
    arguments, as BrowserGym's parser reads it)."""
    try:
        node = ast.parse(action.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == verb
            and len(node.args) == 2 and not node.keywords):
        return None
    try:
        bid, text = (ast.literal_eval(a) for a in node.args)
    except ValueError:
        return None
    return (bid, text) if isinstance(bid, str) and isinstance(text, str) else None


def parse_fill(action: str) -> tuple[str, str] | None:
    """(bid, text) of a `fill('bid', 'text')` action, None for any other text."""
    return _parse_call(action, "fill")


def parse_select(action: str) -> tuple[str, str] | None:
    """(bid, option) of a `select_option('bid', 'option')` action (one option named), None for any other text."""
    return _parse_call(action, "select_option")


def _element_line(lines: list[str], bid: str, roles: Collection[str]) -> tuple[int, re.Match[str]] | None:
    """(index, match) of the line of element `bid` in `lines`, where its role is one of `roles`; None otherwise."""
    return next(((i, m) for i, line in enumerate(lines)
                 if (m := _LINE_RE.match(line)) and m.group("bid") == bid and m.group("role") in roles), None)


def with_typed_value(state: str, bid: str, text: str) -> str | None:
    """`state` with the text field `bid` showing `text` as a page shows it after a fill: its `value` and the
    StaticText line under it, one bullet per character where `state` already shows the field masked (a password
    field: the tree does not say which fields mask before they hold a value); None when `state` has no text field
    `bid` that takes text (a disabled one: the fill fails). The rest of the line (`clickable`, `focused`) and of
    the state is kept."""
    lines = state.splitlines()
    found = _element_line(lines, bid, FILL_ROLES)
    if found is None:
        return None
    i, m = found
    line = lines[i]
    rest = m.group("rest") or ""
    if "disabled=True" in rest:
        return None
    shown = _VALUE_RE.match(rest)
    old = _shown_value(shown)
    value = "\u2022" * len(text) if old and set(old) == {"\u2022"} else text
    tail = rest[shown.end():] if shown else rest
    lines[i] = line[:len(line) - len(rest)] + (f" value={value!r}" if value else "") + tail
    indent = len(m.group("indent"))
    below = _LINE_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
    has_text = (below is not None and below.group("role") == "StaticText" and not below.group("bid")
                and len(below.group("indent")) > indent)
    text_line = " " * (indent + 2) + f"StaticText {value!r}"
    if has_text and value:
        lines[i + 1] = text_line
    elif has_text:
        del lines[i + 1]
    elif value:
        lines.insert(i + 1, text_line)
    return "\n".join(lines)


def with_names(answer: str, state: str) -> str:
    """`answer` with each element that `state` shows under the same bid given its role and name as `state` writes
    them, the rest of its line kept. A page never renames an element an action leaves in place (on the 6,816 steps
    of docs/results/miniwob.md's 3,220-episode collection, none of some 45,000 such elements changed role or name),
    but a small experience model writes names from its training data over them."""
    known = {m.group("bid"): (m.group("role"), m.group("name")) for line in state.splitlines()
             if (m := _LINE_RE.match(line)) and m.group("bid")}
    lines = answer.splitlines()
    for i, line in enumerate(lines):
        m = _LINE_RE.match(line)
        if m is None or m.group("bid") not in known or (m.group("role"), m.group("name")) == known[m.group("bid")]:
            continue
        role, name = known[m.group("bid")]
        lines[i] = f"{m.group('indent')}[{m.group('bid')}] {role}" + ("" if name is None else f" '{name}'") + \
            (m.group("rest") or "")
    return "\n".join(lines)


def with_values(answer: str, state: str, keep: str | None = None) -> str:
    """`answer` with each text field that `state` shows under the same bid (other than `keep`, the field a fill
    types into) showing the value `state` shows, as `with_typed_value` writes it; a disabled one is left as the
    answer has it. On a page only a fill changes a field's text (on the 6,816 steps of docs/results/miniwob.md's
    3,220-episode collection, none of 3,905 other field-step pairs changed), but a small experience model writes a
    name from its training data into a field a click only focused."""
    shown = {e.bid: field_value(e) for e in elements(state) if e.bid and e.bid != keep and e.role in FILL_ROLES}
    out = answer
    for e in elements(answer):
        if e.bid in shown and e.role in FILL_ROLES and field_value(e) != shown[e.bid]:
            out = with_typed_value(out, e.bid, shown[e.bid]) or out
    return out


def with_focus(answer: str, bid: str, focus_target: bool) -> str:
    """`answer` with no element but `bid` focused and, with `focus_target`, `bid` focused (written after its
    `clickable`, where a page prints it; an element the answer shows without `clickable` or disabled is left as
    written). A page has one focused element, the one an action last put the focus on."""
    lines = answer.splitlines()
    for i, line in enumerate(lines):
        m = _LINE_RE.match(line)
        if m is None or not m.group("bid"):
            continue
        rest = m.group("rest") or ""
        head = line[:len(line) - len(rest)]
        if m.group("bid") != bid:
            if ", focused" in rest:
                lines[i] = head + rest.replace(", focused", "", 1)
        elif focus_target and ", focused" not in rest and "disabled=True" not in rest and ", clickable" in rest:
            lines[i] = head + rest.replace(", clickable", ", clickable, focused", 1)
    return "\n".join(lines)


def with_checked(state: str, bid: str, value: bool) -> str | None:
    """`state` with the checkbox or radio button `bid` shown `checked` as `value` (written at the end of its line, as
    a page prints it, where `state` leaves it out), the rest of its line and of the state kept; None when `state`
    has no such element `bid`, or shows it disabled (a click then does nothing)."""
    lines = state.splitlines()
    found = _element_line(lines, bid, ("checkbox", "radio"))
    if found is None or "disabled=True" in (found[1].group("rest") or ""):
        return None
    i, _ = found
    shown = f"checked='{'true' if value else 'false'}'"
    lines[i], n = _CHECKED_RE.subn(shown, lines[i], count=1)
    if not n:
        lines[i] += f", {shown}"
    return "\n".join(lines)


def with_selected(state: str, bid: str, option: str) -> str | None:
    """`state` with the select list `bid` showing `option` chosen as a page shows it after a `select_option`: its
    `value` and each of its options' `selected` flag, the rest of its lines and of the state kept; None when `state`
    has no select list `bid`, shows it disabled, or lists no option named `option` under it (the page then refuses
    the action)."""
    lines = state.splitlines()
    found = _element_line(lines, bid, _SELECT_ROLES)
    if found is None:
        return None
    i, m = found
    rest = m.group("rest") or ""
    if "disabled=True" in rest:
        return None
    depth = len(m.group("indent"))
    below = []  # (index, match) of each option line in the list's subtree
    for j in range(i + 1, len(lines)):
        o = _LINE_RE.match(lines[j])
        if o is None or len(o.group("indent")) <= depth:
            break
        if o.group("role") == "option":
            below.append((j, o))
    names = [(o.group("name") or "").replace("\\'", "'") for _, o in below]
    if option not in names:
        return None
    shown = _VALUE_RE.match(rest)
    tail = rest[shown.end():] if shown else rest
    lines[i] = lines[i][:len(lines[i]) - len(rest)] + f" value={option!r}" + tail
    for (j, _), name in zip(below, names):
        flag = f"selected={name == option}"
        lines[j], n = _SELECTED_RE.subn(flag, lines[j], count=1)
        if not n:
            lines[j] += f", {flag}"
    return "\n".join(lines)


def checked(e: Element) -> bool | None:
    """Whether a checkbox or radio button is checked; None when the tree does not say (another role, 'mixed')."""
    m = _CHECKED_RE.search(e.attrs)
    return None if m is None else m.group(1) == "true"


def goal_values(goal: str) -> list[str]:
    """The quoted strings of a goal ("Enter \"Myron\" ..."): what a text field might be filled with."""
    return list(dict.fromkeys(_QUOTED_RE.findall(goal)))


def _options(els: list[Element], i: int) -> list[str]:
    """The names of the options below element i (its subtree)."""
    out = []
    for o in els[i + 1:]:
        if o.depth <= els[i].depth:
            break
        if o.role == "option":
            out.append(o.name)
    return out


def admissible_from_state(state: str) -> list[str]:
    """The high-level actions a state offers: a click on each element a click acts on, a fill of each text field
    with each quoted value of the goal, a choice of each option of a select list."""
    goal, _, els, _ = parse_state(state)
    values = goal_values(goal)
    out: list[str] = []
    select_depth: int | None = None  # inside a select list: its options are chosen, not clicked
    for i, e in enumerate(els):
        if select_depth is not None and e.depth <= select_depth:
            select_depth = None
        if e.bid is None:
            continue
        if e.role in FILL_ROLES:
            out += [f"fill({e.bid!r}, {v!r})" for v in values]
        if e.role in _SELECT_ROLES:
            out += [f"select_option({e.bid!r}, {o!r})" for o in _options(els, i)]
            select_depth = e.depth
        elif select_depth is not None:
            continue
        if e.role in _CLICK_ROLES or e.clickable:
            out.append(f"click({e.bid!r})")
    return list(dict.fromkeys(out))
