"""WebShop catalog determinism, goal splits, instruction generation and the goal parser."""

import pytest

from dreamgym.envs import webshop as ws
from dreamgym.envs.webshop.catalog import generate_products, get_catalog
from dreamgym.envs.webshop.goals import parse_goal
from dreamgym.types import Task


def test_catalog_is_deterministic_and_seeded():
    a, b, c = generate_products(300, 0), generate_products(300, 0), generate_products(300, 1)
    assert a == b and a != c
    assert len({p.asin for p in a}) == 300
    p = a[0]
    assert p.title and p.bullets and p.description and p.attributes and p.options and p.price > 0
    assert p.product_category.count(" › ") >= 2  # hierarchical categories
    assert {q.category for q in a} == {"beauty", "food", "fashion", "furniture", "electronics"}


def test_splits_are_fixed_and_disjoint():
    test, train = ws.tasks("test"), ws.tasks("train")
    assert len(test) == 500 and len(train) > 2500
    assert [t.id for t in test] == [t.id for t in ws.tasks("test")]
    assert not {t.instruction for t in test} & {t.instruction for t in train}
    assert not {t.goal["asin"] for t in test} & {t.goal["asin"] for t in train}
    assert all(t.split == "test" and t.env == "webshop" for t in test)
    with pytest.raises(ValueError):
        ws.tasks("nope")


def test_instructions_are_lower_case_and_varied():
    train = ws.tasks("train")
    texts = [t.instruction for t in train[:400]]
    assert all(t == t.lower() for t in texts)
    assert len({" ".join(t.split()[:2]) for t in texts}) >= 10  # several openers
    assert sum("price lower than" in t for t in texts) > 0.5 * len(texts)
    assert any("under" in t or "less than" in t or "below" in t for t in texts)
    g = train[0].goal
    assert 1 <= len(g["attributes"]) <= 3 and g["goal_options"] and g["price_upper"] > 0


def test_parse_goal_recovers_generated_goals():
    for task in ws.tasks("train")[:400]:
        g, p = task.goal, parse_goal(task.instruction)
        assert p is not None, task.instruction
        assert p["product_type"] == g["product_type"], task.instruction
        assert sorted(p["attributes"]) == sorted(g["attributes"]), task.instruction
        assert p["goal_options"] == g["goal_options"], task.instruction
        assert p["price_upper"] == pytest.approx(g["price_upper"]), task.instruction


def test_parse_goal_accepts_novel_well_formed_instructions():
    p = parse_goal("i want a waterproof men's t-shirt in coral, size small, and price lower than 15.00 dollars")
    assert p["product_type"] == "men's t-shirt" and p["attributes"] == ["waterproof"]
    assert p["goal_options"] == {"color": "coral", "size": "small"} and p["price_upper"] == 15.0
    p = parse_goal("show me some gluten free protein bars in peanut butter flavor under $20")
    assert p["product_type"] == "protein bars" and p["price_upper"] == 20.0
    assert p["goal_options"] == {"flavor": "peanut butter"} and p["attributes"] == ["gluten free"]
    p = parse_goal("Looking for a noise cancelling bluetooth headphones for my dad.")
    assert p is not None and p["price_upper"] is None and p["attributes"] == ["noise cancelling"]


@pytest.mark.parametrize("bad", ["", "   ", "asdf qwer zxcv", "click[Buy Now]", "<script>alert(1)</script>",
                                 "i need a men's t-shirt", "xqzv blorp flimb gorp men's t-shirt machine wash",
                                 "i need a ☃ men's t-shirt that is machine wash", "a" * 10_000,
                                 "i need a machine wash kayak, and price lower than 20.00 dollars", None, 42])
def test_parse_goal_rejects_garbage(bad):
    assert parse_goal(bad) is None


def test_a_parsed_goal_runs_in_the_environment():
    # A curriculum variant has no target asin: the env scores purchases against the parsed goal alone.
    src = ws.tasks("test")[0]
    goal = parse_goal(src.instruction)
    task = Task(id="variant-0", env="webshop", instruction=src.instruction, goal={}, split="train")
    env = ws.make_env("train")
    obs, info = env.reset(options={"task": task})
    assert env.goal["asin"] is None and env.goal["attributes"] == goal["attributes"]
    pol = ws.POLICIES["oracle"](0)
    pol.reset(task, obs, info)
    for _ in range(15):
        obs, r, term, trunc, info = env.step(pol.act(obs, info))
        if term or trunc:
            break
    assert term and r == 1.0 and info["won"]
    bad = Task(id="bad", env="webshop", instruction="blorp", goal={})
    with pytest.raises(ValueError):
        env.reset(options={"task": bad})


def test_large_catalog_builds_and_indexes(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMGYM_CACHE", str(tmp_path))
    cat = get_catalog(n_products=5000, seed=3)
    assert len(cat) == 5000 and len(cat.goals("test")) == 500
    assert cat.search.search("machine wash hoodie")[:1]


def test_parse_goal_does_not_depend_on_the_hash_seed():
    # The lexicon is built from sets; with length ties in set order the same instruction parsed differently
    # from one process to the next (attribute order, hence the shopper policy's query).
    import os
    import subprocess
    import sys

    code = ("import json; from dreamgym.envs import webshop as ws; "
            "print(json.dumps([ws.parse_goal(t.instruction) for t in ws.tasks('train')[:600]], sort_keys=True))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert outs[0] and outs[0] == outs[1]
