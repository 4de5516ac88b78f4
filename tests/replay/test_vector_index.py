"""The vector index: exact top-k with ties broken by row number, and MMR selection."""

import numpy as np
import pytest

from dreamgym.replay.vector_index import VectorIndex, mmr_select


@pytest.mark.parametrize("chunk_rows", [7, 65536])
def test_ties_at_the_cut_go_to_the_lowest_rows(chunk_rows):
    """Which of several equal scores make the top k is decided by row number, not by numpy's selection algorithm
    (dispatched by CPU): a stored step with many identical-looking neighbours retrieves the same ones everywhere."""
    idx = VectorIndex(4, chunk_rows=chunk_rows)
    e = np.eye(4, dtype=np.float32)
    idx.add(np.stack([e[1]] * 3 + [e[0]] * 40 + [e[2]] * 5))
    scores, rows = idx.search(np.stack([e[0], e[2]]), 6)
    assert rows[0].tolist() == [3, 4, 5, 6, 7, 8] and rows[1, :5].tolist() == [43, 44, 45, 46, 47]
    assert rows[1, 5] == 0  # the first of the 43 rows tied at cosine 0


def test_mmr_takes_the_most_relevant_first_then_the_least_redundant():
    assert mmr_select(np.ones(2) / np.sqrt(2), np.eye(2, dtype=np.float32), 5, 0.5) in ([0, 1], [1, 0])
    cand = np.array([[1, 0], [0.99, 0.141], [0, 1]], np.float32)
    query = np.array([0.8, 0.6], np.float32)
    assert mmr_select(query, cand, 2, 1.0) == [1, 0]  # lam=1: plain top-k
    assert mmr_select(query, cand, 2, 0.3) == [1, 2]  # lower lam: the near-twin of the first gives way
    assert mmr_select(query, cand[:0], 3, 0.5) == []
