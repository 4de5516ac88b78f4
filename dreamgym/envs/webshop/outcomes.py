"""WebShop steps whose outcome an experience model need not write: what the page alone fixes, and what only the
catalog fixes, under a key a recorded real step answers.

Owns: the family hooks `model_observation` / `state_after` (a WebShop state is the page, so the model's text is
the whole next page), `hidden_outcome_key` and `determined_outcome` (`dreamgym.envs`), read from abstract states.
Must not know: the catalog's contents, search, rewards, models. A key names the catalog (read from the task id)
and never opens it.

Which steps are which (checked against the real environment in `tests/envs/test_webshop_outcomes.py`):
- hidden, one page per key whatever the episode did before: a search (the results for that query, page 1), a
  product link (its item page with nothing selected), a Description / Features / Reviews tab (that product's
  sub-page), Next > / < Prev on a results page (the neighbouring page of the same results, keyed by the page
  shown, which names the query's first 40 characters and lists its products);
- determined by the page: Back to Search (the empty search page) and an option on an item page (the same page
  with that option marked selected in its group);
- left to the model: < Prev from an item page or a sub-page (the page it returns to is not on the page), Buy
  Now (its reward and end come from `grounded_outcome`; the model writes the confirmation page), and any
  action the page does not offer (the synthetic environment answers those itself).
"""

from __future__ import annotations

import hashlib
from typing import Any

from dreamgym.envs.webshop.pages import (ACTION_RE, BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, SUB_PAGES, norm_label,
                                         notice_line, parse_abstract, refusal_notice)

SEARCH_PAGE = "[page] search\n[searchbox] search"
MAX_QUERY_CHARS = 500  # what the real environment keeps of a query


def clean_query(text: str) -> str:
    """A query as the real environment runs it: unprintable characters as spaces, whitespace folded, at most
    `MAX_QUERY_CHARS` characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:MAX_QUERY_CHARS]


def catalog_id(task: Any) -> str:
    """The catalog a task shops in, from its id (`env.catalog_tasks` writes "webshop-..." for the synthetic
    catalog and "webshop[KEY]-..." for another), without loading it."""
    tid = str(getattr(task, "id", task))
    if tid.startswith("webshop[") and "]" in tid:
        return tid[len("webshop["):tid.index("]")]
    return "synthetic"


def model_observation(state: str) -> str:
    """A WebShop state is the page the agent sees: the model writes all of it."""
    return state


def state_after(previous: str, written: str) -> str:
    """The next state is the page written; nothing carries over from `previous`."""
    return written


def noop_state(state: str, action: str) -> str:
    """The page the real shop shows after `action`, which it cannot carry out: the same page with the shop's
    notice right after its `[page]` line (where the page template puts it), an older notice replaced."""
    lines = _without_notice(state)
    notice = notice_line(refusal_notice(parse_abstract(state)["page"] or "search", action))
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("[page]")), 0)
    return "\n".join(lines[:at] + [notice] + lines[at:])


def _without_notice(state: str) -> list[str]:
    # A notice is the answer to the previous, failed action; the next step's page never keeps it.
    return [line for line in state.strip().splitlines() if not line.startswith("[notice]")]


def _clicked(page: dict[str, Any], target: str) -> tuple[str, ...] | None:
    """The element `click[target]` hits on a parsed page, in the real environment's matching order (buttons
    Back/Prev/Next, product links, options by value or "name: value", the other buttons): ("button", text),
    ("link", asin) or ("option", name, value); None when the page offers no such element."""
    t = norm_label(target)
    head = [b for b in page["buttons"] if b in (BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE)]
    for b in head:
        if norm_label(b) == t:
            return ("button", b)
    for link in page["links"]:
        if norm_label(link["asin"]) == t:
            return ("link", link["asin"])
    for o in page["options"]:
        if norm_label(o["value"]) == t or norm_label(f"{o['name']}: {o['value']}") == t:
            return ("option", o["name"], o["value"])
    for b in page["buttons"]:
        if b not in head and norm_label(b) == t:
            return ("button", b)
    return None


def hidden_outcome_key(task: Any, state: str, action: str) -> str | None:
    """A key for `action`'s outcome on page `state` when only the catalog decides it (see the module docstring),
    else None. Equal keys mean the same next page in every episode on that catalog."""
    m = ACTION_RE.match(action or "")
    if not m or not state.strip():
        return None
    verb, arg = m.group(1).lower(), m.group(2)
    page = parse_abstract(state)
    world = catalog_id(task)
    if verb == "search":
        query = clean_query(arg)
        return f"{world}|search|{query}" if page["page"] == "search" and query else None
    hit = _clicked(page, arg)
    if hit is None:
        return None
    if page["page"] == "results":
        if hit[0] == "link":
            return f"{world}|item|{hit[1]}"
        if hit[0] == "button" and hit[1] in (NEXT_PAGE, PREV_PAGE):
            shown = hashlib.sha1("\n".join(_without_notice(state)).encode()).hexdigest()
            return f"{world}|{hit[1]}|{shown}"
    if page["page"] == "item" and hit[0] == "button" and hit[1] in SUB_PAGES:
        return f"{world}|{hit[1].lower()}|{page['asin']}"
    return None


def determined_outcome(task: Any, state: str, action: str) -> str | None:
    """The next page when page `state` alone fixes it: Back to Search gives the empty search page; an option on
    an item page gives the same page with that option selected and the rest of its group not. None otherwise
    (`state_after` takes the page as written, so this is the whole next state)."""
    m = ACTION_RE.match(action or "")
    if not m or m.group(1).lower() != "click" or not state.strip():
        return None
    page = parse_abstract(state)
    hit = _clicked(page, m.group(2))
    if hit is None or page["page"] in ("search", "done", ""):
        return None
    if hit == ("button", BACK_TO_SEARCH):
        return SEARCH_PAGE
    if hit[0] != "option" or page["page"] != "item":
        return None
    _, name, value = hit
    out = []
    for line in _without_notice(state):
        if line.startswith("[option] "):
            body = line[len("[option] "):].removesuffix(" (selected)")
            group, _, val = body.partition(": ")
            if group.strip() == name:
                line = f"[option] {body}" + (" (selected)" if val.strip() == value else "")
        out.append(line)
    return "\n".join(out)
