"""Scripted WebShop policies for offline trajectories: oracle, noisy (human-like), shopper and random.

Owns: how each policy picks the next action from an observation's `info` (the abstract state and the
catalog key); the oracle's notion of a winning product.
Must not know: how trajectories are stored, models, torch, trainers.

All policies read the page from `info["abstract_state"]` (so they act on what the page shows) and are
constructed as `cls(seed)`, then `reset(task, obs, info)` once per episode and `act(obs, info)` per step.
The oracle also consults the catalog (found from `info["catalog_key"]`) to know which listed products
would score 1.0, which a human shopper would find out by reading the product pages.
"""

from __future__ import annotations

import random
import re
from typing import Any

from dreamgym.envs.webshop.catalog import Catalog, get_catalog
from dreamgym.envs.webshop.goals import parse_goal
from dreamgym.envs.webshop.pages import (BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, PRODUCT_WINDOW,
                                         SEARCH_PLACEHOLDER, SUB_PAGE_KINDS, SUB_PAGES, norm_label, parse_abstract)
from dreamgym.envs.webshop.product import Product
from dreamgym.envs.webshop.reward import get_reward, goal_options_dict, option_matches
from dreamgym.types import Task

_PRICE_CLAUSE = re.compile(r",?\s*(and\s+)?(the\s+)?(price|priced|that costs|for less|under \d).*$")


def click(label: str) -> str:
    return f"click[{label}]"


def best_options(product: Product, goal: dict[str, Any]) -> dict[str, str]:
    """The option values to click on `product` to satisfy the goal options: per goal option, the value of the
    same-named group (any free group for unnamed official options) that equals it, else one the reward's
    fuzzy rule accepts. Goal options the product cannot satisfy are left out."""
    chosen: dict[str, str] = {}
    for gname, gval in goal_options_dict(goal).items():
        groups = [gname] if gname in product.options else [k for k in product.options if k not in chosen]
        free_match = option_matches(product, {gname: gval}, {})[0]  # already matched by the product text
        for group in groups:
            values = product.options[group]
            pick = next((v for v in values if norm_label(v) == norm_label(gval)), None)
            if pick is None and not free_match:
                pick = next((v for v in values if option_matches(product, {gname: gval}, {group: v})[0]), None)
            if pick is not None and group not in chosen:
                chosen[group] = pick
                break
    return chosen


class _PagePolicy:
    """The page dispatch every page-reading shopper shares: search with `_query()`, decide on results and item
    pages in `_on_results` / `_on_item`, leave a description/features/reviews sub-page, else back to search."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        p = parse_abstract(info.get("abstract_state", ""))
        page = p["page"]
        if page == "search":
            return f"search[{self._query()}]"
        if page == "results":
            return self._on_results(p)
        if page == "item":
            return self._on_item(p)
        if page in SUB_PAGE_KINDS:
            return click(PREV_PAGE)
        return click(BACK_TO_SEARCH)

    def _query(self) -> str:
        raise NotImplementedError

    def _on_results(self, p: dict[str, Any]) -> str:
        raise NotImplementedError

    def _on_item(self, p: dict[str, Any]) -> str:
        raise NotImplementedError


class OraclePolicy(_PagePolicy):
    """Searches with the instruction's type and attributes, scans the (at most 5) result pages for a
    product that scores 1.0 with the right options, clicks the options and buys. If none of the 50
    results wins, it searches again with the instruction, then with the target's title."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.goal: dict[str, Any] = {}
        self.catalog: Catalog | None = None
        self.queries: list[str] = []
        self.qi = 0
        self._wins: dict[str, dict[str, str] | None] = {}

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.goal = task.goal or parse_goal(task.instruction) or {}
        key = info.get("catalog_key")
        self.catalog = get_catalog(key) if key else get_catalog()
        self.queries = self._queries(task)
        self.qi = 0
        self._wins = {}

    def _queries(self, task: Task) -> list[str]:
        g = self.goal
        first = " ".join([g.get("product_type") or g.get("query") or "", *g.get("attributes", [])]).strip()
        instr = _PRICE_CLAUSE.sub("", task.instruction).strip()
        out = [q for q in (first, instr) if q]
        target = self.catalog.by_asin.get(g.get("asin") or "") if self.catalog else None
        if target is not None:
            out.append(target.title)
        return list(dict.fromkeys(out)) or [task.instruction]

    def winning_options(self, asin: str) -> dict[str, str] | None:
        """The options that make `asin` score 1.0 for this goal, or None when it cannot."""
        if asin not in self._wins:
            product = self.catalog.by_asin.get(asin) if self.catalog else None
            result = None
            if product is not None:
                opts = best_options(product, self.goal)
                if get_reward(product, self.goal, product.price, opts)[0] == 1.0:
                    result = opts
            self._wins[asin] = result
        return self._wins[asin]

    def _query(self) -> str:
        return self.queries[min(self.qi, len(self.queries) - 1)]

    def _on_results(self, p: dict[str, Any]) -> str:
        for link in p["links"]:
            if self.winning_options(link["asin"]) is not None:
                return click(link["asin"])
        # Is a winner further down the full result list? (The same engine gives the same 50 results.)
        full = self.catalog.search.search(p["query"]) if self.catalog else []
        later = [i for i, a in enumerate(full) if self.winning_options(a) is not None]
        if later and NEXT_PAGE in p["buttons"] and later[0] >= p["page_no"] * PRODUCT_WINDOW:
            return click(NEXT_PAGE)
        if self.qi + 1 < len(self.queries):
            self.qi += 1
            return click(BACK_TO_SEARCH)
        return click(p["links"][0]["asin"]) if p["links"] else click(BACK_TO_SEARCH)

    def _on_item(self, p: dict[str, Any]) -> str:
        wanted = self.winning_options(p["asin"])
        if wanted is None:
            return click(PREV_PAGE)
        selected = {o["name"]: o["value"] for o in p["options"] if o["selected"]}
        for name, value in wanted.items():
            if selected.get(name) != value:
                return click(value)
        return click(BUY_NOW)


class NoisyPolicy(OraclePolicy):
    """A human-like shopper: vaguer or misspelled queries, wrong clicks, reading sub-pages, back-tracking,
    forgetting options and buying early. Follows the oracle otherwise."""

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        super().reset(task, obs, info)
        self.instruction = task.instruction
        self.queries = [self._noisy_query(q) for q in self.queries[:2]] + self.queries
        self.browsed = 0

    def _noisy_query(self, q: str) -> str:
        words = q.split()
        r = self.rng.random()
        if r < 0.25 and len(words) > 2:          # drop some words
            keep = sorted(self.rng.sample(range(len(words)), max(1, len(words) - self.rng.randint(1, 3))))
            words = [words[i] for i in keep]
        elif r < 0.45 and words:                  # a typo
            i = self.rng.randrange(len(words))
            w = words[i]
            if len(w) > 3:
                j = self.rng.randrange(len(w) - 1)
                words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
        elif r < 0.6:                             # the type only
            words = (self.goal.get("product_type") or q).split()
        return " ".join(words)

    def _on_results(self, p: dict[str, Any]) -> str:
        r = self.rng.random()
        if p["links"] and r < 0.3:
            return click(self.rng.choice(p["links"])["asin"])        # a wrong (random) click
        if r < 0.37 and self.qi + 1 < len(self.queries):
            self.qi += 1
            return click(BACK_TO_SEARCH)                              # give up on this query
        if r < 0.4 and PREV_PAGE in p["buttons"]:
            return click(PREV_PAGE)
        return super()._on_results(p)

    def _on_item(self, p: dict[str, Any]) -> str:
        wanted = self.winning_options(p["asin"])
        r = self.rng.random()
        if r < 0.18:
            return click(BUY_NOW)                                     # early buy
        if r < 0.3 and self.browsed < 2:
            self.browsed += 1
            return click(self.rng.choice(SUB_PAGES))                  # read the description / reviews
        if wanted is None:
            return click(PREV_PAGE) if r < 0.85 else click(BUY_NOW)
        if r < 0.4 and p["options"]:
            return click(self.rng.choice(p["options"])["value"])     # a wrong (or redundant) option
        return super()._on_item(p)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        p = parse_abstract(info.get("abstract_state", ""))
        if p["page"] in SUB_PAGE_KINDS and self.rng.random() < 0.15:
            return click(BACK_TO_SEARCH)
        return super().act(obs, info)


class ShopperPolicy(_PagePolicy):
    """A shopper that acts only on what the instruction and the pages show, deterministically: searches the
    product type and attributes the instruction names, clicks the first listed product within the price
    bound (next page when none is, the top one after the last page), clicks the listed option values the
    instruction names, and buys. Its wins are demonstrations a policy can imitate exactly: the oracle clicks
    the product it knows wins (from the catalog), which a model reading the same page can only guess -- a tiny
    model trained on oracle demonstrations learned to emit product-id-shaped strings instead of copying one."""

    def __init__(self, seed: int = 0):
        self.goal: dict[str, Any] = {}
        self.query = ""

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.goal = parse_goal(task.instruction) or {}
        words = [self.goal.get("product_type") or "", *self.goal.get("attributes", [])]
        self.query = " ".join(w for w in words if w).strip() or _PRICE_CLAUSE.sub("", task.instruction).strip()

    def _affordable(self, price: str) -> bool:
        bound = self.goal.get("price_upper")
        m = re.search(r"[\d.]+", price.replace(",", ""))
        return bound is None or m is None or float(m.group(0)) <= float(bound)

    def _query(self) -> str:
        return self.query

    def _on_results(self, p: dict[str, Any]) -> str:
        for link in p["links"]:
            if self._affordable(link["price"]):
                return click(link["asin"])
        if NEXT_PAGE in p["buttons"]:
            return click(NEXT_PAGE)
        return click(p["links"][0]["asin"]) if p["links"] else click(BACK_TO_SEARCH)

    def _on_item(self, p: dict[str, Any]) -> str:
        selected = {o["name"]: o["value"] for o in p["options"] if o["selected"]}
        for name, value in goal_options_dict(self.goal).items():
            offered = [o for o in p["options"] if o["name"] == name or name.startswith("option")]
            pick = next((o["value"] for o in offered if norm_label(o["value"]) == norm_label(value)), None)
            if pick is not None and selected.get(name) != pick and pick not in selected.values():
                return click(pick)
        return click(BUY_NOW)


class RandomPolicy:
    """Uniform over the page's admissible actions; a search uses 1-4 random words of the instruction."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.words: list[str] = []

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.words = task.instruction.split() or ["shop"]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        acts = info.get("admissible_actions") or [SEARCH_PLACEHOLDER]
        a = self.rng.choice(acts)
        if a == SEARCH_PLACEHOLDER:
            return f"search[{' '.join(self.rng.sample(self.words, min(len(self.words), self.rng.randint(1, 4))))}]"
        return a


POLICIES: dict[str, type] = {"oracle": OraclePolicy, "expert": OraclePolicy, "noisy": NoisyPolicy,
                             "shopper": ShopperPolicy, "random": RandomPolicy}
