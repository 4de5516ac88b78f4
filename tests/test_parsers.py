"""Parsers of model output under arbitrary and hostile text: the experience model's answer (`parse_completion`), the
agent's reply (`parse_action`, `parse_thought`) and the curriculum's variant and choice answers. Property-based
(hypothesis): they never raise, what they return satisfies the format's invariants, a formatted answer parses back
to what was formatted, and time stays linear in the input (repeated unclosed tags, the input that made lazy
`<tag>(.*?)</tag>` searches quadratic: 40 s for a 280k-character reply, benchmarks/bench_parser.py)."""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from dreamgym.agent import format_response, parse_action, parse_thought
from dreamgym.curriculum.generator import Curriculum, CurriculumConfig
from dreamgym.envs.dial import make_tasks, parse_goal
from dreamgym.experience.format import format_completion, format_reward, parse_completion
from dreamgym.llm.fake import FakeLLM

TAGS = ["<state>", "</state>", "<reward>", "</reward>", "<done>", "</done>", "<think>", "</think>", "<action>",
        "</action>", "<STATE>", "<Reward>", "<DONE>", "Variant", "variant 2", ":", "1.", "3)", "Choice:", "<edit>",
        "</edit>", "\n- ", "\n+ ", "\n= "]
WORDS = ["true", "false", "yes", "no", "0", "1", "0.5", "1e-1", "7", "nan", "-0", " ", "\n", "\t", "x"]
# Hostile runs: one tag or character repeated up to 3000 times (21k characters); several per text.
RUNS = st.tuples(st.sampled_from(TAGS + [" ", "\n", "9"]), st.integers(1, 3000)).map(lambda t: t[0] * t[1])
MODEL_TEXT = st.lists(st.one_of(st.sampled_from(TAGS + WORDS), st.text(max_size=4), RUNS), max_size=12).map("".join)
# A deadline far above the linear parsers' cost (~1 ms for the longest text here) and far below the quadratic ones'
# (~1 s for one run of 3000 tags): a parser that turns quadratic fails here, not only in the benchmark.
PROPERTY = settings(max_examples=150, deadline=timedelta(milliseconds=500),
                    suppress_health_check=[HealthCheck.too_slow])

EM_REASONS = {"empty output", "no <state> or <edit> block", "empty <state>", "no parseable <reward>",
              "no parseable <done>"}


@PROPERTY
@given(MODEL_TEXT)
@example("<state>" * 6000)
@example("<think>" * 6000 + "<state>s</state><reward>1</reward><done>true</done>")
def test_parse_completion_returns_a_valid_answer_or_a_reason(text):
    parsed, reason = parse_completion(text)
    if parsed is None:
        assert reason in EM_REASONS or re.fullmatch(r"reward \S+ outside \[0, 1\]|edit line \d+ has no operation "
                                                    r"\(-, \+ or =\)", reason), reason
        return
    assert reason == ""
    if parsed.edit is not None:  # an edit: every operation one of the three, its line text of the answer
        assert parsed.next_state == "" and all(op in "-+=" and line in text for op, line in parsed.edit)
    else:
        assert parsed.next_state and parsed.next_state == parsed.next_state.strip() and parsed.next_state in text
    assert 0.0 <= parsed.reward <= 1.0 and not math.isnan(parsed.reward)
    assert isinstance(parsed.done, bool)
    assert parsed.reasoning == " ".join(parsed.reasoning.split()) and all(w in text for w in parsed.reasoning.split())


FIELD = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(TAGS + WORDS)), max_size=8).map("".join)


@PROPERTY
@given(state=FIELD, reward=st.floats(0.0, 1.0), done=st.booleans(), reasoning=FIELD)
def test_a_formatted_answer_parses_back(state, reward, done, reasoning):
    # What the format cannot carry: a state holding a tag that ends it, reasoning holding one that ends it.
    assume(state.strip() and not re.search(r"</state>|<reward>|<done>", state, re.I))
    assume(not re.search(r"</think>|<state>|<edit>", reasoning, re.I))
    for use_reasoning in (True, False):
        parsed, reason = parse_completion(format_completion(state, reward, done, reasoning, use_reasoning))
        assert reason == "" and parsed is not None
        assert parsed.next_state == state.strip()
        assert parsed.reward == float(format_reward(reward)) and parsed.done is done
        assert parsed.reasoning == (" ".join(reasoning.split()) if use_reasoning else "")


@PROPERTY
@given(MODEL_TEXT)
@example("<action>" * 6000)
@example("<think>" * 6000)
def test_parse_action_and_thought_return_clean_text_or_nothing(text):
    action = parse_action(text)
    assert action is None or (action and action == " ".join(action.split()) and "</action>" not in action)
    thought = parse_thought(text)
    assert thought == thought.strip() and "</think>" not in thought and thought in text


@PROPERTY
@given(action=FIELD, thought=FIELD)
def test_a_formatted_reply_parses_back(action, thought):
    assume("</action>" not in action and "<action>" not in thought and "</think>" not in thought)
    reply = format_response(action, thought)
    assert parse_action(reply) == (" ".join(action.split()) or None)
    assert parse_thought(reply) == thought.strip()


@PROPERTY
@given(MODEL_TEXT)
@example("Variant" + " " * 40_000)
def test_parse_variants_returns_stripped_non_empty_lines(text):
    for v in Curriculum.parse_variants(text):
        assert v and v == v.strip() and "\n" not in v


@PROPERTY
@given(st.lists(FIELD, min_size=1, max_size=5), st.booleans())
def test_written_variants_parse_back(variants, numbered):
    assume(all(v.strip() and v.splitlines() == [v] for v in variants))
    lines = [f"{i + 1}. {v}" if numbered else f"Variant {i + 1}: {v}" for i, v in enumerate(variants)]
    assert Curriculum.parse_variants("\n".join(lines)) == [v.strip() for v in variants]


@PROPERTY
@given(MODEL_TEXT, st.integers(1, 50))
@example("Choice: " + "1" * 5000, 3)
@example("Choice: " + "0" * 5000 + "2", 3)
def test_parse_choice_names_a_candidate_or_none(text, n):
    j = Curriculum.parse_choice(text, n)
    assert j is None or 0 <= j < n


@given(st.integers(1, 50), st.data())
def test_a_written_choice_parses_back(n, data):
    j = data.draw(st.integers(0, n - 1))
    assert Curriculum.parse_choice(f"Choice: {j + 1}", n) == j
    assert Curriculum.parse_choice(f"Choice: {n + 1}", n) is None and Curriculum.parse_choice("none", n) is None


def test_a_selection_answer_with_thousands_of_digits_falls_back_instead_of_raising():
    """int() refuses more than 4300 digits; a served model that ignores max_tokens can write them."""
    base = make_tasks("train")[:3]

    def answer(req):
        if req[-1]["content"].startswith("Original:"):
            return "Choice: " + "1" * 5000
        return "Variant: set the dial to 8 and press submit\nVariant: set the dial to 9 and press submit"

    cur = Curriculum(base, parse_goal, FakeLLM(answer), CurriculumConfig(n_seeds=1))
    cur.update(0, {base[0].id: [1, 0]}, {t.id: t for t in base})
    assert cur.stats.selection_fallbacks == 1 and [t.instruction for t in cur.generated] == \
        ["set the dial to 8 and press submit"]


# (parser, repeated unit, repeats): each input took the quadratic parsers 3-10 s (benchmarks/bench_parser.py).
HOSTILE = {
    "parse_completion <state>": (parse_completion, "<state>", 10_000),
    "parse_completion <edit>": (parse_completion, "<edit>", 10_000),
    "parse_completion edit lines": (lambda t: parse_completion("<edit>\n" + t + "</edit><reward>0</reward><done>no"),
                                    "- x\n", 10_000),
    "parse_completion <think>": (lambda t: parse_completion(t + "<state>s</state><reward>0</reward><done>no"),
                                 "<think>", 10_000),
    "parse_action": (parse_action, "<action>", 10_000),
    "parse_thought": (parse_thought, "<think>", 10_000),
    "parse_variants": (lambda t: Curriculum.parse_variants("Variant" + t), " ", 80_000),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_parsers_are_linear_on_repeated_unclosed_tags(name):
    """Tens of thousands of characters of repeated tags parse in about a millisecond (bound: 0.5 s)."""
    fn, unit, repeats = HOSTILE[name]
    text = unit * repeats
    t = time.perf_counter()
    fn(text)
    assert time.perf_counter() - t < 0.5, name
