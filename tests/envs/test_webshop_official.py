"""The official-format loader, on the hand-written fixture in tests/fixtures/webshop."""

import json
from pathlib import Path

import pytest

from dreamgym.env import check_env
from dreamgym.envs import webshop as ws
from dreamgym.envs.webshop.catalog import load_official

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "webshop"


def test_loader_maps_the_official_records():
    cat = load_official(FIXTURE)
    assert len(cat) == 7  # the "nan" asin and the repeated asin are skipped
    tee = cat.by_asin["B08FIXTEE2"]
    assert tee.title.startswith("Harbor Men's") and 14.99 <= tee.price <= 24.99 and tee.price_tag == "$14.99 to $24.99"
    assert tee.options == {"color": ["navy", "heather grey", "black"], "size": ["small", "medium", "large", "x-large"]}
    assert tee.attributes == ["machine wash", "long sleeve", "classic fit"]
    hair = cat.by_asin["B07ZQ1FIX1"]
    assert "ash blonde | platinum" in hair.options["color"]  # "/" -> " | " as the original
    chair = cat.by_asin["B01FIXCHR4"]
    assert chair.price == 100.0 and chair.options == {}  # missing price -> $100, null options
    bars = cat.by_asin["B09FIXSNK3"]
    assert bars.bullets == ["Gluten free, high protein snack bars for on the go"]
    ear = cat.by_asin["B02FIXEAR5"]
    assert [r["score"] for r in ear.reviews] == [5, 3] and ear.reviews[0]["body"] == "Clear highs, good bass."
    goals = [g for s in ("train", "valid", "test") for g in cat.goals(s)]
    assert len(goals) == 7  # 8 human instructions, one without attributes is skipped
    g = next(g for g in goals if g["asin"] == "B08FIXTEE2")
    assert g["goal_options"] == {"color": "navy", "size": "large"}
    assert g["instruction_text"].endswith(f", and price lower than {g['price_upper']:.2f} dollars")
    assert g["price_upper"] > tee.price


def test_synthetic_goals_when_no_human_file(tmp_path):
    for name in ("items_shuffle_fixture.json", "items_ins_v2_fixture.json"):
        (tmp_path / name).write_text((FIXTURE / name).read_text())
    cat = load_official(tmp_path)
    goals = [g for s in ("train", "valid", "test") for g in cat.goals(s)]
    tee = [g for g in goals if g["asin"] == "B08FIXTEE2"]
    assert len(tee) == 5 and all(" with color: " in g["instruction_text"] for g in tee)


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="items_shuffle"):
        load_official(tmp_path)
    (tmp_path / "items_shuffle.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_official(tmp_path)
    (tmp_path / "items_shuffle.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError, match="JSON list"):
        load_official(tmp_path)


def test_env_runs_on_official_data_and_oracle_buys():
    env = ws.make_env("train", official_dir=str(FIXTURE))
    check_env(env)
    for task in ws.tasks("train", official_dir=str(FIXTURE)) + ws.tasks("test", official_dir=str(FIXTURE)):
        pol = ws.POLICIES["oracle"](0)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        for _ in range(15):
            obs, r, term, trunc, info = env.step(pol.act(obs, info))
            if term or trunc:
                break
        assert term and info["won"], (task.instruction, info["reward_parts"])
