"""Exact top-k cosine search over unit vectors, and maximal-marginal-relevance selection.

Owns: `VectorIndex` (append-only rows, exact maximum-inner-product top-k in numpy or faiss `IndexFlatIP`, with a
per-query filter and exclusions, ties broken by row number so results are the same on every CPU) and
`mmr_select`.
Must not know: what the vectors embed (the replay buffer's transitions), files, models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

Backend = Literal["numpy", "faiss"]


def _top_k_columns(s: np.ndarray, k: int) -> np.ndarray:
    """(B, k) column numbers of each row's k largest scores of `s` (B, C), ties at the k-th score going to the
    lowest columns. `argpartition` alone leaves which of several equal scores makes the cut to its selection
    algorithm, which numpy dispatches by CPU (SIMD sorts): retrieval would then differ between machines."""
    part = np.argpartition(s, s.shape[1] - k, axis=1)[:, -k:]
    picked = np.take_along_axis(s, part, axis=1)
    kth = picked.min(axis=1, keepdims=True)  # (B, 1)
    # Rows where more columns hold the k-th score than were picked: choose those by column number.
    for b in np.flatnonzero((s == kth).sum(axis=1) > (picked == kth).sum(axis=1)):
        above = np.flatnonzero(s[b] > kth[b, 0])
        tied = np.flatnonzero(s[b] == kth[b, 0])[: k - len(above)]
        part[b] = np.concatenate([above, tied])
    return part


class VectorIndex:
    """Exact maximum-inner-product top-k over unit vectors (= cosine), numpy or faiss `IndexFlatIP`.

    numpy: the (B, d) query batch is multiplied with the stored (n, d) matrix in row chunks of
    `chunk_rows` (one BLAS product per chunk for the whole batch; the (B, chunk) score block stays in
    cache-friendly memory instead of a (B, n) matrix), top-k per chunk by `argpartition`, then merged.
    faiss: `IndexFlatIP.search` with an `IDSelectorBitmap` for the filter. Both are exact, so they return
    the same rows up to ties. Rows are never removed here; the caller masks dead rows with `allowed`.
    """

    def __init__(self, dim: int, backend: Backend = "numpy", chunk_rows: int = 65536):
        if backend not in ("numpy", "faiss"):
            raise ValueError(f"backend must be 'numpy' or 'faiss', got {backend!r}")
        self.dim, self.backend, self.chunk_rows = dim, backend, chunk_rows
        self._data = np.zeros((0, dim), np.float32)
        self.n = 0
        self._faiss: Any = None
        if backend == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatIP(dim)

    @property
    def vectors(self) -> np.ndarray:
        """(n, dim) float32 view of the stored rows."""
        return self._data[: self.n]

    def add(self, x: np.ndarray) -> None:
        """Append rows (m, dim)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected (m, {self.dim}) vectors, got {x.shape}")
        need = self.n + len(x)
        if need > len(self._data):  # amortised doubling: appends stay O(1) per row
            grown = np.zeros((max(need, 2 * len(self._data), 1024), self.dim), np.float32)
            grown[: self.n] = self._data[: self.n]
            self._data = grown
        self._data[self.n:need] = x
        self.n = need
        if self._faiss is not None:
            self._faiss.add(x)

    def reset(self, x: np.ndarray) -> None:
        """Replace all rows (used after compaction)."""
        self._data, self.n = np.zeros((0, self.dim), np.float32), 0
        if self._faiss is not None:
            self._faiss.reset()
        self.add(x)

    def search(self, q: np.ndarray, k: int, allowed: np.ndarray | None = None,
               exclude: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows for each query.

        q: (B, dim) unit queries. allowed: (n,) bool or None (all rows). exclude: per query, row numbers
        to leave out. Returns scores (B, k) float32 and rows (B, k) int64, best first; where fewer than k
        rows qualify the tail is -inf / -1.
        """
        q = np.ascontiguousarray(q, dtype=np.float32).reshape(-1, self.dim)
        B = len(q)
        out_s = np.full((B, k), -np.inf, np.float32)
        out_i = np.full((B, k), -1, np.int64)
        if self.n == 0 or k <= 0 or B == 0:
            return out_s, out_i
        if allowed is not None and len(allowed) != self.n:
            raise ValueError(f"allowed mask has {len(allowed)} rows, index has {self.n}")
        exclude = [np.asarray(e, np.int64) for e in exclude] if exclude is not None else [np.zeros(0, np.int64)] * B
        if self.backend == "faiss":
            s, i = self._search_faiss(q, k, allowed, exclude)
        else:
            s, i = self._search_numpy(q, k, allowed, exclude)
        m = min(k, s.shape[1])
        out_s[:, :m], out_i[:, :m] = s[:, :m], i[:, :m]
        out_i[~np.isfinite(out_s)] = -1
        return out_s, out_i

    def _search_numpy(self, q, k, allowed, exclude):
        penalty = None if allowed is None or allowed.all() else np.where(allowed, 0.0, -np.inf).astype(np.float32)
        best_s = np.zeros((len(q), 0), np.float32)
        best_i = np.zeros((len(q), 0), np.int64)
        V = self.vectors
        for c0 in range(0, self.n, self.chunk_rows):
            c1 = min(self.n, c0 + self.chunk_rows)
            s = q @ V[c0:c1].T  # (B, C)
            if penalty is not None:
                s += penalty[c0:c1]
            for b, rows in enumerate(exclude):
                if len(rows):
                    r = rows[(rows >= c0) & (rows < c1)]
                    s[b, r - c0] = -np.inf
            part = _top_k_columns(s, min(k, c1 - c0))
            best_s = np.concatenate([best_s, np.take_along_axis(s, part, axis=1)], axis=1)
            best_i = np.concatenate([best_i, part + c0], axis=1)
            # Best first; equal scores by row number, so results depend neither on chunking nor on the CPU.
            order = np.lexsort((best_i, -best_s), axis=1)[:, :k]
            best_s, best_i = np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)
        return best_s, best_i

    def _search_faiss(self, q, k, allowed, exclude):
        import faiss

        extra = max((len(e) for e in exclude), default=0)
        kk = min(self.n, k + extra)
        if allowed is None or allowed.all():
            D, I = self._faiss.search(q, kk)
        else:
            bitmap = np.packbits(allowed.astype(np.uint8), bitorder="little")
            sel = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(bitmap))
            D, I = self._faiss.search(q, kk, params=faiss.SearchParameters(sel=sel))
        D = D.astype(np.float32)
        I = I.astype(np.int64)
        D[I < 0] = -np.inf
        for b, rows in enumerate(exclude):
            if len(rows):
                drop = np.isin(I[b], rows)
                D[b, drop] = -np.inf
        order = np.lexsort((I, -D), axis=1)
        return np.take_along_axis(D, order, 1), np.take_along_axis(I, order, 1)


def mmr_select(query: np.ndarray, cand: np.ndarray, k: int, lam: float) -> list[int]:
    """Maximal marginal relevance: greedily pick k of `cand` (m, d) maximising
    lam * cos(query, c) - (1 - lam) * max_{s picked} cos(c, s). lam=1 is plain top-k; lower is more diverse.
    Returns positions into `cand`."""
    if len(cand) == 0:
        return []
    rel = cand @ query  # (m,)
    sim = cand @ cand.T  # (m, m)
    picked: list[int] = []
    redundancy = np.full(len(cand), -np.inf, np.float32)
    free = np.ones(len(cand), bool)
    for _ in range(min(k, len(cand))):
        score = lam * rel - (1.0 - lam) * np.where(np.isfinite(redundancy), redundancy, 0.0)
        score[~free] = -np.inf
        j = int(np.argmax(score))
        picked.append(j)
        free[j] = False
        redundancy = np.maximum(redundancy, sim[j])
    return picked
