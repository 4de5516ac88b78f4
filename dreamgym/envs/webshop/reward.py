"""WebShop's purchase reward, following the original formula (WebShop, Yao et al., 2022, arXiv:2207.01206).

Owns: `get_reward` and its parts (type, attribute, option and price matches), colour normalisation and
title-noun extraction.
Must not know: pages, actions, search, the environment; products are read through their fields only.

    total = (n_attr_matched + n_option_matched + [price <= price_upper])
            / (n_goal_attrs + n_goal_options + 1)  *  r_type

r_type is 1.0 when the purchased product matches the goal's query, or shares >= 2 category levels, or its
title nouns cover more than 0.2 of the goal's; 0.5 otherwise; 0.1 when the noun overlap is below 0.1;
0.0 when it is 0. An attribute matches when rapidfuzz's token-set ratio with one of the product's attributes
is > 85, else when it is a substring of the title, bullet points or description.

Documented differences from the released WebShop code:
- Title nouns. The original tags nouns with spaCy's `en_core_web_lg`, which cannot be installed here. For
  generated catalogs the nouns of a title are its words found in the catalog's noun vocabulary (product
  type nouns, materials, brand names: `NOUN_VOCAB`), which is what the tagger finds on these templated
  titles. For official data (`vocab=None`) a heuristic keeps alphabetic words of 3+ letters that are not
  stop words, common adjectives or units; it over-counts adjectives spaCy would drop, so title scores on
  official data are slightly lower than the original's (more purchases land at r_type 0.5 / 0.1).
- Options. Following the project's design: a goal *size* must equal a purchased option exactly (after
  lower-casing and whitespace folding; fuzzy matching would accept "large" for "x-large"); other options
  match by token-set ratio > 85 after colour normalisation, else when the goal value is a substring of the
  title, bullet points or description. The released code uses only the fuzzy rule for every option.
- A goal without a price bound (price_upper missing or <= 0) counts the price term as matched; the
  original would fail on it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable

from rapidfuzz import fuzz

from dreamgym.envs.webshop import vocab

if TYPE_CHECKING:
    from dreamgym.envs.webshop.product import Product

FUZZY_THRESHOLD = 85

# Normalised colours: the first one found inside an option value replaces it ("dark navy blue" -> "navy").
COLOR_SET = ("light blue", "dark blue", "navy", "rose gold", "black", "white", "grey", "gray", "red", "blue",
             "green", "pink", "purple", "beige", "brown", "khaki", "olive", "burgundy", "yellow", "orange",
             "teal", "charcoal", "ivory", "silver", "gold", "coral", "lavender", "mint", "turquoise", "cream",
             "tan", "maroon")

_TOKEN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SIZE_WORDS = re.compile(r"^(x{0,3}-?(small|large)|\d?x{1,3}l|medium|one size|s|m|l|xl|xs|\d+(\.\d+)?"
                         r"( ?(w|l|inch|in|cm|mm|us|uk|eu))?|(\d+w x \d+l)|twin|twin xl|full|queen|king|"
                         r"california king)$")

NOUN_VOCAB: frozenset[str] = frozenset(
    {w for t in vocab.PRODUCT_TYPES for n in (*t.nouns, *t.materials) for w in n.split()}
    | {w.lower() for b in vocab.BRANDS for w in b.replace("&", " ").split()}
)

_NOT_NOUNS = frozenset("""the and for with from this that your you are our new set pack count inch ounce oz
fl lbs pound piece pieces size color style men's women's mens womens kids adult unisex large small medium
best premium classic original ultra pro deluxe natural organic soft long short high low free easy quick
extra super light dark heavy slim wide full mini portable wireless waterproof non plus max lite basic
comfort signature essential everyday select""".split())


def normalize_color(value: str) -> str:
    """The first known colour inside `value`, else `value` itself (as the original's normalize_color)."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def title_nouns(title: str, vocab_words: Iterable[str] | None = NOUN_VOCAB) -> set[str]:
    """Title nouns: words in `vocab_words` (generated catalogs), or the official-data heuristic when None."""
    toks = _TOKEN.findall(title.lower())
    if vocab_words is not None:
        vocab_set = vocab_words if isinstance(vocab_words, (set, frozenset)) else set(vocab_words)
        out = set()
        for t in toks:
            if t in vocab_set:
                out.add(t)
            elif "-" in t:  # "over-ear" is not a noun but "t-shirt" is; split words may be ("pull-over")
                out.update(p for p in t.split("-") if p in vocab_set)
        return out
    return {t for t in toks if t.isalpha() and len(t) >= 3 and t not in _NOT_NOUNS}


@lru_cache(maxsize=65536)
def _goal_nouns(name: str, heuristic: bool) -> frozenset[str]:
    return frozenset(title_nouns(name, None if heuristic else NOUN_VOCAB))


def is_size_option(name: str, value: str) -> bool:
    """Whether a goal option is a size: named "size", or (unnamed official options) shaped like one."""
    name = _norm(name)
    if name == "size" or name.endswith(" size"):
        return True
    return name.startswith("option") and bool(_SIZE_WORDS.match(_norm(value)))


def type_reward(product: Product, goal: dict[str, Any]) -> dict[str, Any]:
    """r_type with its evidence: query match, shared category levels, title-noun overlap."""
    query_match = _norm(product.query) == _norm(goal.get("query", ""))
    p_cat = {x.strip() for x in product.product_category.split("›")}
    g_cat = {x.strip() for x in str(goal.get("product_category", "")).split("›")}
    category_match = len((p_cat & g_cat) - {""}) >= 2
    desired = goal.get("name_nouns")
    if desired is None:
        desired = _goal_nouns(str(goal.get("name", "")), bool(goal.get("heuristic_nouns", False)))
    desired = set(desired)
    purchased = set(product.title_nouns)
    title_score = 0.2 if not desired else len(purchased & desired) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _in_text(needle: str, product: Product) -> bool:
    return (needle in product.title.lower() or needle in " ".join(product.bullets).lower()
            or needle in product.description.lower())


def attribute_matches(product: Product, goal_attrs: list[str]) -> list[bool]:
    """Per goal attribute: fuzzy match (> 85) with a product attribute, else substring of the product text."""
    out = []
    for g in goal_attrs:
        g = _norm(g)
        ok = any(fuzz.token_set_ratio(p, g) > FUZZY_THRESHOLD for p in product.attributes)
        out.append(ok or _in_text(g, product))
    return out


def option_matches(product: Product, goal_options: dict[str, str], chosen: dict[str, str]) -> list[bool]:
    """Per goal option: exact for sizes; fuzzy (> 85, colours normalised) else substring of the product text."""
    chosen_vals = [_norm(v) for v in chosen.values()]
    out = []
    for name, value in goal_options.items():
        g = _norm(value)
        if is_size_option(name, g):
            out.append(g in chosen_vals)
            continue
        gc = normalize_color(g)
        ok = any(fuzz.token_set_ratio(normalize_color(p), gc) > FUZZY_THRESHOLD for p in chosen_vals)
        out.append(ok or _in_text(g, product))
    return out


def goal_options_dict(goal: dict[str, Any]) -> dict[str, str]:
    """Goal options as name -> value (a list, as in official human goals, gets names option0, option1...)."""
    opts = goal.get("goal_options") or {}
    if isinstance(opts, dict):
        return {str(k): str(v) for k, v in opts.items()}
    return {f"option{i}": str(v) for i, v in enumerate(opts)}


def get_reward(product: Product, goal: dict[str, Any], price: float | None = None,
               options: dict[str, str] | None = None) -> tuple[float, dict[str, Any]]:
    """The purchase reward in [0, 1] and its parts (r_type, r_attr, r_option, r_price and the counts)."""
    price = product.price if price is None else float(price)
    options = options or {}
    t = type_reward(product, goal)
    attrs = [str(a) for a in goal.get("attributes") or []]
    gopts = goal_options_dict(goal)
    a_hits = attribute_matches(product, attrs)
    o_hits = option_matches(product, gopts, options)
    upper = goal.get("price_upper")
    r_price = True if upper is None or float(upper) <= 0 else price <= float(upper)
    n_attr, n_opt = sum(a_hits), sum(o_hits)
    total = (n_attr + n_opt + int(r_price)) / (len(attrs) + len(gopts) + 1) * t["r_type"]
    parts = {
        "r_type": t["r_type"],
        "r_attr": n_attr / len(attrs) if attrs else 1.0,
        "r_option": n_opt / len(gopts) if gopts else 1.0,
        "r_price": float(r_price),
        "n_attr": n_attr, "n_goal_attrs": len(attrs), "n_option": n_opt, "n_goal_options": len(gopts),
        "attr_hits": a_hits, "option_hits": o_hits,
        "query_match": t["query_match"], "category_match": t["category_match"],
        "title_score": round(t["title_score"], 4),
    }
    return float(total), parts
