"""ALFWorld game generation: determinism, splits, goals that read like ALFRED's, the planner check (and what
happens when it fails), parallel generation with cache reuse, the CLI, official data and a missing install."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys

import pytest

pytest.importorskip("alfworld")

from dreamgym.envs import alfworld as A  # noqa: E402
from dreamgym.envs.alfworld import games as G  # noqa: E402
from dreamgym.envs.alfworld import knowledge as K  # noqa: E402
from dreamgym.envs.alfworld.engine import make_engine  # noqa: E402


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMGYM_CACHE", str(tmp_path / "cache"))
    G.split_rows.cache_clear()
    yield tmp_path / "cache"
    G.split_rows.cache_clear()


def test_specs_are_deterministic_and_cover_the_six_task_types():
    a = [G.build_spec("train", i, seed=0) for i in range(12)]
    b = [G.build_spec("train", i, seed=0) for i in range(12)]
    assert [s.problem() for s in a] == [s.problem() for s in b]
    assert [s.task_type for s in a[:6]] == list(K.TASK_TYPES)
    other = G.build_spec("train", 0, seed=1)
    assert other.problem() != a[0].problem()
    for s in a:
        goal = A.parse_goal(s.instruction)  # every generated instruction parses back to the game's goal
        assert goal is not None and goal["task_type"] == s.task_type and goal["object"] == s.object_type.lower()
        assert goal["receptacle"] == (s.receptacle_type or "").lower() or goal["receptacle"] is None
        assert goal["toggle"] == (s.toggle_type.lower() if s.toggle_type else None)
        # The goal is never satisfied at the start: no goal object already sits in a goal receptacle.
        recep_ids = {rid for rid, rt in s.receptacles if rt == s.receptacle_type}
        assert not any(ot == s.object_type and rid in recep_ids for _, ot, rid in s.objects)
        # ALFRED ids, mangled as ALFRED's generator does.
        assert "_bar_" in s.problem() and "(:goal" in s.problem()
    two = a[5]
    assert sum(ot == two.object_type for _, ot, _ in two.objects) >= 2


def test_valid_unseen_uses_only_held_out_floor_plans():
    seen = {G.build_spec("valid_seen", i).floorplan for i in range(30)}
    unseen = {G.build_spec("valid_unseen", i).floorplan for i in range(30)}
    assert unseen <= set(K.tables()["test_scenes"])
    assert seen <= set(K.tables()["train_scenes"])
    assert not seen & unseen
    # valid_seen is a different arrangement than train for the same index.
    assert G.build_spec("valid_seen", 0).problem() != G.build_spec("train", 0).problem()


def test_heat_cool_clean_goals_respect_alfred_rules():
    for i in range(2, 60, 6):  # clean
        s = G.build_spec("train", i)
        assert s.object_type in K.tables()["cleanable"] and s.receptacle_type not in ("SinkBasin", "BathtubBasin")
        assert any(rt == "SinkBasin" for _, rt in s.receptacles)
    for i in range(3, 60, 6):  # heat: kitchens with a microwave
        s = G.build_spec("train", i)
        assert K.scene_type(s.floorplan) == "Kitchen" and s.receptacle_type != "Microwave"
    for i in range(1, 60, 6):  # lamps: living rooms and bedrooms
        s = G.build_spec("train", i)
        assert s.toggle_type in ("DeskLamp", "FloorLamp") and K.scene_type(s.floorplan) in ("LivingRoom", "Bedroom")


def test_goal_spec_for_curriculum_variants():
    spec = G.spec_for_goal({}, "put a hot apple in fridge")
    assert spec is not None and spec.task_type == "pick_heat_then_place_in_recep"
    assert (spec.object_type, spec.receptacle_type) == ("Apple", "Fridge")
    assert spec.instruction == "put a hot apple in fridge"
    assert G.spec_for_goal({}, "put a hot apple in fridge").problem() == spec.problem()
    assert G.spec_for_goal({}, "dance with the fridge") is None


def test_unsolvable_games_are_dropped_with_a_reason(tmp_cache):
    eng = make_engine()
    spec = G.build_spec("train", 0)
    # Ask for a receptacle the object cannot go in (no canContain fact): the planner can find no plan.
    holds = K.tables()["holds"]
    wrong = next(rt for _, rt in spec.receptacles if spec.object_type not in holds[rt])
    bad = dataclasses.replace(spec, receptacle_type=wrong, index=99999)
    ok, reason, plan = G.check_game(eng, bad)
    assert not ok and reason.startswith("planner found no plan") and plan == []
    row = G.materialize_spec(bad, eng)
    assert row["status"] == "skipped" and row["reason"] == reason
    assert G.read_status(row["goal"]["game_file"])["solvable"] is False
    # A game file that does not load is also a reason, not a crash.
    broken = dataclasses.replace(spec, index=99998)
    broken.objects = broken.objects + [("Apple|+01.00|+01.00|+01.00", "Apple", "NoSuchReceptacle|+00.00")]
    ok, reason, _ = G.check_game(eng, broken)
    assert not ok and reason.startswith("engine failed")


def test_parallel_generation_reuses_the_cache(tmp_cache):
    rep = G.generate_split("valid_unseen", n=5, workers=2)
    assert rep.made == 5 and not rep.reused and rep.seconds > 0 and rep.cpu_seconds > 0
    man = json.loads(G.manifest_path("valid_unseen").read_text())
    assert len(man["games"]) == 5 and man["complete"]
    for row in man["games"]:
        data = json.loads(open(row["goal"]["game_file"]).read())
        assert data["solvable"] is True and data["walkthrough"]
        assert f"Your task is to: {row['instruction']}." in data["grammar"]
    again = G.generate_split("valid_unseen", n=5, workers=2)
    assert again.reused and again.made == 5
    tasks = A.tasks("valid_unseen", n=5)
    assert [t.instruction for t in tasks] == [r["instruction"] for r in man["games"]]
    assert all(t.env == "alfworld" and t.split == "valid_unseen" for t in tasks)


def test_train_split_is_lazy_and_configurable(tmp_cache, monkeypatch):
    monkeypatch.setenv("DREAMGYM_ALFWORLD_TRAIN_GAMES", "25")
    tasks = A.tasks("train")
    assert len(tasks) == 25 and len({t.id for t in tasks}) == 25
    assert not any(G.game_path("train", 0, t.goal["game_id"]).exists() for t in tasks)  # nothing written yet
    assert len(A.tasks("train", n=7)) == 7


def test_cli_generate(tmp_cache, capsys):
    assert G.cli_main(["generate", "--split", "valid_seen", "--n", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "alfworld valid_seen: 2/2 games" in out and "dropped: none" in out
    assert G.cli_main(["generate", "--split", "valid_seen", "--n", "2"]) == 0
    assert "reused the cache" in capsys.readouterr().out


def test_official_data_directory(tmp_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        A.tasks("valid_seen")
    # A minimal official layout: json_2.1.1/<split>/<task>/<trial>/{game.tw-pddl,traj_data.json}.
    spec = G.build_spec("valid_seen", 3)
    root = tmp_path / "data"
    trial = root / "json_2.1.1" / "valid_seen" / "pick_heat_then_place_in_recep-Bread-None-Fridge-8" / "trial_1"
    trial.mkdir(parents=True)
    # Only the goal's objects, so the engine's planner (official files carry no plan) answers quickly.
    game = dict(spec.game_json(keep_types={spec.object_type}), solvable=True)
    (trial / "game.tw-pddl").write_text(json.dumps(game))
    (trial / "traj_data.json").write_text(json.dumps({"task_type": spec.task_type, "pddl_params": {
        "object_target": spec.object_type, "parent_target": spec.receptacle_type, "toggle_target": ""}}))
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    tasks = A.tasks("valid_seen")
    assert len(tasks) == 1 and tasks[0].instruction == spec.instruction
    assert tasks[0].goal["game_file"] == str(trial / "game.tw-pddl") and tasks[0].goal["generator"] == "official"
    env = A.make_env("valid_seen")
    obs, info = env.reset(options={"task": tasks[0]})
    pol = A.POLICIES["expert"](0)
    pol.reset(tasks[0], obs, info)
    assert info["walkthrough"]  # the engine planned it: official files carry no plan
    for _ in range(50):
        obs, r, term, trunc, info = env.step(pol.act(obs, info))
        if term or trunc:
            break
    assert info["won"] and r == 1.0
    env.close()


def test_missing_install_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(K.ALFWorldMissing, match=r"pip install alfworld==0\.4\.2"):
        make_engine()
    monkeypatch.setitem(sys.modules, "alfworld", None)
    with pytest.raises(ImportError, match="textworld==1.7.0"):
        K.require("alfworld")


def test_dropped_copy_of_the_cache_is_regenerated(tmp_cache):
    G.generate_split("valid_seen", n=2, workers=1)
    shutil.rmtree(G.games_root() / "valid_seen")
    rep = G.generate_split("valid_seen", n=2, workers=1)
    assert not rep.reused and rep.made == 2
