"""The trajectory store: JSONL and Parquet files of `Trajectory` records, chat export, ShareGPT import.

Owns: the on-disk record schema (one trajectory per record), crash-safe JSONL appends, atomic Parquet
writes, the OpenAI chat-message form used by SFT tools, and the ShareGPT-style import.
Must not know: environments, policies, models, torch, the replay buffer.

Record schema (identical in JSONL and Parquet, so JSONL -> Parquet -> `datasets` is lossless)::

    id, source ("real"|"synthetic"), seed, policy, policy_version, initial_state, won,
    start_time, wall_time_s, total_reward,
    task:  {id, env, instruction, goal_json, split, parent_id, iteration}
    steps: [{state, action, reward, terminated, truncated, next_state, info_json, reasoning}]
    messages: [{role, content}]          # derived: `to_chat_messages(traj)`, for SFT tools

`task.goal` and `step.info` are free-form dicts whose keys and value types differ between environments
and even between steps. Arrow (Parquet, `datasets`) needs one type per column, so both are stored as
JSON strings (`goal_json`, `info_json`); `record_to_trajectory` decodes them. This keeps every file
loadable with `datasets.load_dataset("json" | "parquet", data_files=...)` without a schema, and keeps
ints ints (Arrow would otherwise widen a column that mixes 1 and 0.5). Pass `features=hf_features()`
to `load_dataset("json", ...)` for very large JSONL files whose first block has only nulls in an
optional column (datasets infers the type from the first block). Readers also accept plain `goal` /
`info` dicts, so hand-written JSONL works.

Reading: every reader raises `DataError` (a ValueError) for a file it cannot use -- missing or unreadable, not
UTF-8, a line that is not JSON, a record without the schema's fields, a damaged Parquet file -- with the file and
the position in the message (`path:LINE: ...` for JSONL, `path: row group G, column C: ...` for Parquet), so a
command can print it as it is. Parquet files are written with page checksums (CRC-32 of every page) and read
with checksum verification: a flipped bit inside a zstd-compressed page can decode without error into other
values (69 of 765 flips, one in every third byte of a 50-episode file's pages, did), and the checksum turns each
into an error. Files written before checksums are read as before (a page without a checksum is not verified).
Parquet is read through Arrow's own file (`pyarrow.OSFile`), never a Python file object: through one, the pages
Arrow reads are Python objects, and Arrow's I/O and decode threads, still winding down after a damaged page was
reported, released the last of them while the interpreter was shutting down; taking the GIL then ended such a
thread inside a C++ destructor and the process aborted (`terminate called without an active exception`, exit 134)
after the right message.
`load_trajectories`, which commands use for their inputs, refuses a file that holds no trajectories; the
streaming readers yield nothing for one (an output being resumed may be empty).

Crash safety: `JsonlWriter` appends one record per `write` and fsyncs each (`dreamgym.utils.jsonl`), so a killed
writer loses at most the record it was writing; the torn line it leaves raises `TornTailError` on read (never
reads as valid) and is set aside (to `<file>.torn`) by the next writer before it appends. Whole files (Parquet,
`write_jsonl`) are written to a temporary file and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from dreamgym.utils.jsonl import JsonlAppender
from dreamgym.utils.paths import atomic_write_bytes, check_replaceable, crash_point
from dreamgym.types import Source, Step, Task, Trajectory, _jsonable

DEFAULT_SYSTEM_PROMPT = ("You are an agent acting in a text environment. Each user turn shows the current "
                         "state; answer with exactly one action.")


class DataError(ValueError):
    """A data file cannot be used. The message starts with the file and the position: `path:LINE: reason` for a
    line (an int `position`), `path: POSITION: reason` for another position (Parquet's "row group 0, column
    'task.id'"), `path: reason` when the file as a whole is at fault (missing, empty, not the format)."""

    def __init__(self, path: str | Path, position: int | str | None, reason: str):
        self.path, self.position, self.reason = str(path), position, reason
        self.line = position if isinstance(position, int) else None
        if isinstance(position, int):
            where = f"{path}:{position}"
        else:
            where = f"{path}: {position}" if position else str(path)
        super().__init__(f"{where}: {reason}")


class TornTailError(DataError):
    """The last line of a JSONL file is incomplete (a writer was killed mid-record)."""


# What a record that does not fit the schema raises while it is decoded (a missing field, a list where an object
# belongs, a goal_json nested deeper than the JSON decoder's recursion limit).
_RECORD_ERRORS = (AttributeError, KeyError, TypeError, ValueError, RecursionError)


def _record_problem(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str) and e.args[0].isidentifier():
        return f"missing field {e.args[0]!r}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return f"{type(e).__name__}: {e}"


def _unreadable(path: str | Path, e: OSError) -> DataError:
    return DataError(path, None, f"cannot read the file ({e.strerror or e})")


# --------------------------------------------------------------------------------------------- records

def trajectory_to_record(traj: Trajectory, messages: bool = True) -> dict[str, Any]:
    """The flat, Arrow-friendly record for one trajectory (see the module docstring for the schema)."""
    t = traj.task
    rec: dict[str, Any] = {
        "id": traj.id,
        "source": traj.source,
        "seed": None if traj.seed is None else int(traj.seed),
        "policy": traj.policy,
        "policy_version": str(traj.policy_version),
        "initial_state": traj.initial_state,
        "won": bool(traj.won),
        "start_time": float(traj.start_time),
        "wall_time_s": float(traj.wall_time_s),
        "total_reward": traj.total_reward,
        "task": {"id": t.id, "env": t.env, "instruction": t.instruction,
                 "goal_json": _dump(t.goal), "split": t.split, "parent_id": t.parent_id,
                 "iteration": None if t.iteration is None else int(t.iteration)},
        "steps": [{"state": s.state, "action": s.action, "reward": float(s.reward),
                   "terminated": bool(s.terminated), "truncated": bool(s.truncated),
                   "next_state": s.next_state, "info_json": _dump(s.info), "reasoning": s.reasoning}
                  for s in traj.steps],
    }
    if messages:
        rec["messages"] = to_chat_messages(traj)
    return rec


def record_to_trajectory(rec: dict[str, Any]) -> Trajectory:
    """Inverse of `trajectory_to_record`; also accepts `Trajectory.to_dict()` output (plain dicts)."""
    task = dict(rec["task"])
    task["goal"] = _load_json_field(task, "goal")
    steps = []
    for s in rec["steps"]:
        s = dict(s)
        s["info"] = _load_json_field(s, "info")
        steps.append(s)
    d = {k: v for k, v in rec.items() if k not in ("messages", "task", "steps", "total_reward")}
    d["task"], d["steps"] = task, steps
    return Trajectory.from_dict(d)


def _dump(value: Any) -> str:
    return json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=True)


def _load_json_field(d: dict[str, Any], name: str) -> dict[str, Any]:
    raw = d.pop(name + "_json", None)
    if raw is None:
        value = d.get(name) or {}
    else:
        value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _arrow_schema():
    import pyarrow as pa

    task = pa.struct([("id", pa.string()), ("env", pa.string()), ("instruction", pa.string()),
                      ("goal_json", pa.string()), ("split", pa.string()), ("parent_id", pa.string()),
                      ("iteration", pa.int64())])
    step = pa.struct([("state", pa.string()), ("action", pa.string()), ("reward", pa.float64()),
                      ("terminated", pa.bool_()), ("truncated", pa.bool_()), ("next_state", pa.string()),
                      ("info_json", pa.string()), ("reasoning", pa.string())])
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema([("id", pa.string()), ("source", pa.string()), ("seed", pa.int64()),
                      ("policy", pa.string()), ("policy_version", pa.string()),
                      ("initial_state", pa.string()), ("won", pa.bool_()), ("start_time", pa.float64()),
                      ("wall_time_s", pa.float64()), ("total_reward", pa.float64()), ("task", task),
                      ("steps", pa.list_(step)), ("messages", pa.list_(message))])


def hf_features():
    """`datasets.Features` of a trajectory record, for `load_dataset("json", ..., features=hf_features())`."""
    import datasets

    return datasets.Features.from_arrow_schema(_arrow_schema())


# ----------------------------------------------------------------------------------------------- JSONL

class JsonlWriter(JsonlAppender):
    """Append trajectories to a JSONL file, one fsynced record per line, after applying the torn-tail rule to what
    is there (`dreamgym.utils.jsonl`: a torn last line is set aside to `<path>.torn` and cut off; a final line that
    parses but lacks its newline just gets the newline). Use as a context manager."""

    def __init__(self, path: str | Path, messages: bool = True):
        super().__init__(path)
        self.messages = messages
        self.count = 0

    def write(self, traj: Trajectory) -> None:
        self.write_record(trajectory_to_record(traj, self.messages))

    def write_record(self, record: dict[str, Any]) -> None:
        """Append one JSON object as a line (what `write` does for a trajectory's record; other logs use it too)."""
        self.append(record)
        self.count += 1

    def write_many(self, trajectories: Iterable[Trajectory]) -> int:
        n = 0
        for t in trajectories:
            self.write(t)
            n += 1
        return n

    def __enter__(self) -> JsonlWriter:
        return self


def append_jsonl(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Append trajectories to `path` (created if missing); returns how many were written."""
    with JsonlWriter(path) as w:
        return w.write_many(trajectories)


def write_jsonl(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write a whole JSONL file atomically (temp file + rename), replacing any existing one."""
    lines = [json.dumps(trajectory_to_record(t), ensure_ascii=False) + "\n" for t in trajectories]
    atomic_write_bytes(path, "".join(lines).encode("utf-8"))
    return len(lines)


def iter_jsonl_records(path: str | Path, skip_torn_tail: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, parsed JSON object) for each non-blank line. A file that cannot be read, a line that is
    not UTF-8 or not a JSON object raises `DataError` naming the file and line; a torn final line (no newline and
    not parseable: a killed writer) raises `TornTailError`, or ends the records with `skip_torn_tail=True`."""
    path = Path(path)
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise _unreadable(path, e) from e
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline()
            except OSError as e:
                raise DataError(path, lineno + 1, f"cannot read the file ({e.strerror or e})") from e
            if not raw:
                return
            lineno += 1
            if not raw.strip():
                continue
            try:
                # utf-8-sig: a byte-order mark some editors put first is not part of the record (json.loads of
                # bytes, which this reader used before, skipped it too).
                obj = json.loads(raw.decode("utf-8-sig"))
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                if not raw.endswith(b"\n"):  # only the file's last line can lack its newline
                    if skip_torn_tail:
                        return
                    raise TornTailError(path, lineno, "truncated record at the end of the file (a writer was "
                                        "probably killed mid-write); read with skip_torn_tail=True to recover "
                                        f"the {lineno - 1} lines before it") from e
                raise DataError(path, lineno, _json_problem(e)) from e
            if not isinstance(obj, dict):
                raise DataError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _not_utf8(e: UnicodeDecodeError) -> tuple[int, str]:
    """(line, reason) of the first byte that is not UTF-8; the column counts characters, as editors do."""
    data = bytes(e.object)  # the bytes decoded: without a byte-order mark, so e.start indexes them
    start = data.rfind(b"\n", 0, e.start) + 1
    column = len(data[start:e.start].decode("utf-8")) + 1
    return data.count(b"\n", 0, e.start) + 1, f"not UTF-8 text (byte 0x{data[e.start]:02x} at column {column})"


def _json_problem(e: BaseException) -> str:
    if isinstance(e, UnicodeDecodeError):
        return _not_utf8(e)[1]
    if isinstance(e, json.JSONDecodeError):
        return f"not valid JSON ({e.msg} at column {e.pos + 1})"  # e.colno restarts after a newline
    if isinstance(e, RecursionError):
        return "not valid JSON (nested too deeply)"
    return f"not valid JSON ({e})"


def read_jsonl(path: str | Path, skip_torn_tail: bool = False) -> Iterator[Trajectory]:
    """Stream trajectories from a JSONL file. A corrupt line raises `DataError` naming the file and line; a torn
    final line raises `TornTailError` unless `skip_torn_tail=True`."""
    for lineno, rec in iter_jsonl_records(path, skip_torn_tail=skip_torn_tail):
        try:
            traj = record_to_trajectory(rec)
        except _RECORD_ERRORS as e:
            raise DataError(path, lineno, f"not a trajectory record: {_record_problem(e)}") from e
        yield traj


# --------------------------------------------------------------------------------------------- Parquet

def write_parquet(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories to a Parquet file atomically (temp file in the same directory, then rename)."""
    check_replaceable(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [trajectory_to_record(t) for t in trajectories]
    table = pa.Table.from_pylist(rows, schema=_arrow_schema())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Page checksums: `read_parquet` verifies them, so a damaged page is an error, not other values.
        pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        crash_point("parquet.replace")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(rows)


def read_parquet(path: str | Path) -> Iterator[Trajectory]:
    """Stream trajectories from a Parquet file written by `write_parquet` (or any file with that schema), verifying
    page checksums where the file has them. A file that cannot be read, is not Parquet, lacks the schema's columns
    or has a damaged page raises `DataError` naming the file and the row group and column (or row) at fault."""
    import pyarrow.parquet as pq

    path = Path(path)
    arrow_errors = _arrow_errors()
    with _arrow_file(path) as fh:
        try:
            pf = pq.ParquetFile(fh, page_checksum_verification=True)
        except arrow_errors as e:
            raise DataError(path, "footer", f"not a readable Parquet file: {_arrow_problem(e)}") from e
        missing = [c for c in ("task", "steps") if c not in pf.schema_arrow.names]
        if missing:
            raise DataError(path, "schema", f"not a trajectory file: no column {', '.join(map(repr, missing))} "
                            f"(it has {', '.join(pf.schema_arrow.names)})")
        row = 0
        for group in range(pf.num_row_groups):
            batches = pf.iter_batches(batch_size=256, row_groups=[group])
            first = row
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except arrow_errors as e:
                    raise DataError(path, _damaged_column(path, group),
                                    f"damaged data: {_arrow_problem(e)}") from e
                for rec in batch.to_pylist():
                    try:
                        traj = record_to_trajectory(rec)
                    except _RECORD_ERRORS as e:
                        raise DataError(path, f"row group {group}, row {row - first} (row {row} of the file)",
                                        f"not a trajectory record: {_record_problem(e)}") from e
                    row += 1
                    yield traj


def _arrow_file(path: Path) -> Any:
    """`path` opened by Arrow itself (see the module docstring for why not by Python); a file that cannot be opened
    raises `DataError` with the operating system's reason, as the JSONL reader's."""
    import pyarrow as pa

    try:
        with open(path, "rb"):  # for the OS's own words (no such file, a folder, no permission)
            pass
        return pa.OSFile(str(path))
    except OSError as e:
        raise _unreadable(path, e) from e


def _arrow_errors() -> tuple[type[BaseException], ...]:
    import pyarrow as pa

    # pyarrow reports a bad file as ArrowInvalid (a ValueError), ArrowException subclasses, or a plain OSError
    # (failed decompression, an undecodable page header, a checksum mismatch).
    return (pa.ArrowException, OSError, ValueError)


def _arrow_problem(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _damaged_column(path: Path, group: int) -> str:
    """Which column of row group `group` fails to read, read one column at a time from a fresh reader (only on the
    error path: a whole-row-group read does not say which column it was decoding)."""
    import pyarrow.parquet as pq

    try:
        with _arrow_file(path) as fh:
            pf = pq.ParquetFile(fh, page_checksum_verification=True)
            for i in range(pf.metadata.num_columns):
                try:
                    pf.reader.read_row_group(group, column_indices=[i])
                except _arrow_errors():
                    return f"row group {group}, column {pf.schema.column(i).path!r}"
    except (OSError, ValueError):
        pass
    return f"row group {group}"


def _read_by_suffix(path: Path, skip_torn_tail: bool) -> Iterator[Trajectory]:
    if path.suffix == ".parquet":
        return read_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return read_jsonl(path, skip_torn_tail=skip_torn_tail)
    raise DataError(path, None, f"unknown trajectory file type {path.suffix!r} (expected .jsonl or .parquet)")


def _no_trajectories(path: Path) -> DataError:
    # An input without data would train on nothing or report zeros.
    return DataError(path, None, "holds no trajectories (an empty file, or only blank lines)")


def load_trajectories(path: str | Path, skip_torn_tail: bool = False) -> list[Trajectory]:
    """Load a whole trajectory file, choosing the reader by suffix (.jsonl/.json lines, .parquet). Raises
    `DataError` naming the file (and the position) when it cannot be read or holds no trajectory."""
    path = Path(path)
    trajs = list(_read_by_suffix(path, skip_torn_tail))
    if not trajs:
        raise _no_trajectories(path)
    return trajs


def first_trajectory(path: str | Path) -> Trajectory:
    """The first trajectory of a file, read by the readers `load_trajectories` uses, which stop there and close it;
    raises their `DataError`s (unknown file type, a damaged first record) and one when the file holds none. The
    cheap start-up check of a file a config names: the rest is read when the run needs it."""
    path = Path(path)
    records = _read_by_suffix(path, skip_torn_tail=False)
    try:
        first = next(records, None)
    finally:
        records.close()  # type: ignore[attr-defined]  # the readers are generators
    if first is None:
        raise _no_trajectories(path)
    return first


def check_trajectory_file(path: str | Path, family: str | None = None) -> int:
    """Read a trajectory file as `load_trajectories` does, keeping nothing, and return how many trajectories it
    holds; raises the same `DataError`s. For checking the files a config names before any model loads. With
    `family`, a record whose task names another environment family (`Task.env`) is refused too, naming the record."""
    path = Path(path)
    n = 0
    for traj in _read_by_suffix(path, skip_torn_tail=False):
        n += 1
        if family is not None and traj.task.env != family:
            raise DataError(path, f"record {n} (task {traj.task.id!r})",
                            f"a task of environment family {traj.task.env!r}, not {family!r}")
    if n == 0:
        raise _no_trajectories(path)
    return n


def played_tasks(path: str | Path) -> list[Task]:
    """The distinct tasks a trajectory file's episodes played, in first-played order (e.g. the games offline data
    covers, which a dream with `task_pool=data` plays)."""
    seen: dict[str, Task] = {}
    for traj in load_trajectories(path):
        seen.setdefault(traj.task.id, traj.task)
    return list(seen.values())


def tasks_played_in(tasks: Sequence[Task], path: str | Path) -> tuple[list[Task], int]:
    """The tasks of `tasks` (in their order) that the trajectory file at `path` played, and how many distinct tasks
    that file played in all (so a caller can say why nothing matched: another split, another environment)."""
    played = {t.id for t in played_tasks(path)}
    return [t for t in tasks if t.id in played], len(played)


def convert(src: str | Path, dst: str | Path) -> int:
    """Copy a trajectory file to another format (by suffix); the destination is written atomically."""
    trajs = load_trajectories(src)
    return write_parquet(dst, trajs) if Path(dst).suffix == ".parquet" else write_jsonl(dst, trajs)


# ------------------------------------------------------------------------------------------ chat forms

def _user_turn(traj: Trajectory, i: int) -> str:
    state = traj.steps[i].state
    return f"Task: {traj.task.instruction}\n\nState:\n{state}" if i == 0 else f"State:\n{state}"


def to_chat_messages(traj: Trajectory, system_prompt: str | None = None,
                     include_reasoning: bool = False) -> list[dict[str, str]]:
    """OpenAI chat form of an episode: system, then per step a user turn (task + state on the first turn,
    the state afterwards) and an assistant turn (the action).

    `system_prompt=None` uses `DEFAULT_SYSTEM_PROMPT`; `""` leaves the system turn out. With
    `include_reasoning`, a step's `reasoning` is put before the action as `<think>...</think>`. Off by
    default because in DreamGym data `Step.reasoning` is usually the experience model's explanation of the
    transition, not the agent's own thinking.
    """
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    msgs: list[dict[str, str]] = [{"role": "system", "content": prompt}] if prompt else []
    for i, step in enumerate(traj.steps):
        msgs.append({"role": "user", "content": _user_turn(traj, i)})
        content = step.action
        if include_reasoning and step.reasoning:
            content = f"<think>{step.reasoning}</think>\n{step.action}"
        msgs.append({"role": "assistant", "content": content})
    return msgs


def to_sharegpt(traj: Trajectory, system_prompt: str | None = None) -> dict[str, Any]:
    """ShareGPT form (`conversations: [{from, value}]`) of an episode, with id, env, reward and won."""
    roles = {"system": "system", "user": "human", "assistant": "gpt"}
    conv = [{"from": roles[m["role"]], "value": m["content"]}
            for m in to_chat_messages(traj, system_prompt, include_reasoning=True)]
    return {"id": traj.id, "env": traj.task.env, "conversations": conv, "reward": traj.total_reward,
            "won": traj.won}


_FROM = {"human": "human", "user": "human", "gpt": "gpt", "assistant": "gpt", "chatgpt": "gpt",
         "bing": "gpt", "bard": "gpt", "model": "gpt", "system": "system", "observation": "human",
         "function": "human", "tool": "human", "function_call": "gpt"}
_OURS = re.compile(r"\ATask: (.*?)\n\nState:\n(.*)\Z", re.S)
_REASONED = [re.compile(r"\A\s*<think>(.*?)</think>\s*(.*)\Z", re.S),
             re.compile(r"\A\s*Thought:\s*(.*?)\n\s*Action:\s*(.*)\Z", re.S),   # ReAct
             re.compile(r"\A\s*Think:\s*(.*?)\n\s*Act:\s*(.*)\Z", re.S)]        # AgentInstruct


def _split_reasoning(text: str) -> tuple[str | None, str]:
    for pat in _REASONED:
        m = pat.match(text)
        if m:
            return m.group(1).strip(), m.group(2).strip()
    return None, text.strip()


def from_sharegpt(record: dict[str, Any], env: str | None = None, source: str = "real") -> Trajectory:
    """Import one ShareGPT-style agent episode: `{"conversations": [{"from": human|gpt|system, "value"}]}`.

    Mapping (documented choice; the format has no states or rewards of its own):
    - each `gpt` turn is a step's action; the `human` turn(s) before it are its state, the next `human`
      turn its next state; `system` turns go to `task.goal["system"]`.
    - reasoning in the gpt turn is split off when written as `<think>..</think>`, ReAct `Thought:/Action:`
      or AgentInstruct `Think:/Act:`.
    - the instruction is the first human turn (for our own export, its `Task:` line).
    - the episode ends at the last gpt turn (terminated). A top-level `reward`/`score` (float) becomes the
      final step's reward; `won`/`success` (bool) or reward >= 1 sets `won`.
    - `env` names the environment family; default: the record's `env` key, else "sharegpt".
    Also accepts `messages: [{role, content}]` (OpenAI form). Raises ValueError on malformed input.
    """
    conv = record.get("conversations", record.get("messages"))
    if not isinstance(conv, list) or not conv:
        raise ValueError("record has no 'conversations' list")
    turns: list[tuple[str, str]] = []
    for j, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise ValueError(f"conversation turn {j} is not an object")
        who = str(turn.get("from", turn.get("role", ""))).lower()
        value = turn.get("value", turn.get("content"))
        if who not in _FROM or not isinstance(value, str):
            raise ValueError(f"conversation turn {j}: unknown speaker {who!r} or non-text value")
        turns.append((_FROM[who], value))
    system = "\n".join(v for w, v in turns if w == "system")
    turns = [(w, v) for w, v in turns if w != "system"]
    if not any(w == "gpt" for w, _ in turns):
        raise ValueError("conversation has no gpt/assistant turn (no actions)")

    instruction = ""
    pending: list[str] = []   # human text since the last action
    pairs: list[tuple[str, str]] = []
    for w, v in turns:
        if w == "human":
            if not pairs and not pending:
                m = _OURS.match(v)
                if m:
                    instruction, v = m.group(1), m.group(2)
                else:
                    instruction = v.strip()
            elif v.startswith("State:\n"):
                v = v[len("State:\n"):]
            pending.append(v)
        else:
            pairs.append(("\n".join(pending), v))
            pending = []
    trailing = "\n".join(pending)

    reward = record.get("reward", record.get("score"))
    reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
    won_flag = record.get("won", record.get("success"))
    won = bool(won_flag) if isinstance(won_flag, bool) else (reward is not None and reward >= 1.0)

    steps = []
    for i, (state, gpt) in enumerate(pairs):
        last = i == len(pairs) - 1
        reasoning, action = _split_reasoning(gpt)
        next_state = pairs[i + 1][0] if not last else trailing
        steps.append(Step(state=state, action=action, reward=(reward or 0.0) if last else 0.0,
                          terminated=last, truncated=False, next_state=next_state, reasoning=reasoning))
    rid = str(record.get("id") or hashlib.blake2b(json.dumps(conv, sort_keys=True).encode(),
                                                   digest_size=8).hexdigest())
    goal = {"system": system} if system else {}
    env = env or str(record.get("env") or "sharegpt")
    task = Task(id=f"{env}-{rid}", env=env, instruction=instruction, goal=goal)
    if source not in ("real", "synthetic"):
        raise ValueError(f"source must be 'real' or 'synthetic', got {source!r}")
    return Trajectory(task=task, steps=steps, source=cast(Source, source),  # validated just above
                      policy=str(record.get("model", "sharegpt")), initial_state=steps[0].state, won=won,
                      start_time=0.0, id=rid)


def read_sharegpt(path: str | Path, env: str | None = None) -> Iterator[Trajectory]:
    """Read ShareGPT episodes from a JSON file (a list, or {"data": [...]}) or a JSONL file (one per line).
    A file that cannot be read or a malformed episode raises `DataError` naming the file and line (JSONL) or
    record index."""
    path = Path(path)
    if path.suffix == ".jsonl":
        for lineno, rec in iter_jsonl_records(path):
            try:
                traj = from_sharegpt(rec, env=env)
            except _RECORD_ERRORS as e:
                raise DataError(path, lineno, f"not a ShareGPT episode: {e}") from e
            yield traj
        return
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _unreadable(path, e) from e
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise DataError(path, *_not_utf8(e)) from e
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, f"not valid JSON ({e.msg} at column {e.colno})") from e
    except (ValueError, RecursionError) as e:
        raise DataError(path, None, _json_problem(e)) from e
    if isinstance(data, dict):
        data = data.get("data", [data])
    if not isinstance(data, list):
        raise DataError(path, None, "expected a list of ShareGPT episodes")
    for j, rec in enumerate(data):
        try:
            traj = from_sharegpt(rec, env=env)
        except _RECORD_ERRORS as e:
            raise DataError(path, f"record {j}", f"not a ShareGPT episode: {e}") from e
        yield traj
