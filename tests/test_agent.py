"""The agent's text interface: reply parsing and grounding an action onto the admissible ones."""

from dreamgym.agent import format_response, ground_action, parse_action

SHOP = ["search[<query>]", "click[Back to Search]", "click[Next >]", "click[B0A7Q2X9K1]", "click[B0C3ZZ1111]"]


def test_parse_action_roundtrips_format_response():
    assert parse_action(format_response("click[Buy  Now]", "it fits")) == "click[Buy Now]"
    assert parse_action("<think>x</think><action> </action>") is None
    assert parse_action("click[Buy Now]") is None


def test_grounding_keeps_admissible_actions_and_filled_forms():
    assert ground_action("click[B0A7Q2X9K1]", SHOP, 0.8) == "click[B0A7Q2X9K1]"
    assert ground_action("CLICK[back  to search]", SHOP, 0.8) == "CLICK[back  to search]"  # env matches case-free
    # a form entry accepts every filling, however unlike the placeholder it is
    assert ground_action("search[red leather boots under 40 dollars]", SHOP, 0.8) == \
        "search[red leather boots under 40 dollars]"


def test_grounding_maps_a_near_miss_to_the_closest_action_and_leaves_the_rest():
    assert ground_action("click[B0A7Q2X9KI]", SHOP, 0.8) == "click[B0A7Q2X9K1]"  # one character wrong
    assert ground_action("click[B0C3ZZ111]", SHOP, 0.8) == "click[B0C3ZZ1111]"  # one dropped
    assert ground_action("click[Buy Now]", SHOP, 0.8) == "click[Buy Now]"  # nothing close: unchanged
    assert ground_action("click[Buy Now]", SHOP, 0.0) != "click[Buy Now]"  # threshold 0: always the closest
    assert ground_action("go to cabinet 1", [], 0.5) == "go to cabinet 1"
    alf = ["go to cabinet 1", "go to cabinet 10", "take apple 1 from countertop 2", "inventory"]
    assert ground_action("take apple 1 from countertop", alf, 0.8) == "take apple 1 from countertop 2"
    assert ground_action("go to cabinet 10", alf, 0.8) == "go to cabinet 10"
