"""The WebShop product schema: the one record both generated and official products are mapped to.

Owns: `Product`.
Must not know: how products are generated, loaded, searched, scored or shown (it is the leaf every other
WebShop module may import).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Product:
    """One product, in the fields the original WebShop engine uses after `load_products`.

    `title_nouns` is what the type reward compares (the original runs spaCy's large English model over the
    title; see `reward.title_nouns`). `options` maps an option name (size, color, ...) to its values.
    """

    asin: str
    title: str
    query: str
    category: str
    product_category: str
    product_type: str
    bullets: list[str]
    description: str
    attributes: list[str]
    options: dict[str, list[str]]
    price: float
    price_tag: str
    rating: float | None = None
    reviews: list[dict[str, Any]] = field(default_factory=list)
    title_nouns: frozenset[str] = frozenset()

    def search_text(self) -> str:
        """What the search engine indexes: title, bullet points, description and attributes."""
        return " ".join([self.title, *self.bullets, self.description, *self.attributes])

