"""Shared trainer pieces: packing and masks, the policy forward against sampling log-probs, LoRA selection,
checkpoints."""

import math

import pytest
import torch

from dreamgym.llm.base import SamplingParams
from dreamgym.trainers.checkpoint import load_model_weights, save_model_weights
from dreamgym.trainers.common import (ModelConfig, OptimConfig, micro_batches, model_device, pack, per_token, policy_forward,
                                      prepare_policy)


def test_pack_masks_only_completion_tokens():
    p = pack([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], pad_id=0)
    assert p.input_ids.tolist() == [[5, 6, 7, 9, 10], [8, 11, 12, 13, 0]]
    assert p.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # position j predicts token j+1: row 0 trains at 2,3 (targets 9,10); row 1 at 0,1,2 (targets 11,12,13)
    assert p.loss_mask.tolist() == [[False, False, True, True], [True, True, True, False]]
    assert p.n_tokens == 9 and p.n_trained == 5
    vals = per_token(p, [[0.1, 0.2], [0.3, 0.4, 0.5]])
    assert torch.allclose(vals[p.loss_mask], torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert float(vals[~p.loss_mask].abs().sum()) == 0.0


def test_micro_batches_respect_the_token_budget():
    assert micro_batches([3, 3, 3, 5, 9], 10) == [[0, 1, 2], [3], [4]]
    assert micro_batches([20], 10) == [[0]]
    assert sum(micro_batches([4] * 10, 16), []) == list(range(10))


def test_policy_forward_reproduces_sampling_logprobs(tiny_backend):
    """Token-in/token-out: the trainer's log-probs of the sampled ids equal the ones recorded at sampling."""
    be = tiny_backend
    prompts = [be.prompt_ids([{"role": "user", "content": f"set the dial to {i}"}]) for i in range(4)]
    comps = be.generate_from_ids(prompts, SamplingParams(temperature=1.0, max_tokens=8, seed=0))
    packed = pack(prompts, [c.token_ids for c in comps], be.tokenizer.pad_token_id)
    with torch.no_grad():
        out = policy_forward(be.model, packed, entropy=True, state_hidden=True)
    sampled = per_token(packed, [c.logprobs for c in comps])
    assert torch.allclose(out.logp[packed.loss_mask], sampled[packed.loss_mask], atol=1e-4)
    assert out.entropy[packed.loss_mask].min() > 0 and out.state_hidden.shape == (4, be.model.config.hidden_size)
    # the same rows through the plain transformers forward (full logits) agree too
    with torch.no_grad():
        logits = be.model(input_ids=packed.input_ids, attention_mask=packed.attention_mask).logits
    full = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, packed.input_ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(full[packed.loss_mask], out.logp[packed.loss_mask], atol=1e-5)


def test_lora_selection_and_adapter_checkpoint(tiny_backend, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    be = tiny_backend
    # Auto (lora=None) decides by size: the tiny model (and checkpoints made from it) is fully fine-tuned, a
    # 135M-parameter model gets adapters; an explicit setting always wins.
    with torch.device("meta"):
        big = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                           num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3))
    assert not ModelConfig(preset="runs/x/checkpoint/model").use_lora(be.model)
    assert ModelConfig(preset="smollm2-135m").use_lora(big) and ModelConfig(lora=True).use_lora(be.model)
    assert not ModelConfig(lora=False).use_lora(big)
    model = prepare_policy(be.model, ModelConfig(preset="tiny", lora=True, lora_r=4))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.01)
    assert save_model_weights(model, be.tokenizer, tmp_path) == "lora"
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.zero_()
    load_model_weights(model, tmp_path)
    assert all(torch.equal(saved[n], p) for n, p in model.named_parameters() if "lora_" in n)


def test_full_checkpoint_is_a_loadable_hf_model(tiny_backend, tmp_path):
    from transformers import AutoModelForCausalLM

    be = tiny_backend
    model = prepare_policy(be.model, ModelConfig(preset="tiny"))
    assert model_device(model).type == "cpu" and all(p.requires_grad for p in model.parameters())
    assert save_model_weights(model, be.tokenizer, tmp_path) == "full"
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    sd = model.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in again.state_dict().items())


def test_schedule_warms_up_then_holds_or_decays_to_its_floor():
    from dreamgym.trainers.common import OptimConfig, lr_scale

    const = OptimConfig(warmup_steps=4)
    assert [lr_scale(const, s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cos = OptimConfig(warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    scales = [lr_scale(cos, s, total_steps=12) for s in range(14)]
    assert scales[:3] == [0.5, 1.0, 1.0] and scales[12] == scales[13] == pytest.approx(0.1)
    assert scales[7] == pytest.approx(0.55)  # half way through the decay
    assert all(a >= b for a, b in zip(scales[1:], scales[2:]))
    with pytest.raises(ValueError, match="total number"):
        lr_scale(cos, 5)


def test_a_supervised_step_accumulated_over_micro_batches_equals_one_big_batch(tiny_backend):
    import copy

    from dreamgym.trainers.common import OptimConfig, make_optimizer, supervised_step, trainable_parameters

    rows = [([5, 6, 7, 8], [9, 10]), ([5, 6], [11, 12, 13]), ([7] * 9, [14]), ([8, 9, 10], [15, 16, 17, 18])]
    grads = []
    for budget in (10_000, 12):  # one forward, then one row (or two short ones) per forward
        model = copy.deepcopy(tiny_backend.model).float().train()
        params = trainable_parameters(model)
        cfg = OptimConfig(lr=0.0, micro_batch_tokens=budget, max_grad_norm=0.0)
        opt = make_optimizer(params, cfg)
        captured = {}
        # The step zeroes the gradients after stepping: keep them as the optimiser sees them.
        opt.register_step_pre_hook(lambda o, a, k, captured=captured, params=params: captured.update(
            {i: p.grad.clone() for i, p in enumerate(params) if p.grad is not None}))
        st = supervised_step(model, opt, params, cfg, rows, pad_id=0, device=torch.device("cpu"))
        grads.append((st["loss"], captured))
    (loss_a, ga), (loss_b, gb) = grads
    assert loss_a == pytest.approx(loss_b, rel=1e-5) and ga.keys() == gb.keys() and ga
    assert all(torch.allclose(ga[i], gb[i], atol=1e-6, rtol=1e-4) for i in ga)


def test_qlora_trains_adapters_on_a_4bit_base(tmp_path):
    """quantize=4bit (bitsandbytes): the base's linear layers hold NF4 weights, only LoRA adapters train, the SFT loss
    falls on expert demonstrations, and the saved adapter reloads on the quantized base. Refused without LoRA."""
    pytest.importorskip("bitsandbytes")
    from test_sft import demos

    from dreamgym.config import ConfigError, validate_config
    from dreamgym.rl.builders import build_backend
    from dreamgym.trainers.common import TrainerConfig
    from dreamgym.trainers.sft import SFTConfig, SFTTrainer

    with pytest.raises(ConfigError, match="quantize"):
        validate_config(TrainerConfig(model=ModelConfig(quantize="4bit")))
    cfg = TrainerConfig(model=ModelConfig(lora=True, lora_r=8, quantize="4bit"), seed=0,
                        optim=OptimConfig(lr=3e-3, micro_batch_tokens=16384))
    validate_config(cfg)
    backend = build_backend(cfg, device="cpu")
    tr = SFTTrainer(backend, SFTConfig(epochs=1, batch_size=64), cfg)
    kinds = {type(m).__name__ for m in tr.model.modules()}
    assert "Linear4bit" in kinds
    trainable = {n for n, p in tr.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    exs, _ = tr.examples(demos(n=4))
    first = tr.train_step(exs)["loss"]
    for _ in range(5):
        last = tr.train_step(exs)["loss"]
    assert math.isfinite(last) and last < 0.8 * first
    tr.save(tmp_path / "ckpt")
    again = build_backend(cfg, init=str(tmp_path / "ckpt"), device="cpu")
    assert "Linear4bit" in {type(m).__name__ for m in again.model.modules()}
    ids = torch.tensor([exs[0].prompt_ids])
    with torch.no_grad():
        assert torch.allclose(again.model(ids).logits, tr.model(ids).logits, atol=1e-4)
