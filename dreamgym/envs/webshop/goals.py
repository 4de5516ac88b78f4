"""WebShop goals: writing instructions from a target product, the fixed splits, and parsing instructions back.

Owns: the goal dict schema, the instruction templates and synonyms, `make_goal`, `make_splits` (the
training pool and the held-out 500-goal test set) and `parse_goal` (instruction -> goal dict or None).
Must not know: pages, actions, the environment, models.

Goal dict (the `Task.goal` of every WebShop task, JSON-safe):
    asin            target product id (None for a goal parsed from free text)
    query           the original's query field of the target's product type
    category        top-level category (beauty, food, fashion, furniture, electronics)
    product_category  "A › B › C" path
    product_type    the type phrase, e.g. "men's t-shirt"
    name            the target's title (the type reward compares title nouns against it)
    name_nouns      the nouns of `name` (precomputed, see reward.title_nouns)
    attributes      1-3 attribute phrases the product must have
    goal_options    {option name: value}, e.g. {"size": "large", "color": "navy"}
    price_upper     price bound in dollars (None: no bound)
    instruction_text  the instruction
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dreamgym.envs.webshop import vocab
from dreamgym.envs.webshop.reward import title_nouns

if TYPE_CHECKING:
    from dreamgym.envs.webshop.product import Product

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # the original's price bounds
N_TEST = 500
TRAIN_GOALS_PER_PRODUCT = 2
MAX_TRAIN_GOALS = 20_000  # large catalogs: a pool this size is plenty (the original has 12,087 instructions)

_OPENERS = ("i am looking for", "i'm looking for", "i need", "i want", "i would like", "find me",
            "can you find me", "i'd like to buy", "please find", "show me", "get me", "i am searching for",
            "help me find", "i want to buy", "looking for", "i am shopping for", "i need to buy")
_PAIRED = ("running shoes", "women's sandals", "athletic socks", "yoga leggings", "women's jeans",
           "winter gloves", "bluetooth headphones", "wireless earbuds")
_MASS = ("shampoo", "ground coffee", "green tea", "olive oil", "dark chocolate", "beef jerky", "hot sauce",
         "sparkling water", "perfume", "nail polish", "face moisturizer", "deodorant", "lipstick")
_OPTION_FORMS = {
    "size": ("size {v}", "in size {v}", "{v} size", "size: {v}", "in {v}"),
    "color": ("in {v}", "in {v} color", "{v} colored", "color: {v}", "in the color {v}"),
    "flavor": ("in {v} flavor", "{v} flavored", "flavor: {v}", "with {v} flavor"),
    "scent": ("in {v} scent", "{v} scented", "scent: {v}", "with a {v} scent"),
    "style": ("in {v} style", "style: {v}", "{v} style"),
}
_PRICE_FORMS = ((", and price lower than {p:.2f} dollars", 5), (" and price lower than {p:.2f} dollars", 2),
                (", priced under {p:.2f} dollars", 1), (" that costs less than {p:.2f} dollars", 1),
                (", and the price should be below {p:.2f} dollars", 1), (" for less than {p:.2f} dollars", 1),
                (", under {p:.0f} dollars", 1))


def _article(type_name: str, next_word: str, rng: random.Random) -> str:
    if type_name in _PAIRED:
        return rng.choice(("a pair of ", "", "some "))
    if type_name in _MASS or type_name.endswith("s"):
        return rng.choice(("", "some "))
    return "an " if next_word[:1] in "aeiou" else "a "


def make_instruction(rng: random.Random, type_name: str, attributes: list[str], options: dict[str, str],
                     price_upper: float | None) -> str:
    """A lower-case WebShop-style instruction; several templates, synonyms and orders."""
    attrs = list(attributes)
    rng.shuffle(attrs)
    style = rng.random()
    if style < 0.4 and attrs:       # "a machine wash long sleeve men's t-shirt"
        n_pre = rng.randint(1, min(2, len(attrs)))
        pre, post = attrs[:n_pre], attrs[n_pre:]
        noun = f"{' '.join(pre)} {type_name}"
    else:                           # "a men's t-shirt that is machine wash"
        pre, post = [], attrs
        noun = type_name
    if post:
        joined = post[0] if len(post) == 1 else ", ".join(post[:-1]) + " and " + post[-1]
        plural = type_name.endswith("s") and type_name not in _MASS
        links = (" that are ", " which are ", " with ", " that have ", ", ") if plural else \
            (" that is ", " which is ", " with ", " that has ", ", ")
        noun += rng.choice(links) + joined
    opener = rng.choice(_OPENERS)
    text = f"{opener} {_article(type_name, noun, rng)}{noun}"
    if options:
        items = list(options.items())
        rng.shuffle(items)
        if rng.random() < 0.25:     # the original synthetic form: "with color: navy, and size: large"
            text += " with " + ", and ".join(f"{k}: {v}" for k, v in items)
        else:
            phrases = [rng.choice(_OPTION_FORMS.get(k, ("{v}",))).format(v=v) for k, v in items]
            text += (", " if post else " ") + (" and ".join(phrases) if len(phrases) < 3
                                               else ", ".join(phrases[:-1]) + " and " + phrases[-1])
    if price_upper is not None:
        forms, weights = zip(*_PRICE_FORMS)
        text += rng.choices(forms, weights=weights)[0].format(p=price_upper)
    return " ".join(text.split())


def price_upper_for(price: float, rng: random.Random) -> float | None:
    """As the original: two of the next four round prices above the product's, take the larger."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return None
    return max(rng.sample(candidates, 2))


def make_goal(product: Product, rng: random.Random) -> dict[str, Any]:
    """A goal whose target is `product`: 1-3 of its attributes, a value per option group, a price bound."""
    n_attr = rng.choices((1, 2, 3), weights=(0.35, 0.45, 0.2))[0]
    attributes = rng.sample(product.attributes, min(n_attr, len(product.attributes)))
    names = [n for n, vals in product.options.items() if vals]
    chosen = [n for n in names if rng.random() < 0.85] or names[:1]
    goal_options = {n: rng.choice(product.options[n]) for n in names if n in chosen}
    upper = price_upper_for(product.price, rng)
    instruction = make_instruction(rng, product.product_type, attributes, goal_options, upper)
    return {"asin": product.asin, "query": product.query, "category": product.category,
            "product_category": product.product_category, "product_type": product.product_type,
            "name": product.title, "name_nouns": sorted(product.title_nouns), "attributes": attributes,
            "goal_options": goal_options, "price_upper": upper, "instruction_text": instruction}


def make_splits(products: list[Product], seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Fixed splits: a 500-goal test set (one goal per held-out target product; fewer for tiny catalogs)
    and a training pool (two goals per remaining product, at most `MAX_TRAIN_GOALS`). No training
    instruction equals a test one."""
    rng = random.Random(f"webshop-goals-{seed}")
    order = list(range(len(products)))
    rng.shuffle(order)
    n_test = min(N_TEST, len(products) // 4) if len(products) < 4 * N_TEST else N_TEST
    n_test = max(1, n_test) if len(products) > 1 else 0
    test = [make_goal(products[i], rng) for i in order[:n_test]]
    seen = {g["instruction_text"] for g in test}
    train: list[dict[str, Any]] = []
    for i in order[n_test:]:
        if len(train) >= MAX_TRAIN_GOALS:
            break
        for _ in range(TRAIN_GOALS_PER_PRODUCT):
            g = make_goal(products[i], rng)
            if g["instruction_text"] not in seen:
                seen.add(g["instruction_text"])
                train.append(g)
    return {"train": train, "test": test}


# ---------------------------------------------------------------------------------------------------------
# Parsing instructions back into goals

MAX_INSTRUCTION_CHARS = 400
_ALLOWED = re.compile(r"^[a-z0-9 ,.:'$&/\-!?()]+$")
_PRICE = re.compile(
    r",?\s*(?:and\s+)?(?:(?:with\s+)?(?:a\s+|the\s+)?price\s+(?:should\s+be\s+)?|that\s+costs?\s+|priced\s+|for\s+)?"
    r"(?:lower\s+than|less\s+than|cheaper\s+than|under|below|at\s+most|no\s+more\s+than|up\s+to|within)\s+"
    r"\$?\s*(\d{1,6}(?:\.\d{1,2})?)\s*(?:dollars?|usd|bucks)?")


@lru_cache(maxsize=1)
def _lexicon() -> dict[str, Any]:
    """Surface forms of product types, attribute phrases and option values, longest first."""
    all_attrs = {a for t in vocab.PRODUCT_TYPES for a in t.attributes} | set(vocab.GENERIC_ATTRIBUTES)
    type_forms: list[tuple[str, vocab.ProductType]] = []
    for t in vocab.PRODUCT_TYPES:
        forms = {t.name, t.display.lower()}
        # A query such as "non stick frying pan" would swallow the attribute "non stick": skip those.
        if not any(_find(a, t.query) for a in all_attrs):
            forms.add(t.query)
        for f in list(forms):
            forms.add(f[:-1] if f.endswith("s") else f + "s")
        type_forms.extend((f, t) for f in forms)
    noun_owner: dict[str, list[vocab.ProductType]] = {}
    for t in vocab.PRODUCT_TYPES:
        for n in t.nouns:
            noun_owner.setdefault(n, []).append(t)
    for n, owners in noun_owner.items():
        if len(owners) == 1 and len(n) > 3:
            type_forms.append((n, owners[0]))
            type_forms.append((n + "s" if not n.endswith("s") else n[:-1], owners[0]))
    # Longest first, ties alphabetical: both come from sets, and with ties in set order the parse of the same
    # instruction (which phrase is consumed first, so the attributes' order) changed with PYTHONHASHSEED.
    type_forms.sort(key=lambda x: (-len(x[0]), x[0]))
    attributes = sorted(all_attrs, key=lambda a: (-len(a), a))
    known = set(vocab.TEMPLATE_WORDS)
    for t in vocab.PRODUCT_TYPES:
        for text in (t.name, t.query, t.display.lower(), *t.attributes, *t.nouns, *t.materials,
                     *(v for _, pool in t.options for v in pool), *(n for n, _ in t.options)):
            known.update(_words(text))
    for b in vocab.BRANDS:
        known.update(_words(b.lower()))
    known.update(_words(" ".join(vocab.GENERIC_ATTRIBUTES)))
    return {"types": type_forms, "attributes": attributes, "known": frozenset(known)}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+(?:[.-][a-z0-9']+)*", text)


def _find(phrase: str, text: str) -> re.Match | None:
    return re.search(r"(?<![a-z0-9'-])" + re.escape(phrase) + r"(?![a-z0-9'-])", text)


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """The goal of a WebShop-style instruction, or None when it is not well-formed.

    Accepts any instruction that names one known product type and at least one attribute or option of the
    vocabulary (in any order or template, including combinations no catalog product has), with an optional
    price bound ("lower than 30.00 dollars", "under $30", ...). Rejects empty, over-long or non-ASCII text,
    text with brackets or markup, text naming no product type, and text in which more than a quarter of the
    words (or more than four) are outside the shop's vocabulary. The result has the goal-dict schema above
    with `asin` None and `name` the type's display name, so an environment can score any purchase for it.
    """
    if not isinstance(instruction, str):
        return None
    text = " ".join(instruction.lower().split()).strip(" .!?")
    if not (10 <= len(text) <= MAX_INSTRUCTION_CHARS) or not _ALLOWED.match(text):
        return None
    lex = _lexicon()
    words = _words(text)
    if len(words) < 3:
        return None
    unknown = [w for w in words if w not in lex["known"] and not re.fullmatch(r"[\d.$]+", w)]
    if len(unknown) > 4 or len(unknown) > 0.25 * len(words):
        return None
    price_upper = None
    m = _PRICE.search(text)
    if m:
        price_upper = float(m.group(1))
        text = text[:m.start()] + " " + text[m.end():]
    ptype = None
    for form, t in lex["types"]:
        hit = _find(form, text)
        if hit:
            ptype = t
            text = text[:hit.start()] + " | " + text[hit.end():]
            break
    if ptype is None:
        return None
    # Option values of this type's groups and attribute phrases, matched longest first and consumed.
    candidates = [(v, "option", name) for name, pool in ptype.options for v in pool]
    candidates += [(a, "attribute", "") for a in lex["attributes"]]
    candidates.sort(key=lambda c: -len(c[0]))
    options: dict[str, str] = {}
    attr_hits: list[tuple[int, str]] = []
    for phrase, kind, name in candidates:
        hit = _find(phrase, text)
        if not hit:
            continue
        if kind == "option":
            if name in options:
                continue
            options[name] = phrase
        else:
            attr_hits.append((hit.start(), phrase))
        text = text[:hit.start()] + " | " + text[hit.end():]
    attributes = [a for _, a in sorted(attr_hits)]  # in the order the instruction names them
    if not attributes and not options:
        return None
    name = ptype.display
    return {"asin": None, "query": ptype.query, "category": ptype.category,
            "product_category": " › ".join(ptype.path), "product_type": ptype.name, "name": name,
            "name_nouns": sorted(title_nouns(name)), "attributes": attributes, "goal_options": options,
            "price_upper": price_upper, "instruction_text": " ".join(instruction.lower().split())}
