"""The WebShop product catalog: the seeded generator, catalogs, and the catalog cache.

Owns: `generate_products` (deterministic for a seed; 100k products take seconds), `Catalog` (products + search
index + goal splits), `load_official` (a catalog of the official data files, which `official` reads) and
`get_catalog` (process-wide cache, on-disk cache for large catalogs under `dreamgym.utils.paths.cache_dir("webshop")`).
Must not know: pages, actions, the environment, policies, models.

A catalog is named by a key string (`synthetic-n2000-s0`, or `official:<dir>`) so that anything holding only
the key (a policy in another process, a collected trajectory) can rebuild the same catalog.
"""

from __future__ import annotations

import pickle
import random
import threading
from pathlib import Path
from typing import Any

from dreamgym.envs.webshop import vocab
from dreamgym.envs.webshop.goals import make_splits
from dreamgym.envs.webshop.official import read_official
from dreamgym.envs.webshop.product import Product
from dreamgym.envs.webshop.reward import title_nouns
from dreamgym.envs.webshop.search import SearchEngine
from dreamgym.utils.paths import atomic_write_bytes, cache_dir

CATALOG_VERSION = 2  # bump when generation changes, so stale on-disk caches are not reused
DEFAULT_N_PRODUCTS = 2000
DEFAULT_SEED = 0
# Catalogs at least this large are cached on disk (smaller ones rebuild faster than they load).
DISK_CACHE_MIN = 20_000


# ---------------------------------------------------------------------------------------------------------
# Generation

_ASIN_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # 32 symbols: 5 random bits each
_REVIEW_SCORES = (5, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 2, 1)
_TITLE_EXTRAS = ("Classic", "Premium", "Everyday", "Essential", "Ultra", "Pro", "Deluxe", "Original",
                 "Signature", "Basic", "Plus", "Comfort", "Lite", "Max", "Select")
_BULLET_TAILS = ("built for everyday use", "a customer favorite for years", "tested for quality and comfort",
                 "backed by our satisfaction guarantee", "designed with care in the USA",
                 "made to last through daily wear", "thoughtfully made for busy people",
                 "easy to love from the first use", "great as a gift for friends and family",
                 "crafted from carefully selected materials")
_DESC_OPENERS = ("Meet the {brand} {display}.", "Introducing the {display} from {brand}.",
                 "The {brand} {display} is here.", "{brand} presents its {display}.")
_DESC_MIDDLE = ("It is {a1} and {a2}, so it fits right into your routine.",
                "Every piece is {a1}; many customers also love that it is {a2}.",
                "Designed to be {a1} without giving up on being {a2}.",
                "Expect {a1} performance and a {a2} feel.")
_DESC_CLOSERS = ("Order today and see the difference.", "Available in several options to suit you.",
                 "A simple choice you will not regret.", "Backed by friendly customer support.",
                 "Perfect for home, work or travel.")
_REVIEW_TITLES = {5: ("Love it!", "Exactly what I wanted", "Great value", "Highly recommend"),
                  4: ("Very good", "Nice quality", "Happy with it", "Works well"),
                  3: ("It's okay", "Average", "Does the job", "Mixed feelings"),
                  2: ("Not great", "Disappointed", "Could be better"),
                  1: ("Did not work for me", "Poor quality", "Returned it")}
_REVIEW_BODIES = {5: ("The {t} is perfect and arrived quickly.", "Best {t} I have bought, {a} as promised."),
                  4: ("Good {t}, {a} as described. Minor issues only.", "Solid {t} for the price."),
                  3: ("The {t} is fine but not {a} as I hoped.", "Decent {t}, nothing special."),
                  2: ("The {t} stopped being {a} after a week.", "Expected more from this {t}."),
                  1: ("This {t} was not {a} at all.", "The {t} broke on day one.")}


def _price_tag(price: float) -> str:
    return f"${price:.2f}"


def _make_product(rng: random.Random, asin: str, ptype: vocab.ProductType) -> Product:
    brand = rng.choice(vocab.BRANDS)
    n_attr = rng.randint(3, min(5, len(ptype.attributes)))
    attrs = rng.sample(ptype.attributes, n_attr)
    if rng.random() < 0.3:
        generic = rng.choice(vocab.GENERIC_ATTRIBUTES)
        if generic not in attrs:
            attrs.append(generic)
    options: dict[str, list[str]] = {}
    for name, pool in ptype.options:
        k = rng.randint(min(2, len(pool)), min(6, len(pool)))
        chosen = set(rng.sample(range(len(pool)), k))
        options[name] = [pool[i] for i in sorted(chosen)]  # keep the pool's natural order (small < large)
    lo, hi = ptype.price
    price = round(max(1.0, round(rng.uniform(lo, hi)) - rng.choice((0.01, 0.05, 0.51))), 2)
    material = rng.choice(ptype.materials) if ptype.materials and rng.random() < 0.5 else ""
    # Title: brand, an optional adjective, one or two attributes, material, the type, a trailing feature.
    title_attrs = [a.title() for a in attrs[: rng.randint(1, 2)]]
    parts = [brand]
    if rng.random() < 0.4:
        parts.append(rng.choice(_TITLE_EXTRAS))
    parts.extend(title_attrs[:1])
    if material and material not in " ".join(title_attrs).lower():  # no "Engineered Wood Wood"
        parts.append(material.title())
    parts.append(ptype.display)
    title = " ".join(parts)
    if len(title_attrs) > 1:
        title += f", {title_attrs[1]}"
    if rng.random() < 0.5:
        title += f" - {rng.choice(_TITLE_EXTRAS)} {ptype.display.split()[-1]}"
    bullets = [f"{a.upper()}: {rng.choice(_BULLET_TAILS).capitalize()}." for a in attrs]
    rng.shuffle(bullets)
    a1, a2 = attrs[0], attrs[1 % len(attrs)]
    description = " ".join((rng.choice(_DESC_OPENERS).format(brand=brand, display=ptype.display),
                            rng.choice(_DESC_MIDDLE).format(a1=a1, a2=a2),
                            rng.choice(_DESC_CLOSERS)))
    reviews: list[dict[str, Any]] = []
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
        score = rng.choice(_REVIEW_SCORES)
        reviews.append({"score": score, "title": rng.choice(_REVIEW_TITLES[score]),
                        "body": rng.choice(_REVIEW_BODIES[score]).format(t=ptype.name, a=rng.choice(attrs))})
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else None
    return Product(asin=asin, title=title, query=ptype.query, category=ptype.category,
                   product_category=" › ".join(ptype.path), product_type=ptype.name, bullets=bullets,
                   description=description, attributes=attrs, options=options, price=price,
                   price_tag=_price_tag(price), rating=rating, reviews=reviews,
                   title_nouns=frozenset(title_nouns(title)))


def generate_products(n: int = DEFAULT_N_PRODUCTS, seed: int = DEFAULT_SEED) -> list[Product]:
    """`n` products, identical for the same (n, seed); product types are spread evenly, then shuffled."""
    if n < 1:
        raise ValueError(f"a catalog needs at least one product, got n={n}")
    rng = random.Random(f"webshop-catalog-{seed}")
    types = vocab.PRODUCT_TYPES
    seen: set[str] = set()
    products = []
    for i in range(n):
        while True:
            bits = rng.getrandbits(40)
            asin = "B0" + "".join(_ASIN_CHARS[(bits >> (5 * k)) & 31] for k in range(8))
            if asin not in seen:
                seen.add(asin)
                break
        products.append(_make_product(rng, asin, types[i % len(types)]))
    rng.shuffle(products)
    return products


# ---------------------------------------------------------------------------------------------------------
# Catalog

class Catalog:
    """Products, their search index and the goal splits, shared by every env built on the same key."""

    def __init__(self, key: str, products: list[Product], search: SearchEngine | None = None,
                 goals: dict[str, list[dict[str, Any]]] | None = None):
        self.key = key
        self.products = products
        self.by_asin = {p.asin: p for p in products}
        self.search = search or SearchEngine.build([p.search_text() for p in products],
                                                   [p.asin for p in products])
        self._goals = goals
        self._lock = threading.Lock()

    def goals(self, split: str) -> list[dict[str, Any]]:
        """The goal dicts of a split ("train" or "test"; official data also has "valid")."""
        with self._lock:
            if self._goals is None:
                self._goals = make_splits(self.products, seed=_seed_from_key(self.key))
        if split not in self._goals:
            raise ValueError(f"unknown WebShop split {split!r}; known: {', '.join(self._goals)}")
        return self._goals[split]

    def __len__(self) -> int:
        return len(self.products)


def load_official(directory: str | Path, key: str | None = None, num_products: int | None = None,
                  human_goals: bool | None = None) -> Catalog:
    """A `Catalog` from a directory holding the official files (see `official.read_official` for what is read
    and how). `key` defaults to `official:<resolved directory>`."""
    products, goals = read_official(directory, num_products=num_products, human_goals=human_goals)
    return Catalog(key or f"official:{Path(directory).resolve()}", products, goals=goals)


def synthetic_key(n_products: int = DEFAULT_N_PRODUCTS, seed: int = DEFAULT_SEED) -> str:
    return f"synthetic-n{int(n_products)}-s{int(seed)}"


def _seed_from_key(key: str) -> int:
    if key.startswith("synthetic-"):
        return int(key.rsplit("-s", 1)[1])
    return 0


_CATALOGS: dict[str, Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


def get_catalog(key: str | None = None, *, n_products: int = DEFAULT_N_PRODUCTS, seed: int = DEFAULT_SEED,
                official_dir: str | Path | None = None) -> Catalog:
    """The catalog for a key (or for the given generator / official settings), built once per process.

    Keys: `synthetic-n<N>-s<SEED>` or `official:<directory>`. Large synthetic catalogs are also cached on
    disk (pickled products + the bm25s index), so a second process loads instead of rebuilding.
    """
    if key is None:
        key = f"official:{Path(official_dir).resolve()}" if official_dir else synthetic_key(n_products, seed)
    with _CATALOGS_LOCK:
        cat = _CATALOGS.get(key)
        if cat is None:
            cat = _build(key)
            _CATALOGS[key] = cat
        return cat


def _build(key: str) -> Catalog:
    if key.startswith("official:"):
        return load_official(key.split(":", 1)[1], key=key)
    if not key.startswith("synthetic-n"):
        raise ValueError(f"unknown WebShop catalog key {key!r}")
    n = int(key[len("synthetic-n"):].split("-s")[0])
    seed = _seed_from_key(key)
    if n < DISK_CACHE_MIN:
        return Catalog(key, generate_products(n, seed))
    path = cache_dir("webshop") / f"{key}-v{CATALOG_VERSION}.pkl"
    if path.exists():
        try:
            with open(path, "rb") as fh:
                products, search_state = pickle.load(fh)
            return Catalog(key, products, SearchEngine.from_state(search_state))
        except Exception:  # noqa: BLE001 - a corrupt or stale cache is rebuilt, never fatal
            pass
    cat = Catalog(key, generate_products(n, seed))
    atomic_write_bytes(path, pickle.dumps((cat.products, cat.search.state()), protocol=pickle.HIGHEST_PROTOCOL))
    return cat
