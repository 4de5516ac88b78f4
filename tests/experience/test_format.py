import dataclasses
import re
import subprocess
import sys
from collections import Counter

import pytest

from dreamgym.envs.dial import abstract_state
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.format import (build_request, format_completion, output_constraint, output_regex,
                                        parse_completion)
from dreamgym.types import Transition
from em_helpers import DIAL_TASK, dial_query

# ------------------------------------------------------------------------------------------ output format


def test_format_and_parse_round_trip():
    text = format_completion(abstract_state(4), 1.0, True, "The dial  moves\nup.")
    assert text.startswith("<think>The dial moves up.</think>\n<state>\n[dial] 4")
    assert text.endswith("<reward>1</reward>\n<done>true</done>")
    p, err = parse_completion(text)
    assert err == "" and p.next_state == abstract_state(4) and p.reward == 1.0 and p.done and \
        p.reasoning == "The dial moves up."
    no_think = format_completion("s", 0.0, False, "ignored", use_reasoning=False)
    assert "<think>" not in no_think and parse_completion(no_think)[0].reasoning == ""


@pytest.mark.parametrize("text", [
    "<STATE>[dial] 2</STATE><Reward> 0.0 </Reward><done>False</done>",
    "junk before <think>x</think><state>\n[dial] 2\n<reward>0<done>no trailing text",
    "<state>[dial] 2</state>\n<reward>0</reward>\n<done>0</done>",
])
def test_parser_is_lenient_about_layout(text):
    p, err = parse_completion(text)
    assert err == "" and p.next_state == "[dial] 2" and p.reward == 0.0 and p.done is False


@pytest.mark.parametrize("text,reason", [
    ("", "empty output"),
    ("the dial turns", "no <state> or <edit> block"),
    ("<state>   </state><reward>0</reward><done>true</done>", "empty <state>"),
    ("<state>x</state><reward>lots</reward><done>true</done>", "no parseable <reward>"),
    ("<state>x</state><reward>7</reward><done>true</done>", "reward 7 outside [0, 1]"),
    ("<state>x</state><reward>0</reward><done>maybe</done>", "no parseable <done>"),
    ("<state>x</state><reward>0</reward>", "no parseable <done>"),
])
def test_parser_rejects_malformed_output_with_a_reason(text, reason):
    p, err = parse_completion(text)
    assert p is None and err == reason


# ------------------------------------------------------------------------------------ structured decoding

LENIENT = ["<STATE>[dial] 2</STATE><Reward> 0.0 </Reward><done>False</done>",
           "junk before <think>x</think><state>\n[dial] 2\n<reward>0<done>no trailing text",
           "<state>[dial] 2</state>\n<reward>0</reward>\n<done>0</done>"]


@pytest.mark.parametrize("cfg, rewards", [(ExperienceModelConfig(), (0.0, 1.0)),
                                          (ExperienceModelConfig(use_reasoning=False), (0.0, 1.0)),
                                          (ExperienceModelConfig(binary_reward=False), (0.0, 0.125, 0.5, 1.0))])
def test_output_regex_accepts_every_answer_its_config_trains_on(cfg, rewards):
    for r in rewards:
        for done in (False, True):
            text = format_completion(abstract_state(4) + "\n(multi-line)", r, done, "The dial moves.",
                                     use_reasoning=cfg.use_reasoning)
            assert re.fullmatch(output_regex(cfg), text), text
            assert parse_completion(text)[0].reward == r


@pytest.mark.parametrize("cfg, reward", [(ExperienceModelConfig(), "0.5"), (ExperienceModelConfig(), "2"),
                                         (ExperienceModelConfig(), "true"),
                                         (ExperienceModelConfig(binary_reward=False), "1.5"),
                                         (ExperienceModelConfig(binary_reward=False), "0.1234")])
def test_output_regex_refuses_a_reward_the_config_does_not_allow(cfg, reward):
    text = format_completion("[dial] 2", 0.0, False, "why").replace("<reward>0<", f"<reward>{reward}<")
    assert not re.fullmatch(output_regex(cfg), text)
    assert not re.fullmatch(output_regex(cfg), format_completion("[dial] 2", 0.0, False, "why") + "\n")


@pytest.mark.parametrize("text", LENIENT)
def test_the_parser_stays_lenient_about_answers_written_without_the_constraint(text):
    assert not re.fullmatch(output_regex(ExperienceModelConfig()), text)
    p, err = parse_completion(text)
    assert err == "" and p.next_state == "[dial] 2"


def test_a_reward_outside_the_allowed_set_cannot_be_written_token_by_token():
    """The constraint as the local backend enforces it, on the dial model's tokenizer: after `<reward>` only a
    token starting 0 or 1 is allowed, and the tokens of `0.5` are refused once `0` is written."""
    from dreamgym.experience.checkpoint import load_checkpoint_tokenizer
    from dreamgym.llm.grammar import Grammars
    from em_helpers import trained_dial_model

    tok = load_checkpoint_tokenizer(trained_dial_model())
    grammars = Grammars(tok, len(tok))
    row = grammars.row(output_constraint(ExperienceModelConfig()), 512)
    for t in tok("<think>x</think>\n<state>\n[dial] 2</state>\n<reward>", add_special_tokens=False)["input_ids"]:
        assert row.accept(t)
    mask = grammars.bitmask(1)
    row.fill(mask, 0)
    allowed = [t for t in range(len(tok)) if (int(mask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed and {tok.decode([t])[0] for t in allowed} == {"0", "1"}
    zero, point = tok.convert_tokens_to_ids("0"), tok.convert_tokens_to_ids(".")
    assert row.accept(zero) and not row.accept(point)


@pytest.mark.parametrize("cfg", [ExperienceModelConfig(max_new_tokens=90, max_think_tokens=5),
                                 ExperienceModelConfig(max_new_tokens=90, use_reasoning=False, binary_reward=False)])
def test_the_regex_servers_get_bounds_each_field_in_characters_and_its_longest_answer_fills_server_max_tokens(cfg):
    """A server cannot count a field's tokens, so the budgets reach it as character bounds: `SERVER_CHARS_PER_TOKEN`
    per token of the think budget, and of what the state may take in process. An answer with every field full
    matches both regexes and has exactly `server_max_tokens` characters; one character more in a field does not."""
    from dreamgym.experience.format import SERVER_CHARS_PER_TOKEN

    c = output_constraint(cfg)
    reward = "1" if cfg.binary_reward else "0.125"
    opening = "<think></think>\n<state>\n" if cfg.use_reasoning else "<state>\n"
    tail = f"</state>\n<reward>{reward}</reward>\n<done>false</done>"
    think_chars = SERVER_CHARS_PER_TOKEN * cfg.max_think_tokens if cfg.use_reasoning else 0
    state_chars = SERVER_CHARS_PER_TOKEN * (cfg.max_new_tokens - len(opening) - len(tail))

    def answer(think: int, lead: int, state: int) -> str:
        head = f"<think>{'t' * think}</think>\n" if cfg.use_reasoning else ""
        return f"{head}<state>\n{' ' * lead}{'s' * state}{tail}"

    longest = answer(think_chars, 16, state_chars)
    assert len(longest) == c.server_max_tokens
    assert re.fullmatch(c.server_regex, longest) and re.fullmatch(c.regex, longest)
    assert not re.fullmatch(c.server_regex, answer(think_chars, 16, state_chars + 1))
    assert not re.fullmatch(c.server_regex, answer(think_chars, 17, state_chars))
    assert not re.fullmatch(c.server_regex, answer(think_chars, 16, 0))  # a state needs a visible character
    if cfg.use_reasoning:
        assert not re.fullmatch(c.server_regex, answer(think_chars + 1, 0, 1))
    assert re.fullmatch(c.server_regex, format_completion("[dial] 2", float(reward), False, "why",
                                                          use_reasoning=cfg.use_reasoning))


# ------------------------------------------------------------------------------------------------ prompts


def test_prompt_has_task_examples_history_state_action_and_ablations_drop_them():
    ex = Transition(task=DIAL_TASK, history=[], state=abstract_state(7), action="turn down",
                    next_state=abstract_state(6), reward=0.0, done=False)
    q = dial_query(3, "turn up", history=[(abstract_state(1), "turn up"), (abstract_state(2), "turn up")])
    cfg = ExperienceModelConfig(k=2, history=1)
    user = build_request(q, [ex], cfg)[-1]["content"]
    assert user.startswith("Task: set the dial to 5")
    assert "Examples:\n## 1\nState: [dial] 7" in user and "Action: turn down\n<state>\n[dial] 6" in user
    assert "</state>\n<reward>0</reward>\n<done>false</done>\nHistory" in user
    assert "History: turn up\n" in user  # only the last H=1 action
    assert user.endswith("State:\n" + abstract_state(3) + "\nAction: turn up")
    off = dataclasses.replace(cfg, use_retrieval=False, use_history=False)
    user_off = build_request(q, [ex], off)[-1]["content"]
    assert "Examples" not in user_off and "History" not in user_off and user_off.endswith("Action: turn up")
    assert build_request(q, [], dataclasses.replace(cfg, system_prompt=True))[0]["role"] == "system"
    # An example with a reasoning trace shows it, so the example reads exactly like an answer; off with the
    # switch or without reasoning in the output.
    traced = dataclasses.replace(ex, reasoning="Turning down moves the dial from 7 to 6.")
    user = build_request(q, [traced], cfg)[-1]["content"]
    assert "Action: turn down\n<think>Turning down moves the dial from 7 to 6.</think>\n<state>" in user
    for c in (dataclasses.replace(cfg, example_reasoning=False), dataclasses.replace(cfg, use_reasoning=False)):
        assert "<think>" not in build_request(q, [traced], c)[-1]["content"]


def test_prompt_is_fitted_to_the_token_budget():
    ex = [Transition(task=DIAL_TASK, history=[], state=abstract_state(i), action="turn up",
                     next_state=abstract_state(i + 1), reward=0.0, done=False) for i in range(3)]
    q = dial_query(3, "turn up", history=[(abstract_state(2), "turn up")])
    words = lambda req: sum(len(m["content"].split()) for m in req)  # noqa: E731 - a simple token counter
    cfg = ExperienceModelConfig(k=3, max_prompt_tokens=words(build_request(q, ex, ExperienceModelConfig(k=3))) - 1)
    stats = Counter()
    req = build_request(q, ex, cfg, words, stats)
    assert words(req) <= cfg.max_prompt_tokens and req[-1]["content"].count("## ") == 2
    assert stats == {"examples_dropped": 1}
    tight = dataclasses.replace(cfg, max_prompt_tokens=12)
    req = build_request(q, ex, tight, words, stats)
    assert "Examples" not in req[-1]["content"] and "History" not in req[-1]["content"]
    assert stats["history_dropped"] == 1 and req[-1]["content"].endswith("Action: turn up")


def test_the_format_loads_no_model_library():
    """Prompts and parsing are needed wherever the model is reached over HTTP: importing them costs no torch."""
    code = ("import sys, dreamgym.experience.format; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
