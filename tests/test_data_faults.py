"""Corrupted-file fixtures for every reader of data files: the trajectory store (JSONL, Parquet, ShareGPT JSON), the
replay buffer's directory and the curriculum's variance log. Each damage ends in `DataError` whose message names
the file and the position (line for line formats; footer, schema, row group and column or row for Parquet), never
in a raw OSError/ArrowInvalid/JSONDecodeError, a silent decode of damaged bytes, deleted data or an empty result."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.curriculum.generator import Curriculum, CurriculumConfig
from dreamgym.curriculum.pools import informative_task_ids
from dreamgym.data import (DataError, TornTailError, check_trajectory_file, load_trajectories, read_parquet,
                           read_sharegpt, write_jsonl, write_parquet)
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.envs.dial import make_tasks, parse_goal
from dreamgym.types import Step, Task, Trajectory, Transition


def traj(i: int) -> Trajectory:
    task = Task(id=f"t{i}", env="dial", instruction=f"set the dial to {i % 10}", goal={"target": i % 10})
    steps = [Step(state=f"[dial] {j} " + "x" * (i % 7), action="turn up", reward=float(j == 2), terminated=j == 2,
                  truncated=False, next_state=f"[dial] {j + 1}") for j in range(3)]
    return Trajectory(task=task, steps=steps, id=f"e{i}", seed=i, policy="oracle", start_time=0.0)


TRAJS = [traj(i) for i in range(40)]


def raises_data_error(fn, path, position: str):
    """Run `fn`, expect `DataError`; its message must start with the file, then the position."""
    with pytest.raises(DataError) as e:
        fn()
    msg = str(e.value)
    assert msg.startswith(str(path)), msg
    assert re.match(re.escape(str(path)) + position, msg), msg
    return msg


# ----------------------------------------------------------------------------------------------------- JSONL

def jsonl_with_line(tmp_path, line: bytes, at: int = 2):
    """A valid JSONL trajectory file of 5 records with line `at` (1-based) replaced by `line`."""
    p = tmp_path / "t.jsonl"
    write_jsonl(p, TRAJS[:5])
    lines = p.read_bytes().split(b"\n")
    lines[at - 1] = line
    p.write_bytes(b"\n".join(lines))
    return p


@pytest.mark.parametrize("line,reason", [
    (b'{"id": "e1", "task": {"id": "t\xff\xfe"}}', r"not UTF-8 text \(byte 0xff at column 31\)"),
    (b"\x00\x01garbage{", r"not valid JSON \(Expecting value at column 1\)"),
    (b'{"id": "e1", "task": ', r"not valid JSON \(Expecting value at column 23\)"),
    (b"[" * 100_000 + b"]" * 100_000, r"not valid JSON \(nested too deeply\)"),
    (b'{"id": "e1", "steps": []}', r"not a trajectory record: missing field 'task'"),
])
def test_a_bad_jsonl_line_in_the_middle_names_file_line_and_what_is_wrong(tmp_path, line, reason):
    p = jsonl_with_line(tmp_path, line, at=3)
    raises_data_error(lambda: load_trajectories(p), p, ":3: " + reason)
    # The start-up check of a config's files reads the same way (and keeps nothing).
    raises_data_error(lambda: check_trajectory_file(p), p, ":3: " + reason)


def test_missing_unreadable_and_empty_trajectory_files_are_data_errors(tmp_path):
    for suffix in (".jsonl", ".parquet"):
        missing = tmp_path / f"none{suffix}"
        raises_data_error(lambda missing=missing: load_trajectories(missing), missing, r": cannot read the file \(No such file")
        folder = tmp_path / f"dir{suffix}"
        folder.mkdir()
        raises_data_error(lambda folder=folder: load_trajectories(folder), folder, r": cannot read the file \(Is a directory")
    # Empty inputs: an empty JSONL file, one of blank lines, one whose only line is torn (skipped on request),
    # and a Parquet file of zero rows all hold no trajectory: an error, not an empty list that reports zeros. The
    # torn line ends inside a two-byte character, as a writer killed mid-record can leave it: it is a torn tail, not
    # a line that is not UTF-8.
    torn_line = '{"id": "é'.encode()[:-1]
    for name, content in (("empty.jsonl", b""), ("blank.jsonl", b"\n \n\t\n"), ("torn.jsonl", torn_line)):
        p = tmp_path / name
        p.write_bytes(content)
        raises_data_error(lambda p=p: load_trajectories(p, skip_torn_tail=True), p, r": holds no trajectories")
    p = tmp_path / "zero.parquet"
    assert write_parquet(p, []) == 0
    raises_data_error(lambda: load_trajectories(p), p, r": holds no trajectories")
    raises_data_error(lambda: check_trajectory_file(p), p, r": holds no trajectories")
    write_parquet(p, TRAJS)
    assert check_trajectory_file(p) == len(TRAJS)
    torn = tmp_path / "torn.jsonl"
    with pytest.raises(TornTailError, match=re.escape(f"{torn}:1: truncated record")):
        load_trajectories(torn)
    unknown = tmp_path / "t.csv"
    raises_data_error(lambda: load_trajectories(unknown), unknown, r": unknown trajectory file type '.csv'")


# ---------------------------------------------------------------------------------------------------- Parquet

def column_chunk(path, name: str) -> tuple[int, int, int]:
    """(first byte, first byte of the data page, end) of column `name`'s chunk in row group 0."""
    rg = pq.ParquetFile(path).metadata.row_group(0)
    for i in range(rg.num_columns):
        c = rg.column(i)
        if c.path_in_schema == name:
            start = c.dictionary_page_offset or c.data_page_offset
            return start, c.data_page_offset, start + c.total_compressed_size
    raise KeyError(name)


def test_a_truncated_parquet_file_names_the_footer(tmp_path):
    p = tmp_path / "t.parquet"
    write_parquet(p, TRAJS)
    data = p.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 3, 0):
        p.write_bytes(data[:cut])
        raises_data_error(lambda: list(read_parquet(p)), p, r": footer: not a readable Parquet file")


def test_bytes_cut_out_of_a_column_chunk_name_the_row_group_and_column(tmp_path):
    p = tmp_path / "t.parquet"
    write_parquet(p, TRAJS)
    data = p.read_bytes()
    start, page, end = column_chunk(p, "steps.list.element.action")
    # The footer is intact, so the file opens; the column chunk's bytes are shifted by the cut.
    p.write_bytes(data[:page + 4] + data[page + 12:])
    raises_data_error(lambda: list(read_parquet(p)), p, r": row group 0, column 'steps\.list\.element\.")


def test_a_flipped_bit_in_a_data_page_is_detected_by_the_page_checksum(tmp_path):
    """Without checksums some single-bit flips inside a zstd page decode into other values with no error. Every
    such flip in one column's data page is found by the checksum `write_parquet` writes and `read_parquet` checks,
    and is reported with its row group and column."""
    p = tmp_path / "t.parquet"
    write_parquet(p, TRAJS)
    data = p.read_bytes()
    good = pq.read_table(pa.BufferReader(data))
    silent = 0
    for name in ("id", "steps.list.element.state"):
        _, page, end = column_chunk(p, name)
        for off in range(page, end):
            bad = bytearray(data)
            bad[off] ^= 0x10
            try:  # what a reader that does not verify checksums gets
                decoded = pq.ParquetFile(pa.BufferReader(bytes(bad)), page_checksum_verification=False).read()
            except (OSError, ValueError, pa.ArrowException):
                continue
            if decoded.equals(good):
                continue  # a flip in a header field nothing reads
            silent += 1
            p.write_bytes(bytes(bad))
            msg = raises_data_error(lambda: list(read_parquet(p)), p, f": row group 0, column '{re.escape(name)}': ")
            assert "damaged data" in msg and "CRC" in msg, msg
    assert silent >= 10  # 92 of the 251 flips with pyarrow 26: the test exercises the case it is about
    # A file written without page checksums (an older dreamgym, another tool) still reads.
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(pa.BufferReader(data)), plain, compression="zstd")
    assert [t.id for t in read_parquet(plain)] == [t.id for t in TRAJS]


def test_a_parquet_file_of_another_schema_or_with_a_bad_row_names_schema_or_row(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["b"]}), other)
    raises_data_error(lambda: list(read_parquet(other)), other, r": schema: not a trajectory file: no column 'task', "
                      r"'steps' \(it has id, text\)")
    p = tmp_path / "t.parquet"
    write_parquet(p, TRAJS[:3])
    table = pq.read_table(p)
    tasks = table.column("task").to_pylist()
    tasks[1]["goal_json"] = "[not json"
    table = table.set_column(table.schema.get_field_index("task"), "task",
                             pa.array(tasks, type=table.schema.field("task").type))
    pq.write_table(table, p)
    raises_data_error(lambda: list(read_parquet(p)), p,
                      r": row group 0, row 1 \(row 1 of the file\): not a trajectory record: JSONDecodeError")


# ------------------------------------------------------------------------------------------- ShareGPT JSON

def test_sharegpt_json_errors_name_the_line(tmp_path):
    ep = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "go"}]}
    text = json.dumps([ep, ep], indent=1).encode()
    p = tmp_path / "s.json"
    p.write_bytes(text.replace(b'"go"', b'"g\xffo"', 1))
    line = text[: text.index(b'"go"')].count(b"\n") + 1
    raises_data_error(lambda: list(read_sharegpt(p)), p, f":{line}: not UTF-8 text")
    p.write_bytes(text[:-5])
    raises_data_error(lambda: list(read_sharegpt(p)), p, r":\d+: not valid JSON")
    raises_data_error(lambda: list(read_sharegpt(tmp_path / "none.json")), tmp_path / "none.json",
                      r": cannot read the file")


# -------------------------------------------------------------------------------------------- replay buffer

def buffer_dir(tmp_path):
    emb = HashingEmbedder(dim=32)
    trs = [Transition(task=make_tasks("train")[0], history=[], state=f"s{i}", action="turn up", next_state="n",
                      reward=0.0, done=False) for i in range(5)]
    with ReplayBuffer(tmp_path / "b", emb) as buf:
        buf.add(trs)
    return tmp_path / "b", emb


@pytest.mark.parametrize("content,position", [
    (b"", r":1: names '', not a generation"),
    (b"../../elsewhere", r":1: names '\.\./\.\./elsewhere', not a generation"),
    (b"gen-000007", r":1: names gen-000007, which is missing; the generations here are gen-000000"),
    (b"gen-\xff", r":1: not UTF-8 text"),
])
def test_a_damaged_buffer_current_file_stops_the_open_and_deletes_nothing(tmp_path, content, position):
    """CURRENT decides which generation survives the open (the others are removed as dead compactions): a
    damaged one must not make the open delete the live generation."""
    path, emb = buffer_dir(tmp_path)
    before = (path / "gen-000000" / "transitions.jsonl").read_bytes()
    (path / "CURRENT").write_bytes(content)
    raises_data_error(lambda: ReplayBuffer(path, emb), path / "CURRENT", position)
    assert (path / "gen-000000" / "transitions.jsonl").read_bytes() == before
    (path / "CURRENT").write_text("gen-000000")
    with ReplayBuffer(path, emb) as buf:  # the lock was released, the data is whole
        assert len(buf) == 5


@pytest.mark.parametrize("content,position", [
    (b'{"format": 1, "embedder": ', r":1: not valid JSON"),
    (b'{"format": 1, "embedder": "\xff"}', r": not a replay-buffer meta file \(UnicodeDecodeError"),
    (b"[1]", r": expected a JSON object, got list"),
])
def test_a_damaged_buffer_meta_file_is_a_data_error(tmp_path, content, position):
    path, emb = buffer_dir(tmp_path)
    (path / "meta.json").write_bytes(content)
    raises_data_error(lambda: ReplayBuffer(path, emb), path / "meta.json", position)


def test_an_unreadable_buffer_file_is_a_data_error(tmp_path):
    path, emb = buffer_dir(tmp_path)
    lines = path / "gen-000000" / "transitions.jsonl"
    lines.unlink()
    lines.mkdir()
    raises_data_error(lambda: ReplayBuffer(path, emb), lines, r": replay buffer file unusable \(Is a directory")


# --------------------------------------------------------------------------------------- curriculum log

@pytest.mark.parametrize("line,position", [
    (b"{garbage", r":2: not valid JSON"),
    (b'{"variance": [{"variance": 0.25}]}', r":2: not a curriculum log row \(KeyError"),
    (b'{"variance": 3}', r":2: not a curriculum log row \(TypeError"),
])
def test_a_damaged_curriculum_log_line_names_file_and_line(tmp_path, line, position):
    base = make_tasks("train")[:2]
    log = tmp_path / "curriculum.jsonl"
    cur = Curriculum(base, parse_goal, None, CurriculumConfig(enabled=False), log_path=log)
    for it in range(3):
        cur.update(it, {base[0].id: [1, 0]}, {t.id: t for t in base})
    lines = log.read_bytes().split(b"\n")
    lines[1] = line
    log.write_bytes(b"\n".join(lines))
    raises_data_error(lambda: informative_task_ids(log), log, position)
    raises_data_error(lambda: informative_task_ids(tmp_path / "none.jsonl"), tmp_path / "none.jsonl",
                      r": cannot read the file")



# ------------------------------------------------------------------------------------------------ commands

def _em_layout(em):
    """A checkpoint that passes eval-em's start-up check: em_config.json and one small whole weights file (its
    weights are never read as a model)."""
    import numpy as np
    from safetensors.numpy import save_file

    (em / "model").mkdir(parents=True, exist_ok=True)
    save_file({"w": np.zeros(2, dtype=np.float32)}, str(em / "model" / "model.safetensors"))
    (em / "em_config.json").write_text('{"env": "dial", "model": {}}')
    return em


def test_eval_em_refuses_an_empty_held_out_file_naming_it(tmp_path, capsys):
    """An empty held-out file used to give a fidelity report of zeros; now the command stops with exit code 2 and
    names the file, before any checkpoint or model is read."""
    from dreamgym.experience.fidelity import main

    held = tmp_path / "held.jsonl"
    held.write_bytes(b"")
    em = _em_layout(tmp_path / "em")
    assert main(["--env", "dial", "--model", str(em), "--data", str(held)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dreamgym eval-em: --data: ") and str(held) in err and "holds no trajectories" in err


# A damaged Parquet input once aborted the command after its one-line refusal (`terminate called without an active
# exception`, exit 134, in most train-em runs and some SFT/DPO runs, only with torch imported): Arrow's decode tasks
# on its thread pool outlived the failed read and released the file's Python-owned pages while the interpreter was
# shutting down. Every command that reads a trajectory file is run on damaged files, several times each.
def damaged_parquet_files(folder) -> dict[str, object]:
    """A trajectory file written as the package writes them, then damaged: a page header overwritten (the footer
    is intact, so the file opens and a column fails to decode), and the file cut in half (no footer)."""
    good = folder / "good.parquet"
    write_parquet(good, TRAJS)
    data = good.read_bytes()
    _, page, _ = column_chunk(good, "id")
    header = bytearray(data)
    header[page:page + 16] = b"\xff" * 16
    out = {"page header": folder / "header.parquet", "truncated": folder / "truncated.parquet"}
    out["page header"].write_bytes(bytes(header))
    out["truncated"].write_bytes(data[: len(data) // 2])
    return out


def _commands(data, tmp) -> dict[str, list[str]]:
    em = _em_layout(tmp / "em")
    common = ["--env", "dial", "--no-progress"]
    return {
        "train-em": ["train-em", "--env", "dial", "--data", str(data), "--out", str(tmp / "out-em")],
        "train --algo sft": ["train", "--algo", "sft", *common, f"data={data}", f"run_dir={tmp / 'sft'}"],
        "train --algo dpo": ["train", "--algo", "dpo", *common, f"data={data}", f"run_dir={tmp / 'dpo'}"],
        "train real_task_pool": ["train", "--algo", "grpo", *common, f"real_task_pool={data}",
                                 f"run_dir={tmp / 'grpo'}"],
        "eval-em": ["eval-em", "--env", "dial", "--model", str(em), "--data", str(data)],
        "eval --tasks-from": ["eval", "--env", "dial", "--policy", "tiny", "--tasks-from", str(data)],
    }


def _run_cli(args: list[str], cwd):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dreamgym.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _one_line_refusal(proc, data) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(data) in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "terminate called" not in proc.stderr


def test_every_command_refuses_a_damaged_parquet_file_in_one_line_and_exits_2_every_time(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    files = damaged_parquet_files(tmp_path)
    runs = [(name, args, files["page header"]) for name, args in _commands(files["page header"], tmp_path).items()]
    runs += [(name, args, files["truncated"]) for name, args in _commands(files["truncated"], tmp_path).items()
             if name == "train-em"]
    # train-em aborted in 7 of 10 runs: six more runs of it fail with probability > 0.999 if the abort is back.
    runs += [("train-em", _commands(files["page header"], tmp_path)["train-em"], files["page header"])] * 6
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda run: _run_cli(run[1], tmp_path), runs))
    for (name, _, data), proc in zip(runs, procs):
        try:
            _one_line_refusal(proc, data)
        except AssertionError as e:
            raise AssertionError(f"{name} on {data.name}: {e}") from None
