"""Episodes of a run for `dreamgym view`: trajectory files and recorded dream episodes, read a page at a time.

Owns: the `EpisodeSource` seam (count, a filtered page of summary rows, one episode by its position) and its three
implementations: `JsonlSource` (a line-offset index built by scanning the file's bytes for newlines, cached per file
size and modification time, so a page parses only its own records), `ParquetSource` (the light columns read once,
an episode streamed from its row group) and `DreamSource` (the synthetic transitions a dream wrote into its replay
buffer, chained back into episodes); `Filter`, `Row` and `Page`.
Must not know: HTTP, HTML, models, environments.

A request never parses a whole big file: a JSONL page parses `n` records by offset; a filtered page scans at most
`Filter.scan_limit` records from its start and says where the next scan starts. A record that cannot be read is a
row carrying its reason (file and line), never a lost page. Every file is opened by `dreamgym.view.files` (a regular
file inside the run folder, checked on the opened file). A source's cached index is one attribute, built by the
request that finds it stale and replaced whole: no lock is held while a file is read, so a slow read holds up only
the request that made it (two requests may build the same index at once; either result is right).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from dreamgym.data import DataError, record_to_trajectory
from dreamgym.types import Step, Task, Trajectory
from dreamgym.view.files import arrow_file_in_run, open_in_run

CHUNK = 8 << 20
"""Bytes read at a time while indexing a JSONL file."""


@dataclass(frozen=True)
class Filter:
    """Which episodes a page lists; empty fields match everything."""

    task: str = ""
    """A piece of the task id or instruction (case-insensitive)."""
    outcome: str = ""
    """'won', 'lost' or '' (both)."""
    source: str = ""
    """'real', 'synthetic' or '' (both)."""
    scan_limit: int = 5000
    """Records a filtered page reads at most before it answers with what it found."""

    @property
    def active(self) -> bool:
        return bool(self.task or self.outcome or self.source)

    def matches(self, row: Row) -> bool:
        if row.error:
            return not self.active
        if self.outcome and (row.won != (self.outcome == "won")):
            return False
        if self.source and row.source != self.source:
            return False
        needle = self.task.lower()
        return not needle or needle in row.task_id.lower() or needle in row.instruction.lower()


@dataclass
class Row:
    """One episode in a list."""

    index: int
    id: str = ""
    task_id: str = ""
    instruction: str = ""
    source: str = ""
    policy: str = ""
    won: bool = False
    reward: float = 0.0
    steps: int = 0
    error: str = ""
    """Why this record cannot be read ("" when it can)."""


@dataclass
class Page:
    rows: list[Row]
    start: int
    """The position the page's scan started at."""
    next_start: int | None
    """Where the next page's scan starts (None: the end)."""
    total: int
    """Episodes in the source (all of them, unfiltered)."""
    scanned: int = 0
    problems: list[str] = field(default_factory=list)
    """What is wrong with the source as a whole (a torn last line, an unreadable file)."""


class EpisodeError(Exception):
    """An episode cannot be shown; the message names the file and position."""


class EpisodeSource(Protocol):
    """Episodes of one file or buffer, addressed by position (0-based)."""

    path: Path
    kind: str

    def count(self) -> int: ...

    def page(self, start: int, n: int, flt: Filter) -> Page: ...

    def episode(self, index: int) -> Trajectory: ...


def summarize(index: int, rec: dict[str, Any]) -> Row:
    task: dict[str, Any] = rec["task"] if isinstance(rec.get("task"), dict) else {}
    steps: list[Any] = rec["steps"] if isinstance(rec.get("steps"), list) else []
    reward = rec.get("total_reward")
    if not isinstance(reward, (int, float)):
        reward = sum(float(s.get("reward") or 0) for s in steps if isinstance(s, dict))
    if not task or "steps" not in rec:
        return Row(index, error="not a trajectory record (no task or steps)")
    return Row(index, id=str(rec.get("id", "")), task_id=str(task.get("id", "")),
               instruction=str(task.get("instruction", "")), source=str(rec.get("source", "real")),
               policy=str(rec.get("policy", "")), won=bool(rec.get("won")), reward=float(reward), steps=len(steps))


# ------------------------------------------------------------------------------------------------ JSONL
@dataclass
class _LineIndex:
    stamp: tuple[int, int]
    starts: np.ndarray
    ends: np.ndarray
    linenos: np.ndarray
    torn: bool
    """The last line has no newline and does not parse (a killed writer): it is not an episode."""


class JsonlSource:
    """A JSONL trajectory file (`dreamgym.data`'s record per line)."""

    kind = "jsonl"

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        self._index: _LineIndex | None = None

    def _lines(self) -> _LineIndex:
        with open_in_run(self.path, self.root) as fh:
            st = os.fstat(fh.fileno())
            stamp = (st.st_size, st.st_mtime_ns)
            index = self._index
            if index is None or index.stamp != stamp:
                index = self._index = self._build(fh, stamp)
        return index

    def _build(self, fh: BinaryIO, stamp: tuple[int, int]) -> _LineIndex:
        newlines = []
        base = 0
        while chunk := fh.read(CHUNK):
            newlines.append(np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + base)
            base += len(chunk)
        nl = np.concatenate(newlines) if newlines else np.zeros(0, dtype=np.int64)
        starts = np.concatenate([[0], nl + 1]).astype(np.int64)
        ends = np.concatenate([nl, [base]]).astype(np.int64)
        linenos = np.arange(1, len(starts) + 1)
        torn = False
        if ends[-1] > starts[-1]:  # a last line without its newline: whole (another tool's file) or torn
            fh.seek(int(starts[-1]))
            try:
                json.loads(fh.read(int(ends[-1] - starts[-1])))
            except ValueError:
                torn = True
        keep = ends - starts > 0
        if torn:
            keep[-1] = False
        return _LineIndex(stamp, starts[keep], ends[keep], linenos[keep], torn)

    def count(self) -> int:
        return len(self._lines().starts)

    def problems(self) -> list[str]:
        idx = self._lines()
        if idx.torn:
            return [f"{self.path.name}: the last line is a truncated record (a writer was killed mid-write); "
                    f"the {len(idx.starts)} records before it are listed"]
        return []

    def _records(self, idx: _LineIndex, lo: int, hi: int) -> Iterator[tuple[int, dict[str, Any] | str]]:
        """(position, record or the reason it cannot be read) for positions lo..hi-1, read by offset."""
        if lo >= hi:
            return
        with open_in_run(self.path, self.root) as fh:
            fh.seek(int(idx.starts[lo]))
            for i in range(lo, hi):
                if fh.tell() != idx.starts[i]:
                    fh.seek(int(idx.starts[i]))
                raw = fh.read(int(idx.ends[i] - idx.starts[i]) + 1)
                try:
                    rec = json.loads(raw.decode("utf-8-sig"))
                except (ValueError, RecursionError) as e:
                    yield i, f"{self.path.name}:{idx.linenos[i]}: not a JSON record ({type(e).__name__}: {e})"
                    continue
                yield i, rec if isinstance(rec, dict) else f"{self.path.name}:{idx.linenos[i]}: not a JSON object"

    def page(self, start: int, n: int, flt: Filter) -> Page:
        idx = self._lines()
        total = len(idx.starts)
        start = max(0, min(start, total))
        rows: list[Row] = []
        hi = total if flt.active else min(total, start + n)
        hi = min(hi, start + max(n, flt.scan_limit))
        scanned = 0
        pos = start
        for pos, rec in self._records(idx, start, hi):
            scanned += 1
            row = summarize(pos, rec) if isinstance(rec, dict) else Row(pos, error=rec)
            if row.error and isinstance(rec, dict):
                row.error = f"{self.path.name}:{idx.linenos[pos]}: {row.error}"
            if flt.matches(row):
                rows.append(row)
                if len(rows) == n:
                    break
        end = start + scanned
        return Page(rows, start, end if end < total else None, total, scanned, self.problems())

    def episode(self, index: int) -> Trajectory:
        idx = self._lines()
        if not 0 <= index < len(idx.starts):
            raise EpisodeError(f"{self.path.name} has no episode {index} ({len(idx.starts)} episodes)")
        _, rec = next(self._records(idx, index, index + 1))
        if isinstance(rec, str):
            raise EpisodeError(rec)
        try:
            return record_to_trajectory(rec)
        except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as e:
            raise EpisodeError(f"{self.path.name}:{idx.linenos[index]}: not a trajectory record "
                               f"({type(e).__name__}: {e})") from e


# ------------------------------------------------------------------------------------------------ Parquet
LIGHT_COLUMNS = ["id", "source", "policy", "won", "total_reward", "task.id", "task.instruction",
                 "steps.list.element.reward"]


class ParquetSource:
    """A Parquet trajectory file (`dreamgym.data.write_parquet`), read with page checksum verification."""

    kind = "parquet"

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        self._rows: tuple[tuple[int, int], list[Row]] | None = None

    def _file(self) -> tuple[Any, tuple[int, int]]:
        """The file, read by Arrow with page checksums verified, and its (size, modification time)."""
        import pyarrow.parquet as pq

        source = arrow_file_in_run(self.path, self.root)
        try:
            st = os.fstat(source.fileno())
            return pq.ParquetFile(source, page_checksum_verification=True), (st.st_size, st.st_mtime_ns)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            source.close()
            raise EpisodeError(f"{self.path.name}: not a readable Parquet file ({type(e).__name__}: {e})") from e

    def _summary(self) -> list[Row]:
        import pyarrow.compute as pc

        pf, stamp = self._file()
        cached = self._rows
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            t = pf.read(columns=LIGHT_COLUMNS)
        except Exception as e:  # noqa: BLE001
            raise EpisodeError(f"{self.path.name}: cannot read the summary columns "
                               f"({type(e).__name__}: {e})") from e
        cols = {n: t.column(n).to_pylist() for n in ("id", "source", "policy", "won", "total_reward")}
        task = t.column("task").to_pylist()
        lengths = pc.list_value_length(t.column("steps")).to_pylist()
        rows = [Row(i, id=str(cols["id"][i] or ""), task_id=str((task[i] or {}).get("id") or ""),
                    instruction=str((task[i] or {}).get("instruction") or ""),
                    source=str(cols["source"][i] or "real"), policy=str(cols["policy"][i] or ""),
                    won=bool(cols["won"][i]), reward=float(cols["total_reward"][i] or 0.0),
                    steps=int(lengths[i] or 0)) for i in range(t.num_rows)]
        self._rows = (stamp, rows)
        return rows

    def count(self) -> int:
        return int(self._file()[0].metadata.num_rows)

    def page(self, start: int, n: int, flt: Filter) -> Page:
        try:
            rows = self._summary()
        except EpisodeError as e:
            return Page([], 0, None, 0, 0, [str(e)])
        start = max(0, min(start, len(rows)))
        out: list[Row] = []
        pos = start
        for pos in range(start, len(rows)):
            if flt.matches(rows[pos]):
                out.append(rows[pos])
                if len(out) == n:
                    pos += 1
                    break
        else:
            pos = len(rows)
        return Page(out, start, pos if pos < len(rows) else None, len(rows), pos - start)

    def episode(self, index: int) -> Trajectory:
        pf = self._file()[0]
        meta = pf.metadata
        if not 0 <= index < meta.num_rows:
            raise EpisodeError(f"{self.path.name} has no episode {index} ({meta.num_rows} episodes)")
        first = 0
        for g in range(pf.num_row_groups):
            n = meta.row_group(g).num_rows
            if index < first + n:
                break
            first += n
        seen = first
        try:
            for batch in pf.iter_batches(batch_size=64, row_groups=[g]):
                if index < seen + batch.num_rows:
                    return record_to_trajectory(batch.slice(index - seen, 1).to_pylist()[0])
                seen += batch.num_rows
        except (DataError, AttributeError, KeyError, TypeError, ValueError) as e:
            raise EpisodeError(f"{self.path.name}: row {index}: {type(e).__name__}: {e}") from e
        except Exception as e:  # noqa: BLE001 - a damaged page
            raise EpisodeError(f"{self.path.name}: row group {g}: damaged data ({type(e).__name__}: {e})") from e
        raise EpisodeError(f"{self.path.name}: row {index} not found")


# ------------------------------------------------------------------------------------------------ dream buffer
@dataclass
class _Node:
    line: int
    tid: str
    step: int
    state: str
    next_state: str
    done: bool
    parent: int = -1


class DreamSource:
    """The dream episodes of a run, chained back from the synthetic transitions its replay buffer holds
    (`<run>/buffer/<generation>/transitions.jsonl`, read without opening the buffer, which may be in use).

    The buffer stores transitions, not episodes: the members of a GRPO group share one trajectory id, identical
    transitions are stored once, and steps answered without the model (actions the state did not offer) are not
    stored. A transition's predecessor is the latest earlier transition of the same trajectory id at a lower step
    whose next state is its state; each transition without a successor ends one episode. Members that took the
    same first steps therefore share them, as they did in the dream."""

    kind = "dream buffer"

    def __init__(self, buffer_dir: Path, transitions: Path, root: Path):
        self.path = transitions
        self.buffer_dir, self.root = buffer_dir, root
        self._cache: tuple[tuple[int, int], list[list[int]], np.ndarray, list[str]] | None = None

    def _episodes(self) -> tuple[list[list[int]], np.ndarray, list[str]]:
        with open_in_run(self.path, self.root) as fh:
            st = os.fstat(fh.fileno())
            stamp = (st.st_size, st.st_mtime_ns)
            cache = self._cache
            if cache is None or cache[0] != stamp:
                cache = self._cache = (stamp, *self._build(fh))
        return cache[1], cache[2], cache[3]

    def _build(self, fh: BinaryIO) -> tuple[list[list[int]], np.ndarray, list[str]]:
        nodes: list[_Node] = []
        offsets: list[int] = []
        problems: list[str] = []
        by_tid: dict[str, list[int]] = {}
        pos, lineno = 0, 0
        for raw in fh:
            lineno += 1
            start, pos = pos, pos + len(raw)
            if b'"synthetic"' not in raw:  # the seed data and real transitions: not dream steps
                continue
            try:
                t = json.loads(raw)["t"]
                if t.get("source") != "synthetic":
                    continue
                node = _Node(lineno, str(t.get("trajectory_id", "")), int(t.get("step_index", 0)),
                             str(t["state"]), str(t["next_state"]), bool(t.get("done")))
            except (ValueError, KeyError, TypeError) as e:
                if raw.endswith(b"\n"):
                    problems.append(f"{self.path.name}:{lineno}: not a transition ({type(e).__name__})")
                continue
            group = by_tid.setdefault(node.tid, [])
            for j in reversed(group):
                prev = nodes[j]
                if prev.step < node.step and not prev.done and prev.next_state == node.state:
                    node.parent = j
                    break
            group.append(len(nodes))
            nodes.append(node)
            offsets.append(start)
        has_child = np.zeros(len(nodes), dtype=bool)
        for n in nodes:
            if n.parent >= 0:
                has_child[n.parent] = True
        episodes = []
        for i in range(len(nodes)):
            if not has_child[i]:
                chain = [i]
                while nodes[chain[-1]].parent >= 0:
                    chain.append(nodes[chain[-1]].parent)
                episodes.append(chain[::-1])
        return episodes, np.asarray(offsets, dtype=np.int64), problems

    def _transitions(self, chain: list[int], offsets: np.ndarray) -> list[dict[str, Any]]:
        out = []
        with open_in_run(self.path, self.root) as fh:
            for i in chain:
                fh.seek(int(offsets[i]))
                out.append(json.loads(fh.readline())["t"])
        return out

    def count(self) -> int:
        return len(self._episodes()[0])

    def _trajectory(self, index: int, ts: list[dict[str, Any]]) -> Trajectory:
        first, last = ts[0], ts[-1]
        steps = [Step(state=t["state"], action=t["action"], reward=float(t["reward"]), terminated=bool(t["done"]),
                      truncated=False, next_state=t["next_state"], info={"step_index": t.get("step_index", 0)},
                      reasoning=t.get("reasoning")) for t in ts]
        return Trajectory(task=Task.from_dict(first["task"]), steps=steps, source="synthetic", seed=first.get("seed"),
                          policy="dream", policy_version=str(first.get("policy_version", "")),
                          initial_state=first["state"], won=bool(last["done"]) and float(last["reward"]) >= 1.0,
                          start_time=float(first.get("time", 0.0)), id=f"{first.get('trajectory_id', '')}#{index}")

    def page(self, start: int, n: int, flt: Filter) -> Page:
        episodes, offsets, problems = self._episodes()
        start = max(0, min(start, len(episodes)))
        rows: list[Row] = []
        pos, scanned = start, 0
        while pos < len(episodes) and len(rows) < n and scanned < max(n, flt.scan_limit):
            traj = self._trajectory(pos, self._transitions(episodes[pos], offsets))
            row = Row(pos, id=traj.id, task_id=traj.task.id, instruction=traj.task.instruction, source="synthetic",
                      policy="dream", won=traj.won, reward=traj.total_reward, steps=len(traj.steps))
            if flt.matches(row):
                rows.append(row)
            pos += 1
            scanned += 1
        return Page(rows, start, pos if pos < len(episodes) else None, len(episodes), scanned, problems)

    def episode(self, index: int) -> Trajectory:
        episodes, offsets, _ = self._episodes()
        if not 0 <= index < len(episodes):
            raise EpisodeError(f"the replay buffer has no dream episode {index} ({len(episodes)} episodes)")
        try:
            return self._trajectory(index, self._transitions(episodes[index], offsets))
        except (ValueError, KeyError, TypeError) as e:
            raise EpisodeError(f"{self.path.name}: dream episode {index}: {type(e).__name__}: {e}") from e


def looks_like_trajectories(path: Path, root: Path) -> bool:
    """Whether a .jsonl/.parquet file of run folder `root` holds trajectory records (its first record or its schema
    says so)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            with arrow_file_in_run(path, root) as source:
                names = pq.ParquetFile(source).schema_arrow.names
        except Exception:  # noqa: BLE001 - a damaged file is listed, and its page says what is wrong
            return True
        return "steps" in names and "task" in names
    try:
        with open_in_run(path, root) as fh:
            head = fh.readline(1 << 20)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"steps"' in head and b'"task"' in head


def buffer_transitions(buffer_dir: Path, root: Path) -> Path | None:
    """The live generation's transitions file of a replay buffer folder in run folder `root`, or None."""
    try:
        with open_in_run(buffer_dir / "CURRENT", root) as fh:
            gen = fh.read(256).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    path = buffer_dir / gen / "transitions.jsonl"
    return path if gen.startswith("gen-") and "/" not in gen and path.is_file() else None


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
