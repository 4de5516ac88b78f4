"""The transformers backend: exact token ids and logprobs, seeded sampling, stop/eos/length handling, batching."""

import pytest
import torch

from dreamgym.llm import SamplingParams
from dreamgym.llm.base import row_seed
from dreamgym.llm.hf import HFBackend, _sample

TASKS = ["Task: set the dial to 3 and press submit", "Task: turn up", "hi",
         "Task: set the dial to 7 and press submit. State: [dial] 2 [button] turn up [button] turn down"]


@pytest.fixture(scope="module")
def backend():
    torch.set_num_threads(1)  # 2 threads on a shared 2-core machine decode 10x+ slower (spin waits)
    return HFBackend.from_preset("tiny", device="cpu")


def chats(texts=TASKS):
    return [[{"role": "user", "content": t}] for t in texts]


def forward_logprobs(model, prompt, generated):
    """log p(generated[i] | prompt, generated[:i]) from one plain forward pass, no padding, no cache."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(generated)]


@pytest.mark.parametrize("params", [SamplingParams(temperature=0, max_tokens=24),
                                    SamplingParams(temperature=0.7, top_p=0.8, max_tokens=24, seed=1),
                                    SamplingParams(temperature=1.3, max_tokens=24, seed=2)])
def test_logprobs_match_a_separate_forward_pass(backend, params):
    outs = backend.generate(chats(), params)  # prompts of different lengths: left padding is exercised
    for o in outs:
        assert len(o.token_ids) == len(o.logprobs) > 0
        ref = forward_logprobs(backend.model, o.prompt_token_ids, o.token_ids)
        assert max(abs(a - b) for a, b in zip(ref, o.logprobs)) < 1e-4


def test_greedy_picks_the_argmax_and_batch_equals_single(backend):
    params = SamplingParams(temperature=0, max_tokens=20)
    batched = backend.generate(chats(), params)
    for req, b in zip(chats(), batched):
        assert backend.generate([req], params)[0].token_ids == b.token_ids
    o = batched[0]
    ids = torch.tensor([o.prompt_token_ids + o.token_ids])
    with torch.no_grad():
        logits = backend.model(ids).logits[0]
    assert logits[len(o.prompt_token_ids) - 1:-1].argmax(-1).tolist() == o.token_ids


def test_seeded_sampling_is_reproducible_and_independent_of_batching(backend):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=7)
    a = backend.generate(chats() * 2, params)
    b = backend.generate(chats() * 2, params)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    # Identical prompts in one batch get different samples (their own generators).
    assert a[0].token_ids != a[len(TASKS)].token_ids
    assert backend.generate(chats(), SamplingParams(temperature=1.0, max_tokens=16, seed=8))[0].token_ids \
        != a[0].token_ids
    # Request i alone, seeded with row_seed(seed, i), samples what it sampled inside the batch.
    i = 2
    alone = backend.generate_from_ids([a[i].prompt_token_ids], params, seeds=[row_seed(7, i)])[0]
    assert alone.token_ids == a[i].token_ids
    small = HFBackend(backend.model, backend.tokenizer, batch_size=1)
    assert [x.token_ids for x in small.generate(chats() * 2, params)] == [x.token_ids for x in a]


def test_per_request_seeds_give_common_random_numbers(backend):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=3)
    reqs = chats()
    # The same prompt with the same per-request seed samples the same tokens wherever it sits in the batch, and
    # what it samples alone with `params.seed` equal to that seed (row_seed(s, 0) == s).
    outs = backend.generate([reqs[0], reqs[1], reqs[0]], params, seeds=[41, 41, 41])
    assert outs[0].token_ids == outs[2].token_ids
    alone = backend.generate([reqs[0]], SamplingParams(temperature=1.0, max_tokens=16, seed=41))[0]
    assert alone.token_ids == outs[0].token_ids
    other = backend.generate([reqs[0]], params, seeds=[42])[0]
    assert other.token_ids != outs[0].token_ids
    with pytest.raises(ValueError, match="one per prompt"):
        backend.generate(reqs, params, seeds=[1])


def test_unseeded_sampling_follows_torch_global_seed(backend):
    params = SamplingParams(temperature=1.0, max_tokens=8)
    torch.manual_seed(0)
    a = backend.generate(chats(), params)
    torch.manual_seed(0)
    assert [x.token_ids for x in backend.generate(chats(), params)] == [x.token_ids for x in a]


@pytest.mark.parametrize("span", [(10, 13), (3, 4), (18, 25)])
def test_stop_string_truncates_text_and_ids(backend, span):
    params = SamplingParams(temperature=1.0, max_tokens=30, seed=3)
    full = backend.generate(chats(), params)[0]
    assert full.finish_reason == "length" and len(full.token_ids) == 30
    stop = full.text[span[0]:span[1]]
    first = full.text.find(stop)
    cut = backend.generate(chats(), SamplingParams(temperature=1.0, max_tokens=30, seed=3,
                                                   stop=["never-appears", stop]))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: first + len(stop)]
    # The ids end with the token that completed the stop string: the shortest prefix whose text contains it.
    k = len(cut.token_ids)
    assert cut.token_ids == full.token_ids[:k] and cut.logprobs == pytest.approx(full.logprobs[:k])
    assert stop in backend.tokenizer.decode(cut.token_ids) and stop not in backend.tokenizer.decode(
        cut.token_ids[:-1])


def test_stop_strings_are_looked_for_only_after_a_token_that_can_complete_one(backend):
    triggers = backend._stop_triggers(["</action>"])
    texts = backend.tokenizer.batch_decode([[i] for i in range(len(backend.tokenizer))])
    assert triggers == {i for i, t in enumerate(texts) if ">" in t or "\ufffd" in t}
    assert backend._stop_triggers(["", "</action>"]) is triggers and backend._stop_triggers([]) is None
    # A multi-byte last character: tokens holding part of its UTF-8 bytes decode to U+FFFD and may complete it.
    assert {i for i, t in enumerate(texts) if "\ufffd" in t} <= backend._stop_triggers(["é"])


def test_eos_ends_generation_and_is_kept_in_ids_not_text(backend):
    params = SamplingParams(temperature=0, max_tokens=20)
    ref = backend.generate(chats(), params)[0]
    eos_like = ref.token_ids[5]
    k = ref.token_ids.index(eos_like)
    be = HFBackend(backend.model, backend.tokenizer)
    be.eos_ids = frozenset({eos_like})
    o = be.generate(chats(), params)[0]
    assert o.finish_reason == "stop" and o.token_ids == ref.token_ids[: k + 1]
    assert o.text == backend.tokenizer.decode(ref.token_ids[:k])


def test_length_limits(backend):
    outs = backend.generate(chats(), SamplingParams(temperature=0, max_tokens=5))
    assert all(o.finish_reason == "length" and len(o.token_ids) == 5 for o in outs)
    mixed = backend.generate_from_ids([outs[0].prompt_token_ids] * 2, [SamplingParams(temperature=0, max_tokens=0),
                                                                       SamplingParams(temperature=0, max_tokens=3)])
    assert (mixed[0].token_ids, mixed[0].finish_reason) == ([], "length")
    assert mixed[1].token_ids == outs[0].token_ids[:3]
    with pytest.raises(ValueError):
        backend.generate_from_ids([[]], SamplingParams())


def test_tiny_top_p_is_greedy(backend):
    greedy = backend.generate(chats(), SamplingParams(temperature=0, max_tokens=12))
    nucleus = backend.generate(chats(), SamplingParams(temperature=1.0, top_p=1e-9, max_tokens=12, seed=4))
    assert [o.token_ids for o in nucleus] == [o.token_ids for o in greedy]


def test_sampler_follows_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]]).repeat(20000, 1)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    ones = torch.ones(20000)
    tokens = _sample(logits, ones, torch.ones(20000), u)
    freq = torch.bincount(tokens, minlength=5).double() / 20000
    assert torch.allclose(freq, torch.softmax(logits[0], -1).double(), atol=0.01)
    # top_p = 0.8: the two most likely tokens (mass 0.66 + 0.24) cover it; the rest never appear.
    tokens = _sample(logits, ones, torch.full((20000,), 0.8), u)
    freq = torch.bincount(tokens, minlength=5).double() / 20000
    p = torch.softmax(logits[0], -1).double()[:2]
    assert freq[2:].sum() == 0 and torch.allclose(freq[:2], p / p.sum(), atol=0.01)
    # Temperature 0.5 sharpens.
    tokens = _sample(logits, ones * 0.5, torch.ones(20000), u, any_nucleus=False)
    freq = torch.bincount(tokens, minlength=5).double() / 20000
    assert torch.allclose(freq, torch.softmax(logits[0] / 0.5, -1).double(), atol=0.01)


def test_prompt_ids_apply_the_template_once(backend):
    req = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    ids = backend.prompt_ids(req)
    assert backend.tokenizer.decode(ids) == ("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
                                             "<|im_start|>assistant\n")
    assert ids.count(backend.tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3


def test_sees_in_place_weight_updates_and_restores_train_mode(backend):
    model = backend.model
    params = SamplingParams(temperature=0, max_tokens=8)
    before = backend.generate(chats(), params)
    saved = model.model.norm.weight.detach().clone()
    try:
        with torch.no_grad():
            model.model.norm.weight.mul_(-1.0)  # what an optimizer step does: change weights in place
        model.train()
        after = backend.generate(chats(), params)
        assert model.training
        assert [o.token_ids for o in after] != [o.token_ids for o in before]
    finally:
        with torch.no_grad():
            model.model.norm.weight.copy_(saved)
        model.eval()
    assert not model.training


@pytest.mark.slow
def test_smollm2_answers_a_chat_request_offline():
    be = HFBackend.from_preset("smollm2-135m", device="cpu")
    out = be.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                      SamplingParams(temperature=0, max_tokens=24))[0]
    assert "Paris" in out.text and out.finish_reason == "stop"
    assert out.token_ids[-1] in be.eos_ids and "<|im_end|>" not in out.text
    ref = forward_logprobs(be.model, out.prompt_token_ids, out.token_ids)
    assert max(abs(a - b) for a, b in zip(ref, out.logprobs)) < 1e-4


def test_load_llm_spec_picks_the_local_backend():
    from dreamgym.llm import LLM
    from dreamgym.llm.load import load_llm

    be = load_llm("hf:tiny", device="cpu", batch_size=4)
    assert isinstance(be, HFBackend) and isinstance(be, LLM) and be.batch_size == 4


def test_lora_wrapped_model_generates_with_exact_logprobs(backend):
    from peft import LoraConfig, get_peft_model

    from dreamgym.llm.presets import load_preset

    fresh, _ = load_preset("tiny", device="cpu")  # a copy: wrapping it leaves the shared fixture untouched
    lora = get_peft_model(fresh, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    be = HFBackend(lora, backend.tokenizer)
    o = be.generate(chats()[:1], SamplingParams(temperature=1.0, max_tokens=12, seed=0))[0]
    ref = forward_logprobs(lora, o.prompt_token_ids, o.token_ids)
    assert max(abs(a - b) for a, b in zip(ref, o.logprobs)) < 1e-4
    assert o.token_ids != backend.generate(chats()[:1], SamplingParams(temperature=1.0, max_tokens=12,
                                                                        seed=0))[0].token_ids



# ------------------------------------------------------------------------------ sharing what a batch holds in common

GROUP = ("Task: set the dial to 7 and press submit. Examples: ## 1 State: [dial] 4 [button] turn up "
         "[button] turn down [button] submit Action: turn up")
SHARED = [GROUP + " History: turn up", GROUP + " History: turn down ; submit", GROUP, "hi",
          GROUP + " History: turn up", "Task: turn up", "hi"]
"""Prompts of a dream batch in miniature: a group sharing a long prefix, repeated requests, unrelated ones."""


@pytest.mark.parametrize("packed", [True, False])
def test_shared_prompts_give_the_same_greedy_completions_from_fewer_rows_and_tokens(packed):
    """Identical requests are decoded once and shared prefixes prefilled once, yet each greedy completion is the
    one decoded without sharing, with log-probs still those of a plain forward pass; packed (rows prefilled
    unpadded, the CPU's default) or padded."""
    torch.set_num_threads(1)
    plain = HFBackend.from_preset("tiny", device="cpu")
    shared = HFBackend(plain.model, plain.tokenizer, share_prompts=True)
    shared.packed_prefill = packed
    params = SamplingParams(temperature=0, max_tokens=16)
    a, b = plain.generate(chats(SHARED), params), shared.generate(chats(SHARED), params)
    assert [x.token_ids for x in a] == [x.token_ids for x in b] and [x.text for x in a] == [x.text for x in b]
    assert [x.prompt_token_ids for x in a] == [x.prompt_token_ids for x in b]
    for o in b:
        ref = forward_logprobs(plain.model, o.prompt_token_ids, o.token_ids)
        assert max(abs(p - q) for p, q in zip(ref, o.logprobs)) < 1e-4
    st = shared.stats
    assert st["rows"] == 7 and st["rows_decoded"] == 5  # two repeats
    assert st["prefilled_tokens"] < st["prompt_tokens"] * 0.7  # the group's prefix once, not three times
    # Packed: no position computed for padding; padded: the prefixes' and the rests' padding.
    assert (st["prefill_positions"] == st["prefilled_tokens"]) == packed
    assert plain.stats["prefilled_tokens"] == plain.stats["prompt_tokens"]


def test_shared_prompts_merge_sampled_requests_only_with_the_same_seed():
    """Sampled requests with one seed draw one completion; with their own seeds they are decoded apart and draw
    what they draw without sharing (the uniforms are the row's own)."""
    torch.set_num_threads(1)
    plain = HFBackend.from_preset("tiny", device="cpu")
    shared = HFBackend(plain.model, plain.tokenizer, share_prompts=True)
    params = SamplingParams(temperature=1.0, max_tokens=16)
    same = shared.generate(chats([GROUP] * 4), params, seeds=[9] * 4)
    assert len({tuple(x.token_ids) for x in same}) == 1 and shared.stats["rows_decoded"] == 1
    seeds = [1, 2, 3, 4, 5, 6, 7]
    own_a = plain.generate(chats(SHARED), params, seeds=seeds)
    own_b = shared.generate(chats(SHARED), params, seeds=seeds)
    assert shared.stats["rows_decoded"] == 1 + 7
    assert [x.token_ids for x in own_a] == [x.token_ids for x in own_b]


def test_stats_count_generated_tokens_and_time_each_part_of_generation(backend):
    """`stats` counts the tokens the decoded rows generated and the batched decode steps, and times each part of
    generation (`TIMED`): the parts add up to no more than the call's wall time."""
    import time

    from dreamgym.llm.base import OutputConstraint
    from dreamgym.llm.hf import TIMED

    before = dict(backend.stats)
    params = SamplingParams(temperature=0, max_tokens=12, constraint=OutputConstraint(regex="[a-z ]{1,40}"))
    t0 = time.perf_counter()
    outs = backend.generate(chats(), params)
    wall = time.perf_counter() - t0
    delta = {k: backend.stats[k] - before[k] for k in backend.stats}
    assert delta["generated_tokens"] == sum(len(o.token_ids) for o in outs)
    widest = max(len(o.prompt_token_ids) for o in outs)
    assert delta["prefilled_tokens"] == sum(len(o.prompt_token_ids) for o in outs)
    assert delta["prefill_positions"] == len(outs) * widest  # one left-padded batch
    assert max(len(o.token_ids) for o in outs) - 1 <= delta["decode_steps"] <= max(len(o.token_ids) for o in outs)
    assert all(delta[k] >= 0 for k in TIMED)
    assert delta["prefill_s"] > 0 and delta["forward_s"] > 0 and delta["constraint_s"] > 0
    assert sum(delta[k] for k in TIMED) <= wall


def test_decoding_cache_writes_in_place_and_gives_the_plain_caches_completions(backend, monkeypatch):
    """The decode loop's KV cache (`kv_cache`) appends a step's keys into spare room instead of concatenating the whole
    cache each step, and follows a row selection; completions and log-probs are bit-identical to a plain
    `DynamicCache`'s, shared prefixes (row selection of the cache) included."""
    from transformers import DynamicCache

    from dreamgym.llm import hf

    cache = hf.kv_cache(backend.model.config)
    layer = cache.layers[0]
    k = torch.randn(3, 2, 5, 4)
    layer.update(k, k + 1)
    store = layer.keys.untyped_storage().data_ptr()
    steps = [torch.randn(3, 2, 1, 4) for _ in range(hf.KV_CHUNK)]
    for s in steps:
        layer.update(s, s + 1)
        if layer.keys.shape[-2] <= 5 + hf.KV_CHUNK:
            assert layer.keys.untyped_storage().data_ptr() == store  # no copy while the spare room lasts
    full = torch.cat([k, *steps], dim=-2)
    assert torch.equal(layer.keys, full) and torch.equal(layer.values, full + 1)
    layer.batch_select_indices(torch.tensor([2, 0]))
    s = torch.randn(2, 2, 1, 4)
    keys, values = layer.update(s, s + 1)
    assert torch.equal(keys, torch.cat([full[[2, 0]], s], dim=-2)) and torch.equal(values, keys + 1)

    shared = HFBackend(backend.model, backend.tokenizer, share_prompts=True)
    shared.packed_prefill = False  # packing needs this cache (its shapes are the plain cache's test below)
    params = SamplingParams(temperature=0, max_tokens=hf.KV_CHUNK + 20)  # past the first spare room
    ours = [b.generate(chats(SHARED), params) for b in (backend, shared)]
    monkeypatch.setattr(hf, "kv_cache", lambda config: DynamicCache(config=config))
    plain = [b.generate(chats(SHARED), params) for b in (backend, shared)]
    for a, b in zip(ours, plain):
        assert [x.token_ids for x in a] == [x.token_ids for x in b]
        assert [x.logprobs for x in a] == [x.logprobs for x in b]
