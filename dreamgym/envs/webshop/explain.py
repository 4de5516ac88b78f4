"""Environment-grounded reasoning traces for WebShop transitions (the experience model's R*_t targets).

Owns: `explain(transition)`: 1-3 sentences saying what the action did to the page, which goal conditions
hold now, and why the reward is what it is, read from the two abstract states and the task's goal.
Must not know: the catalog, the environment's internals, models.

Everything a trace states is visible in the abstract states (page headers, links, options, the done
page's score breakdown) or in the goal, so a trace never claims what the experience model could not check.
"""

from __future__ import annotations

import re
from typing import Any

from dreamgym.envs.webshop.pages import ACTION_RE, SUB_PAGE_KINDS, parse_abstract
from dreamgym.envs.webshop.reward import goal_options_dict
from dreamgym.types import Transition

_PRICE = re.compile(r"\$(\d+(?:\.\d+)?)")
_SCORE = re.compile(r"score \(min 0\.0, max 1\.0\): ([\d.]+)")
_BREAKDOWN = re.compile(r"type ([\d.]+) \| attributes (\d+)/(\d+) \| options (\d+)/(\d+) \| price (\d)/1")


def _price_of(texts: list[str]) -> float | None:
    for t in texts:
        if t.startswith("Price:"):
            m = _PRICE.search(t)
            return float(m.group(1)) if m else None
    return None


def _goal_phrase(goal: dict[str, Any]) -> str:
    what = goal.get("product_type") or goal.get("query") or "product"
    attrs = goal.get("attributes") or []
    bound = goal.get("price_upper")
    s = f"a {what}" + (f" that is {', '.join(attrs)}" if attrs else "")
    return s + (f" under ${float(bound):.2f}" if bound else "")


def _option_status(goal_opts: dict[str, str], options: list[dict[str, Any]]) -> str:
    if not goal_opts:
        return "the goal names no options"
    sel = {o["name"]: o["value"] for o in options if o["selected"]}
    done = [f"{k}: {v}" for k, v in goal_opts.items() if sel.get(k, "").lower() == v.lower()]
    todo = [f"{k}: {v}" for k, v in goal_opts.items() if sel.get(k, "").lower() != v.lower()]
    if not todo:
        return f"all goal options ({', '.join(done)}) are selected"
    return f"{len(done)}/{len(goal_opts)} goal options are selected (still needed: {', '.join(todo)})"


def explain(tr: Transition) -> str:
    """A short causal explanation of (state, action) -> (next state, reward) for WebShop."""
    goal = tr.task.goal or {}
    before, after = parse_abstract(tr.state), parse_abstract(tr.next_state)
    m = ACTION_RE.match(tr.action or "")
    verb, arg = (m.group(1).lower(), " ".join(m.group(2).split())) if m else ("", "")
    reward = f"{tr.reward:g}"
    where = before["page"] or "current"
    if after["notice"] or not m:
        return (f"'{tr.action.strip()[:60]}' cannot be carried out on the {where} page, so the page stays the "
                f"same with a notice ({after['notice'] or 'invalid action'}); the reward is 0.")
    end = " The step limit is reached, so the episode ends with reward 0." if tr.done and after["page"] != "done" else ""
    if after["page"] == "done":
        s = _SCORE.search(tr.next_state)
        b = _BREAKDOWN.search(tr.next_state)
        bought = before["asin"] or "the product"
        if b:
            rt, na, ga, no, go, pr = b.groups()
            return (f"Buy Now purchases {bought} and ends the episode. The score is (attributes {na}/{ga} + "
                    f"options {no}/{go} + price {pr}) / {int(ga) + int(go) + 1} times type factor {rt} = "
                    f"{s.group(1) if s else reward}, so the reward is {reward}"
                    + (" and the task is won." if tr.reward == 1.0 else "."))
        return f"Buy Now purchases {bought} and ends the episode with reward {reward}."
    if verb == "search" and after["page"] == "results":
        found = (f"page 1 of {after['n_pages']} with {after['total']} products" if after["total"]
                 else "no results, only Back to Search")
        q = arg if len(arg) <= 80 else arg[:79] + "…"
        return (f"Searching for \"{q}\" opens the results: {found}. The goal is {_goal_phrase(goal)}; "
                f"nothing is bought yet, so the reward is 0.{end}")
    if after["page"] == "results":
        how = ("goes back to" if before["page"] in ("item",) else "moves to")
        return (f"Clicking {arg} {how} page {after['page_no']} of the results for \"{after['query'][:40]}\", "
                f"showing {len(after['links'])} products. The reward stays 0 until a purchase.{end}")
    if after["page"] == "search":
        return (f"Back to Search returns to the empty search page and drops any selected options; the reward "
                f"is 0.{end}")
    if after["page"] == "item":
        price = _price_of(after["texts"])
        bound = goal.get("price_upper")
        goal_opts = goal_options_dict(goal)
        if before["page"] == "item" and before["asin"] == after["asin"]:
            return (f"Clicking {arg} selects that option of {after['asin']}; {_option_status(goal_opts, after['options'])}."
                    f" Nothing is bought yet, so the reward is 0.{end}")
        if before["page"] in SUB_PAGE_KINDS:
            return f"< Prev returns from the {before['page']} tab to the item page of {after['asin']}; the reward is 0.{end}"
        title = after["texts"][0] if after["texts"] else after["asin"]
        budget = ""
        if price is not None and bound:
            budget = f", {'within' if price <= float(bound) else 'above'} the ${float(bound):.2f} budget"
        offered = {o["value"].lower() for o in after["options"]}
        avail = [f"{k}: {v}" for k, v in goal_opts.items() if v.lower() in offered]
        opts = (f" It offers {len(avail)}/{len(goal_opts)} of the goal options"
                + (f" ({', '.join(avail)})." if avail else ".")) if goal_opts else ""
        return (f"Clicking {after['asin']} opens its item page: {title}"
                + (f" at ${price:.2f}" if price is not None else "") + f"{budget}.{opts} The reward is 0.{end}")
    if after["page"] in SUB_PAGE_KINDS:
        attrs = goal.get("attributes") or []
        text = " ".join(after["texts"]).lower()
        seen = [a for a in attrs if a.lower() in text]
        note = f" It mentions {', '.join(seen)} from the goal." if seen else ""
        return (f"Clicking {after['page'].capitalize()} opens that tab of {after['asin']}; it changes nothing "
                f"about the purchase.{note} The reward is 0.{end}")
    return f"The action {tr.action.strip()[:60]} leads to the {after['page'] or 'next'} page; the reward is {reward}.{end}"
