"""The generic collector on the dial family: episodes, policy mix, failure isolation, resume, CLI."""

from __future__ import annotations

import json

import pytest

from dreamgym.commands import collect as C
from dreamgym.data import load_trajectories, read_jsonl
from dreamgym.envs import dial


def _content(trajs):
    """What must be reproducible: everything except wall-clock timing."""
    return [(t.id, t.policy, t.seed, t.task.id, t.won, [(s.state, s.action, s.reward, s.next_state)
                                                      for s in t.steps]) for t in trajs]


def test_run_episode_records_a_consistent_trajectory():
    env = dial.make_env("train")
    task = dial.tasks("train")[0]
    t = C.run_episode(env, dial.POLICIES["oracle"](3), seed=3, task=task, policy_name="oracle", traj_id="x")
    target, start = task.goal["target"], task.goal["start"]
    assert t.won and t.total_reward == 1.0 and t.task.id == task.id and t.source == "real" and t.seed == 3
    assert len(t.steps) == abs(target - start) + 1 and t.steps[-1].action == "submit"
    assert t.initial_state == t.steps[0].state == dial.abstract_state(start)
    for a, b in zip(t.steps, t.steps[1:]):
        assert a.next_state == b.state and not (a.terminated or a.truncated)
    assert t.steps[-1].terminated and t.steps[-1].info["won"] is True
    assert "task" not in t.steps[0].info and "abstract_state" not in t.steps[0].info
    assert t.wall_time_s > 0 and t.start_time > 0


class _ExplodingDial(dial.DialEnv):
    def _step(self, action):
        if action == "explode":
            raise RuntimeError("boom")
        return super()._step(action)


class _Exploder:
    def __init__(self, seed):
        pass

    def reset(self, task, obs, info):
        pass

    def act(self, obs, info):
        return "explode"


class _CrashyPolicy(dial.ExpertPolicy):
    """Crashes on odd seeds after one step: half its episodes fail inside the policy."""

    def __init__(self, seed):
        super().__init__(seed)
        self.seed, self.n = seed, 0

    def act(self, obs, info):
        self.n += 1
        if self.seed % 2 and self.n > 1:
            raise ValueError("policy bug")
        return super().act(obs, info)


def test_env_and_policy_failures_are_isolated(tmp_path, monkeypatch):
    with pytest.raises(C.EpisodeFailed) as e:
        C.run_episode(_ExplodingDial(), _Exploder(0), seed=0)
    assert e.value.stage == "env" and "boom" in e.value.reason

    monkeypatch.setitem(dial.POLICIES, "crashy", _CrashyPolicy)
    out = tmp_path / "c.jsonl"
    s = C.collect("dial", {"crashy": 1, "oracle": 1}, 40, out, progress=False)
    crashy = s["per_policy"]["crashy"]
    assert crashy["failed"] > 0 and crashy["episodes"] > 0 and crashy["episodes"] + crashy["failed"] == 20
    assert s["per_policy"]["oracle"] == {**s["per_policy"]["oracle"], "episodes": 20, "failed": 0,
                                         "success_rate": 1.0}
    trajs = list(read_jsonl(out))
    assert len(trajs) == s["episodes"] == 40 - s["failed"]
    assert all("policy bug" in f["reason"] and f["policy"] == "crashy" for f in s["failures"])
    assert json.loads((tmp_path / "c.jsonl.summary.json").read_text())["failed"] == s["failed"]


def test_collect_mix_counts_success_and_determinism(tmp_path):
    mix = C.parse_mix("oracle:0.5,noisy:0.3,random:0.2")
    s = C.collect("dial", mix, 50, tmp_path / "a.jsonl", seed=7, progress=False)
    per = s["per_policy"]
    assert {p: v["episodes"] for p, v in per.items()} == {"oracle": 25, "noisy": 15, "random": 10}
    assert per["oracle"]["success_rate"] == 1.0 and per["random"]["success_rate"] < 0.5
    trajs = list(read_jsonl(tmp_path / "a.jsonl"))
    assert len({t.id for t in trajs}) == 50 and {t.task.split for t in trajs} == {"train"}
    assert len({t.task.id for t in trajs}) == 50  # the task cycle spreads episodes over the pool
    assert all(t.policy_version.startswith("scripted:dreamgym.envs.dial.") for t in trajs)
    C.collect("dial", mix, 50, tmp_path / "b.jsonl", seed=7, progress=False)
    assert _content(read_jsonl(tmp_path / "b.jsonl")) == _content(trajs)
    C.collect("dial", mix, 50, tmp_path / "c.jsonl", seed=8, progress=False)
    assert _content(read_jsonl(tmp_path / "c.jsonl")) != _content(trajs)


def test_a_family_whose_tasks_are_each_their_own_kind_keeps_the_plain_shuffled_schedule():
    """`task_kind` defaults to the task's id: the dial's schedule is its tasks in `random.Random(seed)`'s shuffled
    order, as before kinds existed, so collections (the quickstart's offline data among them) do not move."""
    import random

    from dreamgym.envs import family

    tasks = list(family("dial").tasks("train"))
    random.Random(7).shuffle(tasks)
    specs = C.schedule("dial", {"oracle": 1.0}, len(tasks), "train", 7)
    assert [s.task.id for s in specs] == [t.id for t in tasks]


def test_resume_after_a_killed_run_and_parquet_output(tmp_path):
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    C.collect("dial", {"noisy": 1}, 20, full, seed=1, progress=False)
    lines = full.read_bytes().split(b"\n")
    part.write_bytes(b"\n".join(lines[:7]) + b"\n" + lines[7][:50])  # 7 records and a torn one
    with pytest.raises(FileExistsError):
        C.collect("dial", {"noisy": 1}, 20, part, seed=1, progress=False)
    s = C.collect("dial", {"noisy": 1}, 20, part, seed=1, progress=False, resume=True)
    assert s["skipped_existing"] == 7 and s["episodes"] == 13
    assert sorted(_content(read_jsonl(part))) == sorted(_content(read_jsonl(full)))

    pq = tmp_path / "x.parquet"
    s = C.collect("dial", {"oracle": 1}, 6, pq, split="test", progress=False)
    assert s["parquet_trajectories"] == 6
    assert _content(load_trajectories(pq)) == _content(read_jsonl(tmp_path / "x.jsonl"))
    assert {t.task.split for t in load_trajectories(pq)} == {"test"}


def test_workers_give_the_same_file(tmp_path):
    C.collect("dial", {"noisy": 1, "random": 1}, 16, tmp_path / "w1.jsonl", seed=2, progress=False)
    C.collect("dial", {"noisy": 1, "random": 1}, 16, tmp_path / "w2.jsonl", seed=2, progress=False, workers=2)
    assert _content(read_jsonl(tmp_path / "w2.jsonl")) == _content(read_jsonl(tmp_path / "w1.jsonl"))


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    argv = ["--env", "dial", "--policy", "oracle:0.5,random:0.5", "--episodes", "10", "--out", str(out),
            "--no-progress"]
    assert C.main(argv) == 0
    assert "oracle" in capsys.readouterr().out and len(list(read_jsonl(out))) == 10
    assert C.main(argv) == 2 and "exists" in capsys.readouterr().err
    assert C.main(argv[:3] + ["nosuch:1"] + argv[4:] + ["--overwrite"]) == 2
    assert "unknown policy nosuch" in capsys.readouterr().err
    assert C.main(argv + ["--overwrite"]) == 0


def test_mix_parsing_and_counts():
    assert C.parse_mix("oracle") == {"oracle": 1.0}
    assert C.policy_counts({"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}
    assert sum(C.policy_counts(C.parse_mix("oracle:0.5,noisy:0.3,random:0.2"), 3600).values()) == 3600
    for bad in ("", "a:x", "a:-1", "a:0"):
        with pytest.raises(ValueError):
            C.parse_mix(bad)


def test_episodes_per_task_replays_each_task_with_its_own_seed(tmp_path):
    s = C.collect("dial", {"noisy": 1}, 12, tmp_path / "r.jsonl", seed=3, progress=False, episodes_per_task=3)
    assert s["episodes_per_task"] == 3
    trajs = list(read_jsonl(tmp_path / "r.jsonl"))
    runs = [[t.task.id for t in trajs[i:i + 3]] for i in range(0, 12, 3)]
    assert all(len(set(r)) == 1 for r in runs) and len({r[0] for r in runs}) == 4  # 4 tasks, 3 plays in a row
    assert len({t.id for t in trajs}) == 12 and len({t.seed for t in trajs}) == 12
    # The noisy policy's plays of one task differ: the repeats are separate draws, not copies.
    assert any(len({tuple(s.action for s in t.steps) for t in trajs[i:i + 3]}) > 1 for i in range(0, 12, 3))
    with pytest.raises(ValueError, match="episodes_per_task"):
        C.schedule("dial", {"noisy": 1}, 4, "train", 0, episodes_per_task=0)


def test_a_collection_that_fails_more_than_its_threshold_says_so_and_exits_1(tmp_path, monkeypatch, capsys):
    """A collection in which 4 of 10 episodes were refused exited 0. Past `--max-failed-share` (default 0.1) it
    writes what it played and exits 1, its last line naming the count, the share and the threshold."""
    monkeypatch.setitem(dial.POLICIES, "crashy", _CrashyPolicy)
    argv = ["--env", "dial", "--policy", "crashy:1,oracle:1", "--episodes", "20", "--no-progress"]
    assert C.main([*argv, "--out", str(tmp_path / "a.jsonl")]) == 1
    s = json.loads((tmp_path / "a.jsonl.summary.json").read_text())
    assert s["failed"] > 2 and len(list(read_jsonl(tmp_path / "a.jsonl"))) == s["episodes"] == 20 - s["failed"]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"dreamgym collect: {s['failed']} of 20 episodes failed ({s['failed'] / 20:.0%}), over "
                    f"--max-failed-share 0.1; the {s['episodes']} played are written, the reasons are above")
    assert C.main([*argv, "--out", str(tmp_path / "b.jsonl"), "--max-failed-share", "0.6"]) == 0
    with pytest.raises(SystemExit):
        C.main([*argv, "--out", str(tmp_path / "c.jsonl"), "--max-failed-share", "2"])
    assert "not a share between 0 and 1" in capsys.readouterr().err
