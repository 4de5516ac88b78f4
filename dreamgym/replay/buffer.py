"""The experience replay buffer: a persistent, deduplicated store of transitions with embedding retrieval.

Owns: the buffer's directory format, crash recovery, deduplication, capacity and eviction, filters, and
retrieval of stored transitions (top-k cosine over `dreamgym.replay.vector_index`, with optional MMR re-ranking).
Must not know: torch, models, trainers, environments. It gets an `Embedder` object (dreamgym.replay.embed) and
embeds `transition_text(task, state, action)`.

Directory layout (`path/`)::

    meta.json                 embedder name and dim, format version (refuses a different embedder)
    LOCK                      flock'ed by the open buffer: one process at a time
    CURRENT                   name of the live generation, replaced atomically by compaction
    gen-000000/transitions.jsonl   append-only, one transition per line: {"h": hash, "seed": bool, "t": {...}}
    gen-000000/embeddings.f32      append-only float32 rows, row i <-> line i, never recomputed on reopen
    gen-000000/evicted.log         append-only row numbers of evicted transitions

Crash safety. `add` appends the batch's embedding rows (fsync) before its lines (fsync). On open, a torn last
line is set aside by the torn-tail rule of every JSONL appender (`dreamgym.utils.jsonl`), a partial embedding row is
cut, and embedding rows beyond the last complete line are dropped; so a process killed at any point loses at
most what it was writing and never leaves a line without its embedding. (Only if the OS itself lost the
embedding write, e.g. power loss without fsync ordering, are the missing rows recomputed.) A corrupt line in the
middle (outside damage, never our own writes) is moved to `corrupt-<time>.jsonl` and the store is compacted
around it.
A `meta.json` or `CURRENT` that cannot be read or does not parse raises `dreamgym.data.DataError` naming the file
(and line): nothing is recovered or deleted on a guess, since CURRENT decides which generation is kept.

Deduplication: transitions are identical when env, task instruction, history, state, action, next state,
reward, done and source agree (`content_hash`; not reasoning, ids or times); `add` skips a transition
whose twin is stored.

Eviction (when more than `capacity` transitions are live): oldest synthetic first, then oldest real
transitions added online, and the offline real seed data (`add(..., seed_data=True)`) only when
`evict_seed=True`. If the seed data alone exceeds capacity it is all kept (`stats()["over_capacity"]`).
Evicted rows are skipped by retrieval at once and dropped from disk by compaction (a new generation is
written and `CURRENT` switched atomically) once they outnumber the live rows.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dreamgym.data import DataError
from dreamgym.replay.embed import Embedder, text_of
from dreamgym.utils.jsonl import JsonlAppender, repair_tail
from dreamgym.utils.paths import atomic_write_text
from dreamgym.replay.vector_index import Backend, VectorIndex, mmr_select
from dreamgym.types import Task, Trajectory, Transition

FORMAT_VERSION = 1


class BufferOpenError(RuntimeError):
    """The buffer directory cannot be used (locked, other embedder, unknown format)."""


def content_hash(tr: Transition) -> str:
    """Identity of a transition for deduplication (see the module docstring for what counts)."""
    key = [tr.task.env, tr.task.instruction, [list(h) for h in tr.history], tr.state, tr.action,
           tr.next_state, float(tr.reward), bool(tr.done), tr.source]
    return hashlib.blake2b(json.dumps(key, ensure_ascii=False).encode("utf-8"), digest_size=16).hexdigest()


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise DataError(path, None, f"cannot read the file ({e.strerror or e})") from e
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, f"not valid JSON ({e.msg} at column {e.colno})") from e
    except (ValueError, RecursionError) as e:  # not UTF-8, nested too deeply
        raise DataError(path, None, f"not a replay-buffer meta file ({type(e).__name__}: {e})") from e
    if not isinstance(meta, dict):
        raise DataError(path, None, f"expected a JSON object, got {type(meta).__name__}")
    return meta


def _read_current(path: Path) -> str:
    """The live generation CURRENT names. It must be a generation directory that exists: every generation but the
    named one is deleted on open, so a damaged CURRENT must stop the open, not choose what is kept."""
    try:
        gen = path.read_bytes().decode("utf-8").strip()
    except OSError as e:
        raise DataError(path, None, f"cannot read the file ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise DataError(path, 1, f"not UTF-8 text (byte at column {e.start + 1})") from e
    if not re.fullmatch(r"gen-\d{6}", gen):
        raise DataError(path, 1, f"names {gen[:40]!r}, not a generation (gen-NNNNNN); the generations here are "
                        f"{', '.join(sorted(p.name for p in path.parent.glob('gen-*'))) or 'none'}")
    if not (path.parent / gen).is_dir():
        raise DataError(path, 1, f"names {gen}, which is missing; the generations here are "
                        f"{', '.join(sorted(p.name for p in path.parent.glob('gen-*'))) or 'none'}")
    return gen


# ------------------------------------------------------------------------------------------ the buffer

class _Growable:
    """A numpy array with amortised appends (filter columns of the buffer)."""

    def __init__(self, dtype: Any):
        self.a = np.zeros(1024, dtype)
        self.n = 0

    def append(self, values: Sequence[Any]) -> None:
        need = self.n + len(values)
        if need > len(self.a):
            grown = np.zeros(max(need, 2 * len(self.a)), self.a.dtype)
            grown[: self.n] = self.a[: self.n]
            self.a = grown
        self.a[self.n:need] = values
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.a[: self.n]


class ReplayBuffer:
    """Persistent transition store with deduplication, eviction and batched top-k retrieval.

    `path=None` keeps everything in memory. `backend="faiss"` searches with faiss `IndexFlatIP` instead of
    numpy (same results). Use as a context manager or call `close()` to release the directory lock.
    """

    def __init__(self, path: str | Path | None, embedder: Embedder, capacity: int = 1_000_000,
                 evict_seed: bool = False, backend: Backend = "numpy", compact_min: int = 4096):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.path = Path(path) if path is not None else None
        self.embedder, self.capacity, self.evict_seed = embedder, int(capacity), evict_seed
        self.compact_min = compact_min
        self.index = VectorIndex(int(embedder.dim), backend)
        self._tasks: dict[tuple, Task] = {}
        self.__init_state()
        self.counters = {"added": 0, "duplicates": 0, "evicted": 0, "compactions": 0,
                         "recovered_torn_bytes": 0, "dropped_orphan_embeddings": 0,
                         "reembedded_on_open": 0, "corrupt_lines": 0}
        self._lock_fd: int | None = None
        self._lines: JsonlAppender | None = None
        self._emb_fd: int | None = None
        self._evict_fd: int | None = None
        if self.path is not None:
            try:
                self._open()
            except BaseException:
                self.close()
                raise

    # ------------------------------------------------------------------------------------ persistence
    def _open(self) -> None:
        assert self.path is not None
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise BufferOpenError(f"replay buffer {self.path} is open in another process") from None
        meta_path = self.path / "meta.json"
        meta = {"format": FORMAT_VERSION, "embedder": self.embedder.name, "dim": int(self.embedder.dim)}
        if meta_path.exists():
            old = _read_meta(meta_path)
            if old.get("format") != FORMAT_VERSION:
                raise BufferOpenError(f"{meta_path}: unknown buffer format {old.get('format')!r}")
            if (old.get("embedder"), old.get("dim")) != (meta["embedder"], meta["dim"]):
                raise BufferOpenError(f"{self.path} holds embeddings of {old.get('embedder')} ({old.get('dim')}-d); "
                                   f"open it with that embedder, not {meta['embedder']} ({meta['dim']}-d)")
        else:
            atomic_write_text(meta_path, json.dumps(meta, indent=2))
        current = self.path / "CURRENT"
        gen = _read_current(current) if current.exists() else "gen-000000"
        for stale in self.path.glob("gen-*"):  # a compaction that died before switching CURRENT
            if stale.name != gen:
                shutil.rmtree(stale, ignore_errors=True)
        self._gen = self.path / gen
        self._gen.mkdir(exist_ok=True)
        if not current.exists():
            atomic_write_text(current, gen)
        self._load_generation()

    def _load_generation(self) -> None:
        try:
            self._read_generation()
        except OSError as e:  # a file of the generation is a directory, unreadable, on a failing disk
            raise DataError(e.filename or self._gen, None, f"replay buffer file unusable ({e.strerror or e})") from e

    def _read_generation(self) -> None:
        assert self.path is not None  # only a persistent buffer has generations
        lines_p, emb_p, ev_p = (self._gen / "transitions.jsonl", self._gen / "embeddings.f32",
                                self._gen / "evicted.log")
        for p in (lines_p, emb_p, ev_p):
            p.touch(exist_ok=True)
        # A torn last line from a killed writer: the torn-tail rule every JSONL appender applies (dreamgym.utils.jsonl).
        self.counters["recovered_torn_bytes"] = repair_tail(lines_p)
        raw = lines_p.read_bytes()
        lines = raw.split(b"\n")[:-1] if raw else []
        row_bytes = 4 * self.index.dim
        n_emb = emb_p.stat().st_size // row_bytes
        if n_emb > len(lines) or emb_p.stat().st_size % row_bytes:
            self.counters["dropped_orphan_embeddings"] = max(0, n_emb - len(lines))
            n_emb = min(n_emb, len(lines))
            with open(emb_p, "r+b") as fh:
                fh.truncate(n_emb * row_bytes)
                os.fsync(fh.fileno())
        vecs = np.fromfile(emb_p, dtype=np.float32, count=n_emb * self.index.dim).reshape(n_emb, self.index.dim)

        records, bad = [], []
        for i, line in enumerate(lines):
            try:
                rec = json.loads(line)
                tr = self._intern(Transition.from_dict(rec["t"]))
                records.append((i, rec["h"], bool(rec.get("seed", False)), tr))
            except (ValueError, KeyError, TypeError, IndexError):
                bad.append(i)
        if len(lines) > n_emb:  # the OS lost embedding rows: recompute just those
            missing = [r for r in records if r[0] >= n_emb]
            extra = self._encode([r[3] for r in missing])
            full = np.zeros((len(lines), self.index.dim), np.float32)
            full[:n_emb] = vecs
            full[[r[0] for r in missing]] = extra
            vecs = full
            self.counters["reembedded_on_open"] = len(missing)
            with open(emb_p, "r+b") as fh:
                fh.truncate(n_emb * row_bytes)
                fh.seek(0, os.SEEK_END)
                fh.write(vecs[n_emb:].tobytes())
                os.fsync(fh.fileno())

        evicted = set()
        for tok in ev_p.read_bytes().split(b"\n")[:-1]:  # a torn last entry is ignored (not yet evicted)
            try:
                evicted.add(int(tok))
            except ValueError:
                continue
        if bad:
            self.counters["corrupt_lines"] = len(bad)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            with open(self.path / f"corrupt-{stamp}.jsonl", "ab") as fh:  # kept for inspection
                fh.write(b"".join(lines[i] + b"\n" for i in bad))
        for i, h, seed, tr in records:
            self._append_row(tr, h, seed, alive=i not in evicted and h not in self._by_hash)
        self.index.add(vecs[[i for i, *_ in records]] if bad else vecs)
        self._open_fds()
        if bad:
            self._compact()

    def _open_fds(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._lines = JsonlAppender(self._gen / "transitions.jsonl", crash_name="buffer.write")
        self._emb_fd = os.open(self._gen / "embeddings.f32", flags, 0o644)
        self._evict_fd = os.open(self._gen / "evicted.log", flags, 0o644)

    def _close_fds(self) -> None:
        if self._lines is not None:
            self._lines.close()
            self._lines = None
        for fd in (self._emb_fd, self._evict_fd):
            if fd is not None:
                os.close(fd)
        self._emb_fd = self._evict_fd = None

    def close(self) -> None:
        """Close files and release the directory lock (idempotent)."""
        self._close_fds()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @staticmethod
    def _write(fd: int | None, data: bytes) -> None:
        if fd is None or not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)

    # -------------------------------------------------------------------------------------- contents
    def _intern(self, tr: Transition) -> Transition:
        # Transitions of one task share one Task object (memory at 10^5-10^6 transitions).
        t = tr.task
        key = (t.id, t.env, t.instruction, t.split, t.parent_id, t.iteration, json.dumps(t.goal, sort_keys=True))
        tr.task = self._tasks.setdefault(key, t)
        return tr

    def _encode(self, trs: Sequence[Transition]) -> np.ndarray:
        x = np.asarray(self.embedder.encode([text_of(t) for t in trs]), dtype=np.float32)
        if x.shape != (len(trs), self.index.dim):
            raise ValueError(f"embedder {self.embedder.name} returned {x.shape}, "
                             f"expected ({len(trs)}, {self.index.dim})")
        if not np.isfinite(x).all():
            raise ValueError(f"embedder {self.embedder.name} returned non-finite values")
        norms = np.linalg.norm(x, axis=1, keepdims=True)  # cosine needs unit rows whatever the embedder did
        return x / np.where(norms > 0, norms, 1.0)

    def _category(self, row: int) -> str:
        if self._seed.a[row]:
            return "seed"
        return "real" if self._real.a[row] else "synthetic"

    def _append_row(self, tr: Transition, h: str, seed: bool, alive: bool = True) -> int:
        """Book-keeping for one new row; the caller adds its embedding to `self.index` (in bulk)."""
        row = len(self._trs)
        self._trs.append(tr)
        self._hash.append(h)
        env = self._env_codes.setdefault(tr.task.env, len(self._env_codes))
        traj = -1
        if tr.trajectory_id:
            traj = self._traj_codes.setdefault(tr.trajectory_id, len(self._traj_codes))
            self._traj_rows.setdefault(traj, []).append(row)
        self._alive.append([alive])
        self._real.append([tr.source == "real"])
        self._env.append([env])
        self._traj.append([traj])
        self._seed.append([seed])
        if alive:
            self._by_hash[h] = row
            self._queues[self._category(row)].append(row)
            self._live += 1
        self._mask_cache.clear()
        return row

    def add(self, transitions: Iterable[Transition], seed_data: bool = False) -> int:
        """Store transitions; returns how many were new (identical ones already stored are skipped).

        `seed_data=True` marks offline real seed data, which eviction keeps unless `evict_seed`. The batch
        is embedded once and written with one fsync for the embeddings and one for the lines.
        """
        new: list[tuple[Transition, str]] = []
        seen: set[str] = set()
        for tr in transitions:
            if not isinstance(tr, Transition):
                raise TypeError(f"ReplayBuffer.add expects Transition objects, got {type(tr).__name__}")
            h = content_hash(tr)
            if h in self._by_hash or h in seen:
                self.counters["duplicates"] += 1
                continue
            seen.add(h)
            new.append((tr, h))
        if not new:
            return 0
        vecs = self._encode([t for t, _ in new])
        # Embeddings first: after a crash every complete line has its row (extra rows are dropped on open).
        self._write(self._emb_fd, vecs.tobytes())
        if self._lines is not None:
            self._lines.append_many({"h": h, "seed": bool(seed_data), "t": t.to_dict()} for t, h in new)
        for t, h in new:
            self._append_row(self._intern(t), h, seed_data)
        self.index.add(vecs)
        self.counters["added"] += len(new)
        self._evict()
        return len(new)

    def add_trajectories(self, trajectories: Iterable[Trajectory], seed_data: bool = False, history: int = 4) -> int:
        """Add every transition of the given trajectories (see `Trajectory.transitions`)."""
        return self.add([tr for t in trajectories for tr in t.transitions(history)], seed_data=seed_data)

    def _evict(self) -> None:
        over = self._live - self.capacity
        if over <= 0:
            return
        order = ["synthetic", "real"] + (["seed"] if self.evict_seed else [])
        dead: list[int] = []
        for cat in order:
            q = self._queues[cat]
            while over > 0 and q:
                row = q.popleft()
                if not self._alive.a[row]:
                    continue
                dead.append(row)
                over -= 1
        for row in dead:
            self._alive.a[row] = False
            self._by_hash.pop(self._hash[row], None)
            self._trs[row] = None  # frees the object; the row stays as a tombstone until compaction
        self._live -= len(dead)
        self.counters["evicted"] += len(dead)
        self._mask_cache.clear()
        self._write(self._evict_fd, b"".join(f"{r}\n".encode() for r in dead))
        if len(self._trs) - self._live > max(self.compact_min, self._live):
            self._compact()

    def _compact(self) -> None:
        """Drop dead rows: rebuild in memory and, for a persistent buffer, write a new generation and switch
        CURRENT atomically (a crash before the switch leaves the old generation intact)."""
        keep = np.flatnonzero(self._alive.view)
        rows = [(self._live_tr(int(r)), self._hash[r], bool(self._seed.a[r])) for r in keep]
        vecs = self.index.vectors[keep].copy()
        if self.path is not None:
            self._close_fds()
            old = self._gen
            num = int(old.name.split("-")[1]) + 1
            new = self.path / f"gen-{num:06d}"
            shutil.rmtree(new, ignore_errors=True)
            new.mkdir()
            with open(new / "embeddings.f32", "wb") as fh:
                fh.write(vecs.tobytes())
                fh.flush()
                os.fsync(fh.fileno())
            with open(new / "transitions.jsonl", "wb") as fh:
                for tr, h, seed in rows:
                    fh.write(json.dumps({"h": h, "seed": seed, "t": tr.to_dict()}, ensure_ascii=False).encode() + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            (new / "evicted.log").touch()
            atomic_write_text(self.path / "CURRENT", new.name)
            for side in old.glob("*.torn"):  # torn lines set aside on open are kept for inspection
                os.replace(side, new / side.name)
            shutil.rmtree(old, ignore_errors=True)
            self._gen = new
        # Rebuild the in-memory state from the survivors, in their original order.
        self.__init_state()
        for tr, h, seed in rows:
            self._append_row(tr, h, seed)
        self.index.reset(vecs)
        self.counters["compactions"] += 1
        if self.path is not None:
            self._open_fds()

    def __init_state(self) -> None:
        """Empty per-row state (rows are positions in the generation's files; dead rows are tombstones)."""
        self._trs: list[Transition | None] = []
        self._hash: list[str] = []
        self._alive, self._real, self._seed = _Growable(bool), _Growable(bool), _Growable(bool)
        self._env, self._traj = _Growable(np.int32), _Growable(np.int64)  # codes; -1 = no trajectory id
        self._env_codes: dict[str, int] = {}
        self._traj_codes: dict[str, int] = {}
        self._traj_rows: dict[int, list[int]] = {}
        self._by_hash: dict[str, int] = {}  # live rows only
        self._queues: dict[str, deque[int]] = {"synthetic": deque(), "real": deque(), "seed": deque()}
        self._mask_cache: dict[tuple, np.ndarray | None] = {}
        self._live = 0

    # ------------------------------------------------------------------------------------- retrieval
    def _live_tr(self, row: int) -> Transition:
        """The transition of a live row (evicted rows hold None until compaction)."""
        tr = self._trs[row]
        assert tr is not None, f"row {row} was evicted"
        return tr

    def _allowed(self, env: str | None, real_only: bool) -> np.ndarray | None:
        key = (env, real_only)
        if key not in self._mask_cache:
            mask = self._alive.view.copy()
            if env is not None:
                code = self._env_codes.get(env)
                mask &= (self._env.view == code) if code is not None else False
            if real_only:
                mask &= self._real.view
            self._mask_cache[key] = None if mask.all() else mask
        return self._mask_cache[key]

    def _exclusions(self, queries: Sequence[Transition], twins: bool = True) -> list[np.ndarray]:
        out = []
        for q in queries:
            rows: list[int] = []
            code = self._traj_codes.get(q.trajectory_id) if q.trajectory_id else None
            if code is not None:
                rows.extend(self._traj_rows.get(code, []))
            same = self._by_hash.get(content_hash(q)) if twins else None
            if same is not None:
                rows.append(same)
            out.append(np.unique(np.asarray(rows, np.int64)))
        return out

    def retrieve_scored(self, queries: Sequence[Transition], k: int = 4, *, env: str | None = None,
                        real_only: bool = False, mmr_lambda: float | None = None,
                        exclude_same_trajectory: bool = True, exclude_twins: bool = True,
                        mmr_candidates: int | None = None) -> list[list[tuple[Transition, float]]]:
        """`retrieve`, with each transition's cosine similarity to its query."""
        queries = list(queries)
        if not queries:
            return []
        if mmr_lambda is not None and not 0.0 <= mmr_lambda <= 1.0:
            raise ValueError("mmr_lambda must be in [0, 1]")
        q = self._encode(queries)  # (B, d), one embedder call for the batch
        fetch = k if mmr_lambda is None else max(k, mmr_candidates or 4 * k)
        excl = self._exclusions(queries, exclude_twins) if exclude_same_trajectory else None
        scores, rows = self.index.search(q, fetch, self._allowed(env, real_only), excl)
        out = []
        for b in range(len(queries)):
            valid = rows[b] >= 0
            r, s = rows[b][valid], scores[b][valid]
            if mmr_lambda is not None and len(r) > k:
                pick = mmr_select(q[b], self.index.vectors[r], k, mmr_lambda)
                r, s = r[pick], s[pick]
            out.append([(self._live_tr(int(i)), float(v)) for i, v in zip(r[:k], s[:k])])
        return out

    def retrieve(self, queries: Sequence[Transition], k: int = 4, *, env: str | None = None,
                 real_only: bool = False, mmr_lambda: float | None = None,
                 exclude_same_trajectory: bool = True, exclude_twins: bool = True) -> list[list[Transition]]:
        """For each query transition, the k stored transitions most similar in (task, state, action).

        Batched: the queries are embedded in one call and scored with one matrix product per row chunk.
        `env` keeps one environment family; `real_only` keeps real transitions. `mmr_lambda` (0..1)
        re-ranks 4k candidates by maximal marginal relevance ("similar yet diverse"; 1.0 = plain top-k).
        `exclude_same_trajectory` leaves out the query's own trajectory (by `trajectory_id`) and, with
        `exclude_twins`, any stored twin of the query itself (same content, answer included), so a transition
        never retrieves its own answer. `exclude_twins=False` keeps twins that came from other trajectories:
        in a deterministic environment another episode's identical step is a fair example, and it is what a
        synthetic step (whose answer is unknown) retrieves. Fewer than k are returned when fewer qualify.
        """
        return [[t for t, _ in hits] for hits in self.retrieve_scored(
            queries, k, env=env, real_only=real_only, mmr_lambda=mmr_lambda,
            exclude_same_trajectory=exclude_same_trajectory, exclude_twins=exclude_twins)]

    # ------------------------------------------------------------------------------------- inspection
    def __len__(self) -> int:
        return self._live

    def transitions(self, *, env: str | None = None, real_only: bool = False) -> list[Transition]:
        """The live transitions in insertion order (optionally filtered)."""
        mask = self._allowed(env, real_only)
        rows = np.flatnonzero(self._alive.view if mask is None else mask)
        return [self._live_tr(int(r)) for r in rows]

    def stats(self) -> dict[str, Any]:
        alive = self._alive.view
        seed = int((self._seed.view & alive).sum())
        real = int((self._real.view & alive).sum())
        by_env = {e: int(((self._env.view == c) & alive).sum()) for e, c in self._env_codes.items()}
        return {"size": self._live, "capacity": self.capacity, "seed": seed, "real": real,
                "synthetic": self._live - real, "by_env": {e: n for e, n in by_env.items() if n},
                "tombstones": len(self._trs) - self._live, "over_capacity": self._live > self.capacity,
                "embedder": self.embedder.name, "dim": self.index.dim, "backend": self.index.backend,
                "path": str(self.path) if self.path else None, **self.counters}
