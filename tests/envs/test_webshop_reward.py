"""Hand-computed cases for every branch of the WebShop reward formula."""

import pytest

from dreamgym.envs.webshop.product import Product
from dreamgym.envs.webshop.reward import get_reward, normalize_color, title_nouns, type_reward


def _product(**kw):
    base = dict(asin="B0TEST0001", title="Hanes Men's Long Sleeve T-Shirt", query="men's t-shirts",
                category="fashion", product_category="Clothing, Shoes & Jewelry › Men › Clothing › Shirts",
                product_type="men's t-shirt", bullets=["Soft cotton", "Tagless collar"],
                description="A comfortable crew neck tee.", attributes=["machine wash", "long sleeve"],
                options={"size": ["small", "large", "large tall"], "color": ["dark navy", "black"]},
                price=24.99, price_tag="$24.99", title_nouns=frozenset({"hanes", "t-shirt"}))
    base.update(kw)
    return Product(**base)


def _goal(**kw):
    base = dict(query="men's t-shirts", product_category="Clothing, Shoes & Jewelry › Men › Clothing › Shirts",
                name="Hanes Men's Long Sleeve T-Shirt", name_nouns=["hanes", "t-shirt"],
                attributes=["machine wash"], goal_options={"size": "large", "color": "navy"}, price_upper=30.0)
    base.update(kw)
    return base


def test_all_matched_scores_one():
    r, parts = get_reward(_product(), _goal(), options={"size": "large", "color": "dark navy"})
    assert r == 1.0
    assert parts["r_type"] == 1.0 and parts["r_attr"] == 1.0 and parts["r_option"] == 1.0 and parts["r_price"] == 1.0


def test_partial_attributes():
    # "fleece lined" is nowhere on the product: (1 attr + 2 options + 1 price) / (2 + 2 + 1) = 0.8
    r, parts = get_reward(_product(), _goal(attributes=["machine wash", "fleece lined"]),
                          options={"size": "large", "color": "dark navy"})
    assert r == pytest.approx(0.8) and parts["n_attr"] == 1 and parts["attr_hits"] == [True, False]


def test_attribute_fuzzy_and_substring_fallbacks():
    # token_set_ratio("machine washable", "machine wash") = 85.7 > 85; "crew neck" only in the description;
    # "tagless collar" only in a bullet point.
    goal = _goal(attributes=["machine washable", "crew neck", "tagless collar"], goal_options={})
    r, parts = get_reward(_product(), goal)
    assert parts["attr_hits"] == [True, True, True] and r == 1.0


def test_wrong_option_and_exact_size():
    # size small instead of large: (1 + 1 + 1) / (1 + 2 + 1) = 0.75
    r, _ = get_reward(_product(), _goal(), options={"size": "small", "color": "dark navy"})
    assert r == pytest.approx(0.75)
    # "large tall" would pass the fuzzy rule (token-set ratio 100) but sizes must match exactly
    r, parts = get_reward(_product(), _goal(), options={"size": "large tall", "color": "dark navy"})
    assert parts["option_hits"] == [False, True] and r == pytest.approx(0.75)


def test_option_colour_normalisation_and_text_fallback():
    assert normalize_color("dark navy") == "navy" and normalize_color("sea salt") == "sea salt"
    # a non-size goal option found in the product text counts even when not clicked (design rule)
    goal = _goal(goal_options={"style": "crew neck"})
    r, parts = get_reward(_product(), goal, options={})
    assert parts["option_hits"] == [True] and r == 1.0


def test_over_price():
    # (1 + 2 + 0) / 4 = 0.75
    r, parts = get_reward(_product(), _goal(price_upper=20.0), options={"size": "large", "color": "dark navy"})
    assert r == pytest.approx(0.75) and parts["r_price"] == 0.0


@pytest.mark.parametrize("query,category,desired,expected", [
    ("other", "Clothing, Shoes & Jewelry › Men", ["x1", "x2", "x3", "x4", "hanes"], 1.0),   # 2 category levels
    ("other", "Toys", ["hanes", "t-shirt", "x1", "x2"], 1.0),                                  # title score 0.5 > 0.2
    ("other", "Toys", ["hanes", "x1", "x2", "x3", "x4"], 0.5),                                 # title score 0.2
    ("other", "Toys", ["hanes"] + [f"x{i}" for i in range(10)], 0.1),                          # 1/11 < 0.1
    ("men's t-shirts", "Toys", ["x1"], 0.0),                                                   # no overlap at all
    ("men's t-shirts", "Toys", [], 1.0),                                                       # no nouns: score 0.2, query match
])
def test_type_reward_levels(query, category, desired, expected):
    goal = _goal(query=query, product_category=category, name_nouns=desired, goal_options={}, attributes=["machine wash"])
    t = type_reward(_product(), goal)
    assert t["r_type"] == expected
    r, _ = get_reward(_product(), goal)
    assert r == pytest.approx(expected)  # everything else matches, so the total is the type factor


def test_title_nouns_vocab_and_heuristic():
    assert title_nouns("Hanes Men's Long Sleeve T-Shirt") == {"hanes", "t-shirt"}
    heur = title_nouns("Sunlit 20 Inch Clip In Hair Extensions, Natural", None)
    assert {"sunlit", "clip", "hair", "extensions"} <= heur and "inch" not in heur and "natural" not in heur


def test_no_price_bound_counts_as_matched():
    r, parts = get_reward(_product(price=999.0), _goal(price_upper=None), options={"size": "large", "color": "navy"})
    assert r == 1.0 and parts["r_price"] == 1.0
