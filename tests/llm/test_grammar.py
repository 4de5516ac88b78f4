"""Constrained decoding in the local backend: completions match the constraint's regex whatever the model would
write, field budgets close fields in time, log-probs stay the raw model's, and a bad regex is refused."""

import re

import pytest
import torch

from dreamgym.llm.base import ConstraintError, FieldBudget, OutputConstraint, SamplingParams
from dreamgym.llm.hf import HFBackend

# The untrained tiny preset writes arbitrary tokens: whatever matches below, the constraint made it so.
CHATS = [[{"role": "user", "content": t}] for t in ("set the dial to 3", "turn up", "hi there", "State: [dial] 2")]
REGEX = r"<a>[^<]*</a>\n<b>(yes|no)</b>"
TAIL = len(b"</a>\n<b>yes</b>")
"""The most tokens the answer needs once <a> closes (each token writes at least one byte)."""


@pytest.fixture(scope="module")
def backend():
    torch.set_num_threads(1)
    return HFBackend.from_preset("tiny", device="cpu")


def forward_logprobs(model, prompt, generated):
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(generated)]


def test_unconstrained_tiny_model_writes_garbage_constrained_it_matches(backend):
    free = backend.generate(CHATS, SamplingParams(temperature=1.3, max_tokens=40, seed=1))
    assert not any(re.fullmatch(REGEX, c.text) for c in free)
    params = SamplingParams(temperature=1.3, max_tokens=40, seed=1, stop=["</b>"],
                            constraint=OutputConstraint(REGEX, budgets=(FieldBudget(after=1, reserve=TAIL),)))
    outs = backend.generate(CHATS * 2, params)
    for c in outs:
        assert re.fullmatch(REGEX, c.text), c.text
        assert c.finish_reason == "stop" and len(c.token_ids) <= 40
        ref = forward_logprobs(backend.model, c.prompt_token_ids, c.token_ids)
        # The log-probs are the raw model's (the contract trainers rely on), not the masked distribution's.
        assert max(abs(a - b) for a, b in zip(ref, c.logprobs)) < 1e-4
    greedy = backend.generate(CHATS, SamplingParams(temperature=0, max_tokens=40, stop=["</b>"],
                                                    constraint=params.constraint))
    assert all(re.fullmatch(REGEX, c.text) for c in greedy)


def test_field_budget_closes_the_field_after_its_tokens(backend):
    budget = OutputConstraint(REGEX, budgets=(FieldBudget(after=1, max_tokens=4),))
    outs = backend.generate(CHATS, SamplingParams(temperature=1.0, max_tokens=64, seed=3, stop=["</b>"],
                                                  constraint=budget))
    for c in outs:
        assert re.fullmatch(REGEX, c.text), c.text
        pieces = [backend.tokenizer.decode([t]) for t in c.token_ids]
        marks = [i for i, p in enumerate(pieces) if "<" in p]
        # Tokens after the one holding the first mark, up to the one holding the second: 4 at most, the last of
        # which is the one the budget forced (it holds the closing tag's "<").
        assert marks[1] - marks[0] <= 5, pieces


def test_reserve_leaves_room_for_the_rest_of_the_answer(backend):
    # Without a reserve, the untrained model fills <a> until max_tokens and never writes <b>.
    unbounded = OutputConstraint(REGEX)
    cut = backend.generate(CHATS, SamplingParams(temperature=1.0, max_tokens=24, seed=5, constraint=unbounded))
    assert any(c.finish_reason == "length" for c in cut)
    bounded = OutputConstraint(REGEX, budgets=(FieldBudget(after=1, reserve=TAIL),))
    outs = backend.generate(CHATS, SamplingParams(temperature=1.0, max_tokens=24, seed=5, stop=["</b>"],
                                                  constraint=bounded))
    assert all(c.finish_reason == "stop" and re.fullmatch(REGEX, c.text) for c in outs)


def test_constrained_and_free_rows_decode_together(backend):
    constraint = OutputConstraint(REGEX, budgets=(FieldBudget(after=1, reserve=TAIL),))
    free = SamplingParams(temperature=0, max_tokens=16)
    both = backend.generate_from_ids([backend.prompt_ids(c) for c in CHATS[:2]],
                                     [SamplingParams(temperature=0, max_tokens=40, stop=["</b>"],
                                                     constraint=constraint), free])
    assert re.fullmatch(REGEX, both[0].text)
    assert both[1].token_ids == backend.generate(CHATS[1:2], free)[0].token_ids


def test_a_regex_that_does_not_compile_is_refused(backend):
    with pytest.raises(ConstraintError, match="cannot be compiled"):
        backend.check_constraint(OutputConstraint("<a>(unclosed"))
