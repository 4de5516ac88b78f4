"""How `dreamgym view` draws an abstract state: WebShop's as the shop's own page, every other family's as text,
and where two next states differ.

Owns: `highlight_diff` (two states as HTML with the words each has and the other lacks marked, by `difflib`) and
`shop_page` (a WebShop abstract state, real or written by a model, as the page the shop itself renders for it).
Must not know: HTTP, runs, models. It knows the WebShop abstract state only through `dreamgym.envs.webshop.pages`
(`parse_abstract`, `PageState`, `render_html`), imported when a WebShop state is drawn.
"""

from __future__ import annotations

import difflib
import re
import threading
from html import escape
from typing import Any

from dreamgym.types import Task

_TOKEN = re.compile(r"\s+|[^\s]+")


def highlight_diff(a: str, b: str) -> tuple[str, str, bool]:
    """(a as HTML, b as HTML, whether they differ): the tokens of each that the other lacks are wrapped in
    `<mark class="diff">`; whitespace is kept, so the text reads as written."""
    ta, tb = _TOKEN.findall(a or ""), _TOKEN.findall(b or "")
    sm = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    out_a: list[str] = []
    out_b: list[str] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        pa, pb = escape("".join(ta[i1:i2])), escape("".join(tb[j1:j2]))
        if op == "equal":
            out_a.append(pa)
            out_b.append(pb)
            continue
        if pa.strip():
            out_a.append(f'<mark class="diff">{pa}</mark>')
        else:
            out_a.append(pa)
        if pb.strip():
            out_b.append(f'<mark class="diff">{pb}</mark>')
        else:
            out_b.append(pb)
    return "".join(out_a), "".join(out_b), " ".join(a.split()) != " ".join(b.split())


_CATALOG_LOCK = threading.Lock()


def _catalog(key: str | None, task: Task) -> Any:
    from dreamgym.envs.webshop.catalog import get_catalog
    from dreamgym.envs.webshop.env import task_catalog

    with _CATALOG_LOCK:
        if key:
            return get_catalog(key)
        return task_catalog(task) or get_catalog()


class _Shelf:
    """The catalog's products by id, as `render_html` reads them; the ids a page lists are all it needs."""

    def __init__(self, catalog: Any):
        self.by_asin = catalog.by_asin


_PURCHASED = re.compile(r"^Purchased (\S+)(?: with (.*))?$")
_SCORE = re.compile(r"^Your score \(min 0\.0, max 1\.0\): (.*)$")


def shop_page(state: str, task: Task, catalog_key: str | None = None) -> str | None:
    """The shop's HTML page for a WebShop abstract state, or None when the state names something the catalog does
    not have or is not a page (a model can write either); the caller then shows the text."""
    from dreamgym.envs.webshop.pages import PRODUCT_WINDOW, PageState, parse_abstract, render_html

    p = parse_abstract(state)
    kind = p["page"]
    try:
        catalog = _catalog(catalog_key, task)
    except Exception:  # noqa: BLE001 - no catalog to draw from: the text is shown instead
        return None
    asins = [link["asin"] for link in p["links"]]
    if any(a not in catalog.by_asin for a in asins + ([p["asin"]] if p["asin"] else [])):
        return None
    notice = p["notice"]
    if kind == "search":
        ps = PageState(notice=notice)
    elif kind == "results":
        page = max(1, int(p["page_no"] or 1))
        before = (page - 1) * PRODUCT_WINDOW
        total = max(int(p["total"] or 0), before + len(asins))
        filler = asins[0] if asins else ""
        results = tuple([filler] * before + asins + [filler] * (total - before - len(asins)))
        ps = PageState("results", query=p["query"], results=results, page=page, notice=notice)
    elif kind == "item" or kind in ("description", "features", "reviews"):
        if not p["asin"]:
            return None
        selected = tuple((o["name"], o["value"]) for o in p["options"] if o["selected"])
        ps = PageState(kind, asin=p["asin"], selected=selected, notice=notice)
    elif kind == "done":
        purchase: dict[str, Any] = {"asin": "", "options": "", "score": "", "breakdown": ""}
        for text in p["texts"]:
            if m := _PURCHASED.match(text):
                purchase.update(asin=m.group(1), options=m.group(2) or "")
            elif m := _SCORE.match(text):
                purchase["score"] = m.group(1)
            elif text.startswith("type "):
                purchase["breakdown"] = text
        ps = PageState("done", asin=purchase["asin"], purchase=purchase)
    else:
        return None
    try:
        return render_html(ps, _Shelf(catalog), task.instruction)  # type: ignore[arg-type]
    except (KeyError, ValueError, TypeError):
        return None
