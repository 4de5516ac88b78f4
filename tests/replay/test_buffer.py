"""Replay buffer: persistence and crash recovery (incl. SIGKILL), dedup, eviction, filters, retrieval, MMR,
numpy vs faiss through the buffer (the index alone: test_vector_index.py)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dreamgym.replay.buffer import BufferOpenError, ReplayBuffer, content_hash
from dreamgym.commands.collect import collect
from dreamgym.data import read_jsonl
from dreamgym.replay.embed import HashingEmbedder, text_of
from dreamgym.types import Task, Transition
from dreamgym.replay.vector_index import VectorIndex

WORDS = ("red blue green shirt shoe mug apple cabinet drawer sink fridge size large small cotton wool "
         "search click buy back next price option color kitchen table lamp").split()


def tr(state: str, action: str = "click[x]", env: str = "webshop", instr: str = "buy a red shirt",
       source: str = "real", traj: str = "", step: int = 0, next_state: str = "next", reward: float = 0.0):
    return Transition(task=Task(id=instr, env=env, instruction=instr), history=[], state=state, action=action,
                      next_state=next_state, reward=reward, done=False, source=source, trajectory_id=traj,
                      step_index=step)


def random_transitions(n: int, seed: int = 0, **kw) -> list[Transition]:
    """Random word states; five consecutive transitions share a trajectory id."""
    rng = random.Random(seed)
    return [tr(" ".join(rng.choice(WORDS) for _ in range(12)), f"click[{rng.choice(WORDS)}]",
               traj=f"traj-{seed}-{i // 5}", step=i % 5, **kw) for i in range(n)]


class CountingEmbedder(HashingEmbedder):
    """The real hashing embedder, counting how many texts it encodes."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = 0

    def encode(self, texts):
        self.calls += len(texts)
        return super().encode(texts)


@pytest.fixture(scope="module")
def dial_trajs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dial") / "d.jsonl"
    collect("dial", {"oracle": 1, "noisy": 1, "random": 1}, 90, out, progress=False)
    return list(read_jsonl(out))


def test_retrieval_ranks_by_cosine_and_finds_the_twin(dial_trajs):
    emb = HashingEmbedder()
    buf = ReplayBuffer(None, emb)
    assert buf.add_trajectories(dial_trajs, seed_data=True) > 100
    stored = buf.transitions()
    vecs = emb.encode([text_of(t) for t in stored])
    queries = [t for tj in dial_trajs[:6] for t in tj.transitions()][:12]
    hits = buf.retrieve_scored(queries, k=5, exclude_same_trajectory=False)
    qv = emb.encode([text_of(q) for q in queries])
    for q, v, h in zip(queries, qv, hits):
        expect = np.sort(vecs @ v)[::-1][:5]
        assert np.allclose([s for _, s in h], expect, atol=1e-5)  # exactly the 5 best cosines
        assert text_of(h[0][0]) == text_of(q) and h[0][1] == pytest.approx(1.0, abs=1e-5)
    # With exclusion, nothing comes from the query's own trajectory, nor its stored twin.
    for q, h in zip(queries, buf.retrieve(queries, k=5)):
        assert all(x.trajectory_id != q.trajectory_id and content_hash(x) != content_hash(q) for x in h)
    # exclude_twins=False keeps a twin stored from another episode (what a synthetic step, whose answer is
    # unknown, would retrieve) but still never the query's own trajectory.
    row_traj = {content_hash(t): t.trajectory_id for t in stored}
    later = [t for tj in dial_trajs[-30:] for t in tj.transitions()]
    shared = [q for q in later if row_traj.get(content_hash(q)) not in (None, q.trajectory_id)][:12]
    assert shared, "the dial repeats steps across episodes"
    for q, h in zip(shared, buf.retrieve(shared, k=5, exclude_twins=False)):
        # (other stored steps can embed identically: ties at cosine 1, so the twin is among the hits)
        assert content_hash(q) in {content_hash(x) for x in h} and all(x.trajectory_id != q.trajectory_id for x in h)
    # A fresh query matching one stored (task, state, action) finds it first.
    target = stored[37]
    probe = tr(target.state, target.action, env="dial", instr=target.task.instruction, traj="new")
    assert text_of(buf.retrieve([probe], k=1)[0][0]) == text_of(target)


def test_dedup(tmp_path):
    buf = ReplayBuffer(tmp_path / "b", HashingEmbedder(dim=64))
    a = random_transitions(20)
    assert buf.add(a) == 20 and buf.add(a) == 0
    twin = tr(a[3].state, a[3].action, traj="other", step=9)  # same content, other provenance
    assert buf.add([twin, twin]) == 0
    assert buf.add([tr(a[3].state, a[3].action, source="synthetic")]) == 1  # source is part of identity
    assert buf.add([tr(a[3].state, a[3].action, next_state="different")]) == 1
    assert len(buf) == 22 and buf.stats()["duplicates"] == 22
    buf.close()
    with ReplayBuffer(tmp_path / "b", HashingEmbedder(dim=64)) as again:
        assert again.add(a) == 0 and len(again) == 22


def test_eviction_order_and_seed_protection(tmp_path):
    seed = random_transitions(40, seed=1)
    syn = random_transitions(30, seed=2, source="synthetic")
    online = random_transitions(15, seed=3)
    buf = ReplayBuffer(tmp_path / "b", HashingEmbedder(dim=64), capacity=50)
    buf.add(seed, seed_data=True)
    buf.add(syn[:15])
    buf.add(syn[15:])
    assert len(buf) == 50
    kept = {content_hash(t) for t in buf.transitions()}
    assert {content_hash(t) for t in seed} <= kept
    assert {content_hash(t) for t in syn[20:]} <= kept and not {content_hash(t) for t in syn[:20]} & kept
    buf.add(online)  # the remaining synthetic go first, then the oldest online real ones
    kept = {content_hash(t) for t in buf.transitions()}
    assert {content_hash(t) for t in seed} <= kept and len(buf) == 50
    assert buf.stats()["synthetic"] == 0 and {content_hash(t) for t in online[5:]} <= kept
    buf.close()
    with ReplayBuffer(tmp_path / "b", HashingEmbedder(dim=64), capacity=50) as again:  # evictions persisted
        assert {content_hash(t) for t in again.transitions()} == kept
    # Seed data alone over capacity is all kept; with evict_seed the oldest seed goes.
    small = ReplayBuffer(None, HashingEmbedder(dim=64), capacity=10)
    small.add(seed, seed_data=True)
    assert len(small) == 40 and small.stats()["over_capacity"]
    assert small.add(syn[:5]) == 5 and len(small) == 40  # new synthetic ones are evicted at once
    loose = ReplayBuffer(None, HashingEmbedder(dim=64), capacity=10, evict_seed=True)
    loose.add(seed, seed_data=True)
    assert [content_hash(t) for t in loose.transitions()] == [content_hash(t) for t in seed[30:]]


def test_filters(tmp_path):
    buf = ReplayBuffer(None, HashingEmbedder(dim=128))
    buf.add(random_transitions(30, seed=4, env="webshop"))
    buf.add(random_transitions(30, seed=5, env="alfworld", source="synthetic"))
    buf.add(random_transitions(30, seed=6, env="alfworld"))
    q = random_transitions(4, seed=7)
    for hits in buf.retrieve(q, k=10, env="alfworld"):
        assert len(hits) == 10 and {h.task.env for h in hits} == {"alfworld"}
    for hits in buf.retrieve(q, k=10, env="alfworld", real_only=True):
        assert {(h.task.env, h.source) for h in hits} == {("alfworld", "real")}
    assert buf.retrieve(q, k=3, env="textworld") == [[], [], [], []]
    assert [len(h) for h in buf.retrieve(q, k=200)] == [90] * 4  # fewer than k qualify
    assert buf.stats()["by_env"] == {"webshop": 30, "alfworld": 60}


def test_mmr_gives_a_more_diverse_set():
    emb = HashingEmbedder(dim=512)
    buf = ReplayBuffer(None, emb)
    base = "item page red cotton shirt size large color navy price 24.99 buy now"
    near = [tr(base + f" review {w}", "click[buy now]", traj=f"n{i}") for i, w in enumerate(["good", "nice", "ok"])]
    far = [tr("item page red cotton shirt description soft fabric", "click[buy now]", traj="f0"),
           tr("results page red shirt shirt shirt next", "click[buy now]", traj="f1"),
           tr("item page navy shirt features machine wash", "click[buy now]", traj="f2")]
    buf.add(near + far)
    q = tr(base, "click[buy now]", traj="q")
    plain = buf.retrieve([q], k=3)[0]
    mmr = buf.retrieve([q], k=3, mmr_lambda=0.3)[0]
    assert {t.trajectory_id for t in plain} == {"n0", "n1", "n2"}

    def spread(ts):
        v = emb.encode([text_of(t) for t in ts])
        s = v @ v.T
        return s[np.triu_indices(len(ts), 1)].mean()

    assert spread(mmr) < spread(plain) - 0.05 and {t.trajectory_id for t in mmr} & {"f0", "f1", "f2"}
    assert mmr[0].trajectory_id == plain[0].trajectory_id  # the most relevant stays first


def test_numpy_and_faiss_agree():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5000, 48)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:16] + 0.3 * rng.standard_normal((16, 48)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    allowed = rng.random(5000) < 0.6
    exclude = [np.arange(i * 10, i * 10 + 10) for i in range(16)]
    npi, fi = VectorIndex(48, "numpy", chunk_rows=700), VectorIndex(48, "faiss")
    for idx in (npi, fi):
        idx.add(x[:3000])
        idx.add(x[3000:])
    brute = np.where(allowed, q @ x.T, -np.inf)
    for b in range(16):
        brute[b, exclude[b]] = -np.inf
    want = np.argsort(-brute, axis=1)[:, :8]
    for idx in (npi, fi):
        s, i = idx.search(q, 8, allowed, exclude)
        assert (i == want).all(), idx.backend
        assert np.allclose(s, np.take_along_axis(brute, want, 1), atol=1e-5)
    assert (npi.search(q, 8)[1] == fi.search(q, 8)[1]).all()
    # Through the buffer, with filters and exclusions.
    trs = random_transitions(400, seed=8) + random_transitions(200, seed=9, env="alfworld", source="synthetic")
    bufs = [ReplayBuffer(None, HashingEmbedder(dim=96), backend=b) for b in ("numpy", "faiss")]
    for buf in bufs:
        buf.add(trs)
    queries = trs[::37]
    for kw in ({}, {"env": "webshop"}, {"real_only": True}, {"mmr_lambda": 0.5}):
        a, b = (buf.retrieve_scored(queries, k=6, **kw) for buf in bufs)
        assert [[content_hash(t) for t, _ in h] for h in a] == [[content_hash(t) for t, _ in h] for h in b], kw


def test_reopen_reads_stored_embeddings_and_refuses_mismatch(tmp_path):
    emb = CountingEmbedder(dim=64)
    trs = random_transitions(50)
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        buf.add(trs)
        before = buf.retrieve_scored(trs[:5], k=4)
        with pytest.raises(BufferOpenError, match="another process"):
            ReplayBuffer(tmp_path / "b", emb)
    emb.calls = 0
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        assert emb.calls == 0 and len(buf) == 50  # nothing re-embedded on open
        after = buf.retrieve_scored(trs[:5], k=4)
    assert [[(content_hash(t), round(s, 5)) for t, s in h] for h in before] == \
           [[(content_hash(t), round(s, 5)) for t, s in h] for h in after]
    with pytest.raises(BufferOpenError, match="hashing-v1:d64"):
        ReplayBuffer(tmp_path / "b", HashingEmbedder(dim=32))


def test_a_whole_last_line_without_its_newline_is_kept_with_its_embedding(tmp_path):
    emb, trs = HashingEmbedder(dim=64), random_transitions(5)
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        buf.add(trs)
    lines = tmp_path / "b" / "gen-000000" / "transitions.jsonl"
    whole = lines.read_bytes()
    lines.write_bytes(whole[:-1])  # the kill came just before the last newline
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        assert len(buf) == 5 and buf.stats()["recovered_torn_bytes"] == 0
        assert buf.stats()["dropped_orphan_embeddings"] == 0
    assert lines.read_bytes() == whole


def test_torn_tail_orphan_rows_and_corrupt_line_are_repaired(tmp_path):
    emb = HashingEmbedder(dim=64)
    trs = random_transitions(30)
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        buf.add(trs[:20])
    gen = tmp_path / "b" / "gen-000000"
    with open(gen / "embeddings.f32", "ab") as fh:  # the next batch's rows got out, its lines did not
        fh.write(np.ones((2, 64), np.float32).tobytes() + b"\x00" * 7)
    with open(gen / "transitions.jsonl", "ab") as fh:
        fh.write(b'{"h": "abc", "seed": false, "t": {"task": {"id"')
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        st = buf.stats()
        assert len(buf) == 20 and st["recovered_torn_bytes"] == 47 and st["dropped_orphan_embeddings"] == 2
        # The torn line is set aside beside the file (the torn-tail rule of dreamgym.utils.jsonl), not dropped.
        assert (gen / "transitions.jsonl.torn").read_bytes() == b'{"h": "abc", "seed": false, "t": {"task": {"id"\n'
        assert buf.add(trs[20:]) == 10
    lines = (gen / "transitions.jsonl").read_bytes().split(b"\n")
    lines[4] = b"{garbage"
    (gen / "transitions.jsonl").write_bytes(b"\n".join(lines))
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        assert len(buf) == 29 and buf.stats()["corrupt_lines"] == 1
        assert content_hash(trs[4]) not in {content_hash(t) for t in buf.transitions()}
        assert np.allclose(buf.index.vectors, emb.encode([text_of(t) for t in buf.transitions()]), atol=1e-6)
    assert len(list((tmp_path / "b").glob("corrupt-*.jsonl"))) == 1
    assert [p.name for p in (tmp_path / "b").glob("gen-*")] == ["gen-000001"]
    assert (tmp_path / "b" / "gen-000001" / "transitions.jsonl.torn").is_file()  # compaction keeps what was set aside


def test_compaction_keeps_files_small_and_consistent(tmp_path):
    emb = HashingEmbedder(dim=32)
    with ReplayBuffer(tmp_path / "b", emb, capacity=40, compact_min=20) as buf:
        buf.add(random_transitions(40, seed=1), seed_data=True)
        for i in range(10):
            buf.add(random_transitions(20, seed=100 + i, source="synthetic"))
        assert buf.stats()["compactions"] >= 2 and len(buf) == 40
        live = [content_hash(t) for t in buf.transitions()]
    gens = list((tmp_path / "b").glob("gen-*"))
    assert len(gens) == 1 and (tmp_path / "b" / "CURRENT").read_text() == gens[0].name
    assert len((gens[0] / "transitions.jsonl").read_bytes().splitlines()) <= 40 + 20 + 20
    with ReplayBuffer(tmp_path / "b", emb, capacity=40) as buf:
        assert [content_hash(t) for t in buf.transitions()] == live
        assert buf.index.n == buf.stats()["size"] + buf.stats()["tombstones"]


def test_sigkill_mid_write_loses_at_most_the_transition_in_flight(tmp_path):
    """Three rounds of: a writer adds big transitions in a loop and is killed with SIGKILL after a random
    delay (large lines make a kill in the middle of a write likely), then the store is reopened."""
    path = tmp_path / "b"
    code = textwrap.dedent(f"""
        from dreamgym.replay.buffer import ReplayBuffer
        from dreamgym.replay.embed import HashingEmbedder
        from dreamgym.types import Task, Transition
        buf = ReplayBuffer({str(path)!r}, HashingEmbedder(dim=64))
        k = len(buf)
        while True:
            batch = [Transition(task=Task(id="t", env="e", instruction="do it"), history=[],
                                state=f"state {{k + j}} " + "pad " * 60000, action=f"act {{k + j}}",
                                next_state="n", reward=0.0, done=False) for j in range(3)]
            buf.add(batch)
            k += 3
            print(len(buf), flush=True)
    """)
    emb = HashingEmbedder(dim=64)
    rng = random.Random(0)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        acked = 0
        for _ in range(8):
            acked = int(proc.stdout.readline())
        time.sleep(rng.random() * 0.03)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        with ReplayBuffer(path, emb) as buf:
            n = len(buf)
            assert n >= acked and buf.index.n == n
            trs = buf.transitions()
            assert all(t.state.startswith(f"state {i} ") for i, t in enumerate(trs))  # no gap, no garbage
            assert np.allclose(buf.index.vectors, emb.encode([text_of(t) for t in trs]), atol=1e-6)
    with ReplayBuffer(path, emb) as buf:
        assert buf.add([tr("after the crash")]) == 1
        n = len(buf)
    assert (path / "gen-000000" / "embeddings.f32").stat().st_size == n * 64 * 4
    lines = (path / "gen-000000" / "transitions.jsonl").read_bytes()
    assert lines.endswith(b"\n") and len([json.loads(x) for x in lines.splitlines()]) == n
