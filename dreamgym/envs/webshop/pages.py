"""WebShop pages: the page state, its HTML (jinja2 templates), and the two text views derived from HTML.

Owns: `PageState`, `render_html`, the clickable elements of a page (`clickables`), and the published
mappers from raw HTML: `html_to_text` (WebShop's "simple" mode, visible strings joined by " [SEP] ") and
`html_to_abstract` (the compact element list the experience model reads and writes), plus
`admissible_from_state` and `parse_abstract` that read an abstract state back.
Must not know: search, rewards, the environment's episode logic, models.

The abstract state is produced from HTML markup only, so real pages and the experience model's training
data go through exactly one mapping. Markup rules (the templates follow them; any page that does can be
mapped):
- an element with `data-ab="KIND"` becomes one line `[KIND] text`, text being its visible text with
  whitespace folded, or its `data-ab-text` attribute when present (used for `[page]` headers and the
  search box, which have no visible text of their own);
- a `[link]` joins its `data-ab-part` children with " | " (product id | title | price), the title cut;
- an `[option]` is written `group: value`, with " (selected)" when its class contains `selected`;
- `[text]` lines are cut to `TEXT_LIMIT` characters; everything without `data-ab` (the logo, the
  instruction, the "Page 1 (Total results: 50)" line, styling) is left out.
The instruction is deliberately not in the abstract state: it never changes within an episode and the
experience model receives it as the task, so repeating it would only lengthen every predicted state.

Example (a results page):
    [page] results for "men's t-shirt", page 1 of 5 (50 total)
    [button] Back to Search
    [button] Next >
    [link] B0ZG8AAFJ0 | Hanes Machine Wash Jersey… | $24.49
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2

if TYPE_CHECKING:
    from dreamgym.envs.webshop.catalog import Catalog
    from dreamgym.envs.webshop.product import Product

PRODUCT_WINDOW = 10          # results per page, as the original
TITLE_LIMIT = 32             # characters of a result title kept in the abstract state
TEXT_LIMIT = 120             # characters of a [text] line kept in the abstract state
QUERY_LIMIT = 40             # characters of the query repeated in a results page's [page] header
SEARCH_PLACEHOLDER = "search[<query>]"
ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.S | re.I)  # search[...] / click[...], any case

BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
SUB_PAGE_KINDS = tuple(s.lower() for s in SUB_PAGES)  # page kinds of the item's sub-pages
PAGE_KINDS = ("search", "results", "item", *SUB_PAGE_KINDS, "done")


@dataclass(frozen=True)
class PageState:
    """Everything needed to draw one page. Frozen: a step makes a new state (cheap, and safe to share)."""

    kind: str = "search"
    query: str = ""
    results: tuple[str, ...] = ()
    page: int = 1
    asin: str = ""
    selected: tuple[tuple[str, str], ...] = ()   # chosen options, in choice order
    notice: str = ""
    purchase: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def n_pages(self) -> int:
        return max(1, -(-len(self.results) // PRODUCT_WINDOW))

    @property
    def selected_dict(self) -> dict[str, str]:
        return dict(self.selected)

    def with_notice(self, notice: str) -> PageState:
        return replace(self, notice=notice)


# ---------------------------------------------------------------------------------------------------------
# Rendering

_TEMPLATES = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                             lstrip_blocks=True, auto_reload=False)
    env.globals["act"] = lambda action: "act?a=" + quote(action, safe="")
    return env


def norm_label(text: str) -> str:
    """An element label or click target as they are compared: lower case, whitespace folded ("Buy  now" ->
    "buy now"). The environment, its scripted policies and the outcome hooks must match clicks alike."""
    return " ".join(text.lower().split())


def page_text(state: PageState) -> str:
    """The `[page]` header of the abstract state."""
    if state.kind == "results":
        q = state.query if len(state.query) <= QUERY_LIMIT else state.query[:QUERY_LIMIT - 1] + "…"
        return f'results for "{q}", page {state.page} of {state.n_pages} ({len(state.results)} total)'
    if state.kind == "item":
        return f"item {state.asin}"
    if state.kind in SUB_PAGE_KINDS:
        return f"{state.kind} of {state.asin}"
    return state.kind


def render_html(state: PageState, catalog: Catalog, instruction: str) -> str:
    """The page as HTML; links are relative `act?a=<action>` URLs so a server can serve it unchanged."""
    j = _jinja()
    ctx: dict[str, Any] = {"instruction": instruction, "notice": state.notice, "page_text": page_text(state)}
    if state.kind == "search":
        return j.get_template("search.html").render(ctx)
    if state.kind == "results":
        lo = (state.page - 1) * PRODUCT_WINDOW
        items = [catalog.by_asin[a] for a in state.results[lo:lo + PRODUCT_WINDOW]]
        return j.get_template("results.html").render(ctx, items=items, page=state.page,
                                                     total=len(state.results),
                                                     has_next=state.page < state.n_pages)
    if state.kind == "done":
        p = state.purchase or {}
        return j.get_template("done.html").render(ctx, **p)
    product = catalog.by_asin[state.asin]
    if state.kind == "item":
        return j.get_template("item.html").render(ctx, product=product, selected=state.selected_dict)
    return j.get_template("subpage.html").render(ctx, product=product, kind=state.kind)


def clickables(state: PageState, product: Product | None) -> list[tuple[str, tuple[str, ...]]]:
    """The clickable elements of a page in page order: (visible text, effect). Effects: ("search",),
    ("page", n), ("item", asin), ("option", name, value), ("sub", kind), ("item_back",), ("results_back",),
    ("buy",)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    if state.kind in ("search", "done"):
        return out
    out.append((BACK_TO_SEARCH, ("search",)))
    if state.kind == "results":
        if state.page > 1:
            out.append((PREV_PAGE, ("page", str(state.page - 1))))
        if state.page < state.n_pages:
            out.append((NEXT_PAGE, ("page", str(state.page + 1))))
        lo = (state.page - 1) * PRODUCT_WINDOW
        out.extend((a, ("item", a)) for a in state.results[lo:lo + PRODUCT_WINDOW])
    elif state.kind == "item":
        out.append((PREV_PAGE, ("results_back",)))
        if product is not None:
            for name, values in product.options.items():
                out.extend((v, ("option", name, v)) for v in values)
        out.extend((s, ("sub", s.lower())) for s in SUB_PAGES)
        out.append((BUY_NOW, ("buy",)))
    else:
        out.append((PREV_PAGE, ("item_back",)))
    return out


# ---------------------------------------------------------------------------------------------------------
# HTML -> text views

_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
_HIDDEN = frozenset(("head", "style", "script", "title", "template"))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:-") + "…"


class _PageParser(HTMLParser):
    """One pass over the HTML collecting both the visible strings and the abstract-state lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.visible: list[str] = []
        self.lines: list[str] = []
        self.stack: list[str] = []
        self.hidden_depth = 0
        self.capture: dict[str, Any] | None = None  # the data-ab element being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag not in _VOID:
            self.stack.append(tag)
            if tag in _HIDDEN:
                self.hidden_depth += 1
        kind = a.get("data-ab")
        if self.capture is not None:
            part = a.get("data-ab-part")
            if part is not None and tag not in _VOID:
                self.capture["part_depth"] = len(self.stack)
                self.capture["parts"].append([part, []])
            return
        if not kind:
            return
        if a.get("data-ab-text") is not None or tag in _VOID:
            self.lines.append(f"[{kind}] {' '.join((a.get('data-ab-text') or '').split())}".rstrip())
            return
        self.capture = {"kind": kind, "depth": len(self.stack), "text": [], "parts": [], "part_depth": 0,
                        "group": a.get("data-group") or "", "selected": "selected" in (a.get("class") or "").split()}

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or tag not in self.stack:
            return
        while self.stack:
            top = self.stack.pop()
            if top in _HIDDEN:
                self.hidden_depth -= 1
            c = self.capture
            if c is not None:
                if c["part_depth"] and len(self.stack) < c["part_depth"]:
                    c["part_depth"] = 0
                if len(self.stack) < c["depth"]:
                    self.lines.append(_abstract_line(c))
                    self.capture = None
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.hidden_depth:
            return
        s = data.strip()
        if not s:
            return
        self.visible.append(" ".join(s.split()))
        c = self.capture
        if c is not None:
            if c["part_depth"] and c["parts"]:
                c["parts"][-1][1].append(s)
            else:
                c["text"].append(s)


def _abstract_line(c: dict[str, Any]) -> str:
    kind = c["kind"]
    if c["parts"]:
        parts = []
        for name, texts in c["parts"]:
            t = " ".join(" ".join(texts).split())
            parts.append(_cut(t, TITLE_LIMIT) if name == "title" else t)
        return f"[{kind}] " + " | ".join(parts)
    text = " ".join(" ".join(c["text"]).split())
    if kind == "option":
        return f"[option] {c['group']}: {text}" + (" (selected)" if c["selected"] else "")
    if kind in ("text", "notice"):
        text = _cut(text, TEXT_LIMIT)
    return f"[{kind}] {text}"


@lru_cache(maxsize=2048)
def _parse(html: str) -> tuple[str, str]:
    p = _PageParser()
    p.feed(html)
    p.close()
    return " [SEP] ".join(p.visible), "\n".join(p.lines)


def html_to_text(html: str) -> str:
    """WebShop's "simple" observation: every visible string of the page joined with " [SEP] "."""
    return _parse(html)[0]


def html_to_abstract(html: str) -> str:
    """The abstract state of a page: one `[kind] text` line per marked element (see module docstring)."""
    return _parse(html)[1]


# ---------------------------------------------------------------------------------------------------------
# Reading abstract states back

_LINE = re.compile(r"^\[(\w+)\]\s?(.*)$")
_RESULTS = re.compile(r'^results for "(.*)", page (\d+) of (\d+) \((\d+) total\)$')


def parse_abstract(state: str) -> dict[str, Any]:
    """The parts of an abstract state: page kind, product id, query and paging, links, options, buttons,
    texts and notice. Tolerant: unknown or malformed lines are ignored (states may come from a model)."""
    out: dict[str, Any] = {"page": "", "asin": "", "query": "", "page_no": 0, "n_pages": 0, "total": 0,
                           "links": [], "options": [], "buttons": [], "texts": [], "notice": "",
                           "searchbox": False}
    for raw in (state or "").splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        kind, text = m.group(1), m.group(2).strip()
        if kind == "page" and not out["page"]:
            r = _RESULTS.match(text)
            if r:
                out.update(page="results", query=r.group(1), page_no=int(r.group(2)), n_pages=int(r.group(3)),
                           total=int(r.group(4)))
            elif text.startswith("item "):
                out.update(page="item", asin=text[5:].strip())
            elif " of " in text and text.split(" of ")[0] in SUB_PAGE_KINDS:
                sub, asin = text.split(" of ", 1)
                out.update(page=sub, asin=asin.strip())
            else:
                out["page"] = text
        elif kind == "button":
            out["buttons"].append(text)
        elif kind == "link":
            parts = [p.strip() for p in text.split(" | ")]
            out["links"].append({"asin": parts[0], "title": parts[1] if len(parts) > 1 else "",
                                 "price": parts[2] if len(parts) > 2 else ""})
        elif kind == "option":
            selected = text.endswith(" (selected)")
            if selected:
                text = text[: -len(" (selected)")]
            name, _, value = text.partition(": ")
            if value:
                out["options"].append({"name": name.strip(), "value": value.strip(), "selected": selected})
        elif kind == "text":
            out["texts"].append(text)
        elif kind == "notice":
            out["notice"] = text
        elif kind == "searchbox":
            out["searchbox"] = True
    return out


def short_text(text: str, n: int = 60) -> str:
    """`text` on one line, cut to `n` characters (how a notice quotes what the agent wrote)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def notice_line(notice: str) -> str:
    """The abstract-state line of a page's notice, as `html_to_abstract` writes it."""
    return f"[notice] {_cut(' '.join(notice.split()), TEXT_LIMIT)}"


def refusal_notice(page_kind: str, action: str) -> str:
    """The shop's notice for `action`, which it cannot carry out on a page of kind `page_kind` ("search",
    "results", "item", a sub-page, "done"). One function for the real shop and the synthetic one, so both
    word a refusal alike."""
    m = ACTION_RE.match(action) if isinstance(action, str) else None
    if not m:
        return f"Invalid action {short_text(str(action))!r}: use search[query] or click[element]."
    if m.group(1).lower() == "search":
        if page_kind != "search":
            return "search[...] only works on the search page: click[Back to Search] first."
        return "Empty search query: write search[your words]."
    if page_kind == "done":
        return "The purchase is complete."
    return f"{short_text(m.group(2)) or 'Nothing'!r} is not clickable on this page."


def admissible_from_state(state: str) -> list[str]:
    """The actions an abstract state offers, in page order: `click[...]` for every button, product link
    (by id) and option (by value), and `search[<query>]` where the page has a search box.

    `search[<query>]` is a form, not a literal action: the agent replaces `<query>` with its own words and
    any `search[...]` is valid on such a page. A synthetic environment should treat it the same way (accept
    every `search[...]` there; the literal placeholder is just an ordinary, useless query, which the real
    environment answers with a results page for the word "query"). Other actions must match an offered
    element up to case and whitespace.
    """
    parsed = parse_abstract(state)
    acts: list[str] = []
    if parsed["searchbox"]:
        acts.append(SEARCH_PLACEHOLDER)
    # Page order as drawn: buttons before links on results pages; on item pages Back/Prev, options, subs.
    buttons = parsed["buttons"]
    head = [b for b in buttons if b in (BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE)]
    tail = [b for b in buttons if b not in head]
    acts.extend(f"click[{b}]" for b in head)
    acts.extend(f"click[{link['asin']}]" for link in parsed["links"])
    acts.extend(f"click[{o['value']}]" for o in parsed["options"])
    acts.extend(f"click[{b}]" for b in tail)
    seen: set[str] = set()
    unique = []
    for a in acts:
        if a.lower() not in seen:
            seen.add(a.lower())
            unique.append(a)
    return unique
