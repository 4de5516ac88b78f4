"""WebArena's evaluators, on a task config whose site URLs are filled in: string match on the agent's answer, URL
match on the page it ended on, and program-HTML checks that read pages with JavaScript locators.

Owns: the scoring rules of WebArena (and WebArena-Lite, which uses the same configs): `exact_match`,
`must_include` (a single-word reference matched as a token, so "0" is not found in "10"), `fuzzy_match` through a
`Judge`, the "GOLD in PRED" URL rule, the program-HTML targets (`last` page or a URL, a `document.` or `func:`
locator, `exact_match` / `must_include` with `|OR|` / `fuzzy_match` contents), and the three helper functions
WebArena-Lite's locators and URLs name.
Must not know: browsers beyond the few page methods it calls (`url`, `goto`, `evaluate`, `content`), DreamGym's
environment contract.

Departures from the original, on purpose: a `func:` locator or URL is looked up in `HELPERS` and called with its
literal arguments instead of being passed to `eval`; fuzzy matching (an LLM judge in WebArena) goes through a
`Judge` the caller gives, and the default one (`strict_judge`) accepts only an answer that contains every
reference after normalisation, so it can only be stricter than an LLM judge, never more lenient.
"""

from __future__ import annotations

import ast
import re
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


class Page(Protocol):
    """The page methods the evaluators use (a Playwright page has them)."""

    @property
    def url(self) -> str: ...

    def goto(self, url: str) -> Any: ...

    def evaluate(self, expression: str) -> Any: ...

    def content(self) -> str: ...


Judge = Callable[[str, str, str], float]
"""`judge(pred, reference, intent) -> score in [0, 1]`: whether an answer means the reference (WebArena asks an LLM)."""


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    """`ref` in `pred` (both cleaned); with `tokenize` a one-character reference must be a whole token of `pred`."""
    r, p = clean_answer(ref), clean_answer(pred)
    if tokenize and len(r) == 1 and len(_TOKEN_RE.findall(r)) == 1:
        return float(r in _TOKEN_RE.findall(p))
    return float(r in p)


def _normalise(text: str) -> str:
    return " ".join(_TOKEN_RE.findall(clean_answer(text)))


def strict_judge(pred: str, reference: str, intent: str) -> float:
    """The default `Judge`: 1.0 when the normalised answer contains the normalised reference (or equals "n/a" for
    a reference of "N/A"); never accepts a paraphrase an LLM judge might."""
    p, r = _normalise(pred), _normalise(reference)
    return float(bool(r) and (r in p if len(r) > 1 else r in p.split()))


def string_match(config: dict[str, Any], answer: str, judge: Judge = strict_judge) -> float:
    """WebArena's StringEvaluator on the agent's final answer."""
    pred = clean_answer(answer)
    score = 1.0
    for approach, value in (config["eval"].get("reference_answers") or {}).items():
        if approach == "exact_match":
            score *= exact_match(value, pred)
        elif approach == "must_include":
            for v in value:
                score *= must_include(v, pred, tokenize=len(value) == 1)
        elif approach == "fuzzy_match":
            if value == "N/A":
                # an unachievable task: "N/A" itself, or a reason the judge accepts against the note
                s = exact_match("N/A", pred)
                score *= s if s == 1.0 else judge(pred, config["eval"].get("string_note", ""), config["intent"])
            else:
                for v in value:
                    score *= judge(pred, v, config["intent"])
        else:
            raise ValueError(f"task {config.get('task_id')}: unknown reference answer kind {approach!r}")
    return score


def _parse_url(url: str) -> tuple[str, dict[str, list[str]]]:
    p = urllib.parse.urlparse(url)
    return p.netloc + p.path, urllib.parse.parse_qs(p.query)


def url_match(config: dict[str, Any], page_url: str) -> float:
    """WebArena's URLEvaluator ("GOLD in PRED"): some reference URL's host and path is the page's, and every query
    parameter of the references has one of its values in the page's query."""
    rule = config["eval"].get("url_note", "GOLD in PRED")
    if rule != "GOLD in PRED":
        raise ValueError(f"task {config.get('task_id')}: unknown URL matching rule {rule!r}")
    refs = [u.rstrip("/") for u in config["eval"]["reference_url"].split(" |OR| ")]
    pred_base, pred_query = _parse_url(page_url.rstrip("/"))
    ref_bases: list[str] = []
    ref_queries: dict[str, set[str]] = defaultdict(set)
    for u in refs:
        base, query = _parse_url(u)
        ref_bases.append(base)
        for k, v in query.items():
            ref_queries[k].update(v)
    score = float(any(b in pred_base for b in ref_bases))
    for k, values in ref_queries.items():
        score *= float(any(v in pred_query.get(k, []) for v in values))
    return score


# ------------------------------------------------------------------------------------------ helpers

def reddit_get_post_url(url: str) -> str:
    """The post a reddit (Postmill) comment or post URL belongs to: scheme://host/f/<forum>/<post id>/."""
    p = urllib.parse.urlparse(url)
    parts = p.path.split("/")
    if len(parts) < 4 or parts[1] != "f":
        return url
    return f"{p.scheme}://{p.netloc}/f/{parts[2]}/{parts[3]}/"


def gitlab_get_project_memeber_role(page: Page, account_name: str) -> str:
    """The role shown for `@account_name` on a GitLab project's members page ("" when not found). The name keeps
    WebArena's spelling, which its configs use."""
    try:
        return str(page.evaluate(f"""(() => {{
            const names = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
            const i = names.findIndex(e => e.outerText === {('@' + account_name)!r});
            return i < 0 ? "" : document.querySelectorAll("td.col-max-role span")[i].outerText;
        }})()"""))
    except Exception:  # noqa: BLE001 - a page without the table: no role, as in WebArena
        return ""


def shopping_get_latest_order_url(urls: dict[str, str], credentials: dict[str, dict[str, str]]) -> str:
    """The admin page of the shop's latest order, found through the shop's REST API as WebArena does."""
    import httpx

    base = urls["shopping"]
    admin = credentials["shopping_site_admin"]
    token = httpx.post(f"{base}/rest/default/V1/integration/admin/token", json=admin, timeout=30).json()
    params = {"searchCriteria[sortOrders][0][field]": "created_at", "searchCriteria[sortOrders][0][direction]": "DESC",
              "searchCriteria[pageSize]": "1"}
    r = httpx.get(f"{base}/rest/V1/orders", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r.raise_for_status()
    return f"{base}/sales/order/view/order_id/{int(r.json()['items'][0]['increment_id'])}/"


HELPERS = ("reddit_get_post_url", "gitlab_get_project_memeber_role", "shopping_get_latest_order_url")
_CALL_RE = re.compile(r"^(\w+)\((.*)\)$", re.S)


def _call_helper(spec: str, page: Page, context: dict[str, Any]) -> Any:
    """A `func:name(args)` of a config: `__page__` is the page, `__last_url__` its URL, other args literals."""
    m = _CALL_RE.match(spec.strip())
    if not m or m.group(1) not in HELPERS:
        raise ValueError(f"unknown helper {spec!r} (known: {', '.join(HELPERS)})")
    name, raw = m.group(1), m.group(2)
    args: list[Any] = []
    for part in (p.strip() for p in raw.split(",")) if raw.strip() else ():
        if part == "__page__":
            args.append(page)
        else:
            args.append(ast.literal_eval(part.replace("__last_url__", page.url)))
    if name == "shopping_get_latest_order_url":
        return shopping_get_latest_order_url(context["urls"], context["credentials"])
    if name == "reddit_get_post_url":
        return reddit_get_post_url(*args)
    return gitlab_get_project_memeber_role(*args)


def program_html(config: dict[str, Any], page: Page, judge: Judge = strict_judge, settle_s: float = 1.0,
                 context: dict[str, Any] | None = None) -> float:
    """WebArena's HTMLContentEvaluator: for each target, open its page (or stay on the last one), select content
    with its locator, and check the required contents."""
    score = 1.0
    for target in config["eval"]["program_html"]:
        url: str = target["url"]
        if url.startswith("func:"):
            url = str(_call_helper(url[5:], page, context or {}))
        if url != "last":
            page.goto(url)
            time.sleep(settle_s)
        locator: str = target["locator"]
        selected: Any
        if not locator.strip():
            selected = page.content()
        elif locator.startswith(("document.", "[...document.")):
            for prep in target.get("prep_actions", []):
                try:
                    page.evaluate(f"() => {prep}")
                except Exception:  # noqa: BLE001 - as in WebArena, a failing preparation leaves the page as is
                    pass
            try:
                selected = str(page.evaluate(f"() => {locator}") or "")
            except Exception:  # noqa: BLE001 - the element is not on this page: nothing selected
                selected = ""
        elif locator.startswith("func:"):
            selected = _call_helper(locator[5:], page, context or {})
        else:
            raise ValueError(f"task {config.get('task_id')}: unknown locator {locator!r}")
        if selected is None:
            return 0.0
        required = target["required_contents"]
        if "exact_match" in required:
            score *= exact_match(required["exact_match"], str(selected))
        elif "must_include" in required:
            for content in required["must_include"]:
                score *= float(any(must_include(c, str(selected)) for c in content.split(" |OR| ")))
        elif "fuzzy_match" in required:
            score *= judge(str(selected), ", ".join(required["fuzzy_match"]), config["intent"])
        else:
            raise ValueError(f"task {config.get('task_id')}: unknown required contents {sorted(required)}")
    return score


def evaluate(config: dict[str, Any], answer: str, page: Page, judge: Judge = strict_judge, settle_s: float = 1.0,
             context: dict[str, Any] | None = None) -> float:
    """The product of the config's evaluators (`eval.eval_types`), as WebArena's EvaluatorComb scores a task."""
    score = 1.0
    for kind in config["eval"]["eval_types"]:
        if kind == "string_match":
            score *= string_match(config, answer, judge)
        elif kind == "url_match":
            score *= url_match(config, page.url)
        elif kind == "program_html":
            score *= program_html(config, page, judge, settle_s, context)
        else:
            raise ValueError(f"task {config.get('task_id')}: unknown eval type {kind!r}")
    return score
