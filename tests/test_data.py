"""Trajectory store: JSONL/Parquet round trips (incl. Hugging Face datasets), crash safety, chat/ShareGPT forms."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dreamgym.data import (DataError, JsonlWriter, TornTailError, append_jsonl, from_sharegpt,
                           load_trajectories, played_tasks, read_jsonl, read_parquet, read_sharegpt,
                           record_to_trajectory, tasks_played_in, to_chat_messages, to_sharegpt, trajectory_to_record,
                           write_jsonl, write_parquet)
from dreamgym.types import Step, Task, Trajectory


def make_traj(i: int, reasoning: bool = False) -> Trajectory:
    """Trajectories whose info dicts differ in keys and value types from step to step (hard for Arrow)."""
    task = Task(id=f"t{i}", env="dial", instruction=f"set the dial to {i % 10} and press submit",
                goal={"target": i % 10, "nested": {"opts": ["a", i], "price": 1.5}} if i % 2 else {},
                split="train", parent_id="t0" if i == 3 else None, iteration=2 if i == 3 else None)
    steps = []
    for j in range(1 + i % 3):
        info = [{"won": False}, {"r_type": 0.5, "attrs": ["x", "y"]}, {"code": j, "note": "ünï ☃"}][j % 3]
        steps.append(Step(state=f"[dial] {j}", action="turn up" if j < i % 3 else "submit",
                          reward=1.0 if j == i % 3 else 0.0, terminated=j == i % 3, truncated=False,
                          next_state=f"[dial] {j + 1}", info=info,
                          reasoning=f"because {j}" if reasoning and j == 0 else None))
    return Trajectory(task=task, steps=steps, source="synthetic" if i % 4 == 0 else "real",
                      seed=None if i == 5 else 1000 + i, policy="oracle", policy_version=f"v{i}",
                      initial_state="[dial] 0", won=i % 2 == 0, start_time=1700000000.25 + i,
                      wall_time_s=0.125 * i, id=f"traj-{i}")


TRAJS = [make_traj(i, reasoning=i % 2 == 1) for i in range(8)]


def test_jsonl_round_trip_preserves_every_field(tmp_path):
    p = tmp_path / "a.jsonl"
    assert append_jsonl(p, TRAJS[:5]) == 5
    assert append_jsonl(p, TRAJS[5:]) == 3  # appending keeps earlier records
    back = list(read_jsonl(p))
    assert [t.to_dict() for t in back] == [t.to_dict() for t in TRAJS]
    rec = json.loads(p.read_text().splitlines()[1])
    assert rec["messages"][0]["role"] == "system" and rec["messages"][1]["role"] == "user"
    assert isinstance(rec["task"]["goal_json"], str) and isinstance(rec["steps"][0]["info_json"], str)


def test_jsonl_parquet_datasets_round_trip(tmp_path):
    datasets = pytest.importorskip("datasets")
    j, pq = tmp_path / "a.jsonl", tmp_path / "a.parquet"
    write_jsonl(j, TRAJS)
    assert write_parquet(pq, read_jsonl(j)) == len(TRAJS)
    assert [t.to_dict() for t in read_parquet(pq)] == [t.to_dict() for t in TRAJS]
    assert [t.to_dict() for t in load_trajectories(pq)] == [t.to_dict() for t in TRAJS]
    for kind, f in (("parquet", pq), ("json", j)):
        ds = datasets.load_dataset(kind, data_files=str(f), split="train", cache_dir=str(tmp_path / "hf"))
        assert len(ds) == len(TRAJS)
        assert [record_to_trajectory(r).to_dict() for r in ds] == [t.to_dict() for t in TRAJS], kind
        assert ds[2]["messages"] == to_chat_messages(TRAJS[2])
    assert not list(tmp_path.glob(".a.parquet*"))  # no temp file left behind


def test_truncated_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    write_jsonl(p, TRAJS[:3])
    data = p.read_bytes()
    p.write_bytes(data[:-40])  # cut the last record
    with pytest.raises(TornTailError) as e:
        list(read_jsonl(p))
    assert f"{p}:3" in str(e.value) and "skip_torn_tail" in str(e.value)
    assert [t.id for t in read_jsonl(p, skip_torn_tail=True)] == ["traj-0", "traj-1"]


def test_corrupt_middle_line_and_bad_record_name_line(tmp_path):
    p = tmp_path / "c.jsonl"
    write_jsonl(p, TRAJS[:3])
    lines = p.read_text().splitlines(keepends=True)
    p.write_text(lines[0] + "{not json\n" + lines[2])
    with pytest.raises(DataError) as e:
        list(read_jsonl(p, skip_torn_tail=True))  # a bad middle line is never skipped
    assert f"{p}:2" in str(e.value) and not isinstance(e.value, TornTailError)
    p.write_text(lines[0] + "\n" + json.dumps({"task": {"id": "x"}, "steps": []}) + "\n")
    with pytest.raises(DataError, match=r"c\.jsonl:3: not a trajectory record"):
        list(read_jsonl(p))


def test_writer_sets_aside_torn_tail_before_appending(tmp_path):
    p = tmp_path / "w.jsonl"
    write_jsonl(p, TRAJS[:2])
    good = p.read_bytes()
    p.write_bytes(good + b'{"id": "half-writ')
    with JsonlWriter(p) as w:
        w.write(TRAJS[2])
    assert [t.id for t in read_jsonl(p)] == ["traj-0", "traj-1", "traj-2"]
    assert (tmp_path / "w.jsonl.torn").read_bytes() == b'{"id": "half-writ\n'
    # A complete last record that merely lacks its newline is kept, not set aside.
    p.write_bytes(good.rstrip(b"\n"))
    append_jsonl(p, [TRAJS[3]])
    assert [t.id for t in read_jsonl(p)] == ["traj-0", "traj-1", "traj-3"]


def test_killed_writer_loses_at_most_the_record_in_flight(tmp_path):
    p = tmp_path / "k.jsonl"
    code = textwrap.dedent(f"""
        import sys
        from dreamgym.data import JsonlWriter
        from dreamgym.types import Step, Task, Trajectory
        big = "x" * 200_000  # large records make a kill in the middle of a write likely
        with JsonlWriter({str(p)!r}) as w:
            i = 0
            while True:
                t = Trajectory(task=Task(id=str(i), env="e", instruction="i"),
                               steps=[Step(state=big, action="a", reward=0.0, terminated=True, truncated=False)],
                               id=str(i))
                w.write(t)
                print(i, flush=True)
                i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    last = -1
    while last < 20:
        last = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    ids = [int(t.id) for t in read_jsonl(p, skip_torn_tail=True)]
    assert ids == list(range(len(ids))) and len(ids) >= last + 1


def test_chat_messages_and_sharegpt_round_trip(tmp_path):
    t = TRAJS[1]
    msgs = to_chat_messages(t, system_prompt="sys", include_reasoning=True)
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * len(t.steps)
    assert msgs[1]["content"].startswith(f"Task: {t.task.instruction}") and t.steps[0].state in msgs[1]["content"]
    assert msgs[2]["content"] == f"<think>{t.steps[0].reasoning}</think>\n{t.steps[0].action}"
    assert to_chat_messages(t, system_prompt="")[0]["role"] == "user"

    back = from_sharegpt(to_sharegpt(t))
    assert back.task.instruction == t.task.instruction and back.task.env == "dial"
    assert [(s.state, s.action, s.reasoning) for s in back.steps] == [(s.state, s.action, s.reasoning)
                                                                       for s in t.steps]
    assert back.won == t.won and back.steps[-1].terminated

    rec = {"id": "ep1", "conversations": [
        {"from": "system", "value": "be helpful"},
        {"from": "human", "value": "Put a mug in the sink. You see a mug 1."},
        {"from": "gpt", "value": "Thought: I need the mug.\nAction: take mug 1"},
        {"from": "human", "value": "You pick up the mug 1."},
        {"from": "gpt", "value": "put mug 1 in sink 1"}], "reward": 1.0}
    tr = from_sharegpt(rec, env="alfworld")
    assert tr.task.env == "alfworld" and tr.task.goal == {"system": "be helpful"}
    assert [s.action for s in tr.steps] == ["take mug 1", "put mug 1 in sink 1"]
    assert tr.steps[0].reasoning == "I need the mug." and tr.steps[0].next_state == "You pick up the mug 1."
    assert tr.won and tr.total_reward == 1.0

    f = tmp_path / "s.json"
    f.write_text(json.dumps([rec, {"conversations": [{"from": "alien", "value": "?"}]}]))
    it = read_sharegpt(f)
    assert next(it).id == "ep1"
    with pytest.raises(DataError, match="record 1"):
        next(it)
    fj = tmp_path / "s.jsonl"
    fj.write_text(json.dumps(rec) + "\n" + json.dumps({"conversations": []}) + "\n")
    with pytest.raises(DataError, match=r"s\.jsonl:2"):
        list(read_sharegpt(fj))


def test_played_tasks_are_distinct_in_first_played_order(tmp_path):
    path = tmp_path / "t.parquet"
    write_parquet(path, [TRAJS[5], TRAJS[2], TRAJS[5], TRAJS[7], TRAJS[2]])
    assert [t.id for t in played_tasks(path)] == ["t5", "t2", "t7"]
    assert played_tasks(path)[0] == TRAJS[5].task


def test_tasks_played_in_keeps_the_callers_order_and_counts_the_file(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [TRAJS[5], TRAJS[2], TRAJS[5], TRAJS[7]])
    pool = [TRAJS[i].task for i in (1, 2, 3, 5)]
    kept, n_played = tasks_played_in(pool, path)
    assert [t.id for t in kept] == ["t2", "t5"]  # the pool's order, not the file's; t7 is not in the pool
    assert n_played == 3


def test_unknown_suffix_and_bad_parquet(tmp_path):
    with pytest.raises(ValueError, match="unknown trajectory file type"):
        load_trajectories(tmp_path / "x.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="bad.parquet"):
        list(read_parquet(bad))


def test_record_is_json_safe_with_numpy_info():
    np = pytest.importorskip("numpy")
    t = make_traj(2)
    t.steps[0].info = {"arr": np.arange(3), "x": np.float32(0.5)}
    rec = trajectory_to_record(t)
    assert json.loads(rec["steps"][0]["info_json"]) == {"arr": [0, 1, 2], "x": 0.5}


def test_a_trajectory_s_history_is_its_earlier_pairs_whole_or_windowed():
    steps = [Step(state=f"s{i}", action=f"a{i}", reward=0.0, terminated=False, truncated=False) for i in range(4)]
    traj = Trajectory(task=Task(id="t", env="dial", instruction="x"), steps=steps)
    assert traj.history(0) == [] and traj.history(3) == [("s0", "a0"), ("s1", "a1"), ("s2", "a2")]
    assert traj.history(3, 2) == [("s1", "a1"), ("s2", "a2")] and traj.history(3, 0) == []
    assert [t.history for t in traj.transitions(history=1)] == [[], *([p] for p in traj.history(3))]
