"""BM25 product search for WebShop (bm25s), standing in for the original's Lucene index.

Owns: the tokenizer shared by documents and queries (lower case, alphanumeric runs, English stop words,
a light plural stemmer), index building, and `search(query, k)` returning product ids best first.
Must not know: products' structure (it indexes plain strings), pages, the environment.

Differences from the original: Lucene's analyzer is replaced by the small tokenizer below; ties are broken by
catalog order so results are deterministic; a query with no known word returns no results (Lucene does the
same), instead of bm25s's arbitrary zero-score documents.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from dreamgym.utils.bm25 import import_bm25s

if TYPE_CHECKING:
    import bm25s
else:
    bm25s = import_bm25s()  # not a plain import: bm25s would start jax on the GPU (dreamgym.utils.bm25)

SEARCH_RETURN_N = 50   # the original returns at most 50 results
MAX_QUERY_TOKENS = 64  # longer queries are cut: BM25 cost grows with query length, relevance does not

_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")
_STOP = frozenset("""a an and are as at be but by for from has have i if in into is it its me my need no not
of on or our so such that the their then there these they this to want was were will with you your am looking
lower than price dollars""".split())


def _stem(tok: str) -> str:
    """A deliberately tiny plural stemmer: shirts -> shirt, berries -> berry, boxes -> box."""
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    if tok.endswith("ies") and len(tok) > 4:
        return tok[:-3] + "y"
    if tok.endswith(("sses", "shes", "ches", "xes")):
        return tok[:-2]
    if tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        return tok[:-1]
    return tok


_STEMS: dict[str, str] = {}


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs, stop words and one-letter tokens dropped, plurals folded."""
    out = []
    for t in _WORD.findall(text.lower()):
        if len(t) > 1 and t not in _STOP:
            s = _STEMS.get(t)
            if s is None:
                s = _stem(t)
                if len(_STEMS) < 1_000_000:  # memo: catalog vocabularies are small, queries may not be
                    _STEMS[t] = s
            out.append(s)
    return out


class SearchEngine:
    """A bm25s index over one string per product; `search` returns product ids best first."""

    def __init__(self, retriever: bm25s.BM25, ids: list[str]):
        self.retriever = retriever
        self.ids = ids
        self.vocab: dict[str, int] = retriever.vocab_dict
        self._cache: OrderedDict[tuple[str, ...], list[str]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def build(cls, texts: list[str], ids: list[str]) -> SearchEngine:
        if len(texts) != len(ids):
            raise ValueError("one text per id")
        retriever = bm25s.BM25()  # Lucene-style BM25, k1=1.5, b=0.75 (Lucene's defaults are 0.9/0.4)
        retriever.index([tokenize(t) for t in texts], show_progress=False)
        return cls(retriever, list(ids))

    def state(self) -> dict[str, Any]:
        """Picklable state (the bm25s sparse score matrix and vocabulary) for the on-disk cache."""
        return {"retriever": self.retriever, "ids": self.ids}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SearchEngine:
        return cls(state["retriever"], state["ids"])

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """Ids of the best `k` documents with a positive score; [] when no query word is indexed."""
        toks = tuple(t for t in tokenize(query)[:MAX_QUERY_TOKENS] if t in self.vocab)
        if not toks:
            return []
        with self._lock:
            hit = self._cache.get(toks)
            if hit is not None:
                self._cache.move_to_end(toks)
                return hit[:k]
        scores = np.asarray(self.retriever.get_scores(list(toks)))
        n = min(max(k, SEARCH_RETURN_N), len(scores))
        top = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
        hits = [int(i) for i in top if scores[i] > 0]
        hits.sort(key=lambda i: (-float(scores[i]), i))  # deterministic tie-break by catalog order
        result = [self.ids[i] for i in hits]
        with self._lock:
            self._cache[toks] = result
            if len(self._cache) > 4096:
                self._cache.popitem(last=False)
        return result[:k]
