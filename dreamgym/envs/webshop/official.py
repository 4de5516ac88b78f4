"""Reader of the official WebShop data files, mapped unchanged onto the internal `Product` / goal schema.

Owns: reading `items_shuffle*.json` (products), `items_ins_v2*.json` (attributes and synthetic
instructions) and `items_human_ins*.json` (human instructions), the same cleaning as the original
`load_products` (asin filter, price parsing, lower-cased options with "/" -> " | "), goals and splits.
Must not know: catalogs (`catalog.load_official` makes one of what this reads), pages, the environment, models.

Goals: human instructions when `items_human_ins*.json` is present (as the original's default), else the
synthetic ones from `items_ins_v2` (one goal per option combination, capped at `MAX_SYNTHETIC_COMBOS` per
product). Price bounds follow the original rule with a seeded generator. Splits follow the original's
evaluation convention: goals shuffled with seed 233, the first 500 are "test", the next 1,000 "valid", the
rest "train"; sets with fewer than 2,000 goals are split 20% / 20% / 60% instead.
Title nouns use the heuristic described in `reward.py` (the original's spaCy model is not available).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from dreamgym.envs.webshop.goals import price_upper_for
from dreamgym.envs.webshop.product import Product
from dreamgym.envs.webshop.reward import title_nouns

MAX_SYNTHETIC_COMBOS = 5


def _find(directory: Path, pattern: str, required: bool) -> Path | None:
    files = sorted(directory.glob(pattern), key=lambda p: (len(p.name), p.name))
    if not files:
        if required:
            raise FileNotFoundError(f"no {pattern} in {directory}: expected the official WebShop data files")
        return None
    return files[0]  # the shortest name first: items_shuffle.json before items_shuffle_1000.json


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def _parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """The original's price parsing: "$12.99" -> [12.99]; "$10.99$15.99" -> a range; missing -> $100."""
    if not pricing:
        return [100.0], "$100.0"
    values = []
    for chunk in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", chunk)
        try:
            values.append(float(Decimal(digits)))
        except (InvalidOperation, ValueError):
            continue
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def product_from_official(p: dict[str, Any], attributes: list[str], rng: random.Random) -> Product:
    """One `items_shuffle` record as a `Product` (price drawn in its range as the original does)."""
    pricing, tag = _parse_pricing(p.get("pricing"))
    price = pricing[0] if len(pricing) == 1 else round(rng.uniform(*pricing[:2]), 2)
    options: dict[str, list[str]] = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if not contents:
            continue
        values = [str(c.get("value", "")).strip().replace("/", " | ").lower() for c in contents
                  if isinstance(c, dict)]
        values = [v for v in values if v]
        if values:
            options[str(name).lower()] = list(dict.fromkeys(values))
    bullets = p.get("small_description") or []
    bullets = [str(b) for b in bullets] if isinstance(bullets, list) else [str(bullets)]
    reviews = []
    for r in p.get("reviews") or []:
        if isinstance(r, dict):
            score = r.get("score", r.get("stars", 0))
            try:
                score = int(float(str(score).split()[0]))
            except (ValueError, IndexError):
                score = 0
            reviews.append({"score": score, "title": str(r.get("title", "")),
                            "body": str(r.get("body", r.get("review", "")))})
    rating = p.get("average_rating", p.get("rating"))
    try:
        rating = float(str(rating).split()[0]) if rating not in (None, "", "N.A.") else None
    except ValueError:
        rating = None
    title = str(p.get("name") or p.get("Title") or "")
    return Product(asin=str(p["asin"]), title=title, query=str(p.get("query", "")).lower().strip(),
                   category=str(p.get("category", "")), product_category=str(p.get("product_category", "")),
                   product_type=str(p.get("query", "")).lower().strip(), bullets=bullets,
                   description=str(p.get("full_description") or p.get("Description") or ""),
                   attributes=list(attributes) or ["DUMMY_ATTR"], options=options, price=price,
                   price_tag=tag, rating=rating, reviews=reviews,
                   title_nouns=frozenset(title_nouns(title, None)))


def _name_options(product: Product, values: list[str]) -> dict[str, str]:
    """Human goal options are bare values; name each after the product's option group that holds it."""
    out: dict[str, str] = {}
    for i, v in enumerate(values):
        v = " ".join(str(v).lower().split())
        group = next((g for g, vals in product.options.items() if g not in out and v in vals), None)
        if group is None:
            group = next((g for g, vals in product.options.items() if g not in out
                          and any(v in x or x in v for x in vals)), None)
        out[group or f"option{i}"] = v
    return out


def _goal(product: Product, instruction: str, attributes: list[str], goal_options: dict[str, str],
          rng: random.Random) -> dict[str, Any]:
    upper = price_upper_for(product.price, rng)
    text = instruction.strip().strip(".")
    if upper is not None:
        text += f", and price lower than {upper:.2f} dollars"
    return {"asin": product.asin, "query": product.query, "category": product.category,
            "product_category": product.product_category, "product_type": product.query,
            "name": product.title, "name_nouns": sorted(product.title_nouns), "heuristic_nouns": True,
            "attributes": list(attributes), "goal_options": goal_options,
            "price_upper": upper if upper is not None else 1_000_000.0, "instruction_text": text}


def split_goals(goals: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    order = list(goals)
    random.Random(233).shuffle(order)
    if len(order) >= 2000:
        n_test, n_valid = 500, 1000
    else:
        n_test = n_valid = max(1, len(order) // 5) if len(order) >= 3 else 0
    return {"test": order[:n_test], "valid": order[n_test:n_test + n_valid], "train": order[n_test + n_valid:]}


def read_official(directory: str | Path, num_products: int | None = None,
                  human_goals: bool | None = None) -> tuple[list[Product], dict[str, list[dict[str, Any]]]]:
    """The products and the goal splits of a directory holding the official files (the shortest matching name
    of each is used).

    `human_goals=None` uses human instructions when their file exists. Records with a missing or over-long
    asin, or a repeated asin, are skipped as in the original."""
    directory = Path(directory)
    products_path = _find(directory, "items_shuffle*.json", required=True)
    ins_path = _find(directory, "items_ins_v2*.json", required=False)
    human_path = _find(directory, "items_human_ins*.json", required=False)
    assert products_path is not None  # required=True raised otherwise
    raw = _load_json(products_path)
    if not isinstance(raw, list):
        raise ValueError(f"{products_path} must hold a JSON list of products")
    ins = _load_json(ins_path) if ins_path else {}
    human = _load_json(human_path) if human_path else {}
    if human_goals is None:
        human_goals = bool(human)
    if num_products is not None:
        raw = raw[:num_products]
    rng = random.Random(42)  # the original seeds its price draws with 42
    products: list[Product] = []
    seen: set[str] = set()
    for p in raw:
        asin = str(p.get("asin", "nan")) if isinstance(p, dict) else "nan"
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        attrs = (ins.get(asin) or {}).get("attributes") or []
        products.append(product_from_official(p, attrs, rng))
    if not products:
        raise ValueError(f"{products_path} holds no usable products")
    goals: list[dict[str, Any]] = []
    for product in products:
        if human_goals:
            for entry in human.get(product.asin) or []:
                attrs = entry.get("instruction_attributes") or []
                if not attrs or not entry.get("instruction"):
                    continue  # the original skips human instructions without attributes
                goals.append(_goal(product, str(entry["instruction"]), attrs,
                                   _name_options(product, list(entry.get("instruction_options") or [])), rng))
        else:
            meta = ins.get(product.asin) or {}
            if not meta.get("instruction") or not meta.get("instruction_attributes"):
                continue
            names = sorted(product.options)
            combos = list(itertools.islice(itertools.product(*(product.options[n] for n in names)),
                                           MAX_SYNTHETIC_COMBOS))
            for combo in combos or [()]:
                opts = dict(zip(names, combo))
                suffix = (" with " + ", and ".join(f"{k}: {v}" for k, v in opts.items())) if opts else ""
                goals.append(_goal(product, str(meta["instruction"]).strip(".") + suffix,
                                   meta["instruction_attributes"], opts, rng))
    return products, split_goals(goals)
