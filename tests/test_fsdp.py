"""Sharded training (FSDP2 over gloo on the CPU): a run with `model.fsdp=true` takes the same optimizer steps as an
unsharded one-process run — agent SFT with uneven micro-batch shares, GRPO with LoRA adapters (rollouts in the
gathered policy), DPO with a sharded frozen reference, experience-model SFT — in one process and on two ranks; its
checkpoints are plain Hugging Face / PEFT folders; a killed rank stops the job and `--resume` on the sharded
checkpoint finishes it with the same update."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from test_distributed import TRAIN, _assert_same, _assert_same_update, _run, _weights, warm_dir  # noqa: F401
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT, tiny_preset, warm_backend, warm_state  # noqa: F401

from dreamgym import distributed
from dreamgym.config import ConfigError, load_config


def test_lockstep_shares_pad_with_zero_weighted_repeats(monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: 2)
    for r, want in ((0, [(0, True), (2, True), (4, True)]), (1, [(1, True), (3, True), (0, False)])):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        monkeypatch.setattr(distributed, "mine", lambda items, r=r: list(items[r::2]))
        assert distributed.share(list(range(5)), lockstep=True) == want
        assert distributed.share(list(range(5))) == [x for x in want if x[1]]  # unsharded: no padding
    assert distributed.share([], lockstep=True) == []


def test_fsdp_refuses_what_it_cannot_shard(monkeypatch):
    from dreamgym.experience.train import TrainEMConfig
    from dreamgym.train import TrainConfig

    with pytest.raises(ConfigError, match="model.fsdp"):
        load_config(TrainConfig, None, ["model.fsdp=true", "model.lora=true", "model.quantize=4bit"])
    with pytest.raises(ConfigError, match="ppo.critic"):
        load_config(TrainConfig, None, ["model.fsdp=true", "algo=ppo", "ppo.critic=separate"])
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accelerate launch --config_file configs/accelerate/fsdp.yaml
    with pytest.raises(ConfigError, match="model.fsdp"):
        load_config(TrainConfig, None, [])
    with pytest.raises(ConfigError, match="fsdp"):
        load_config(TrainEMConfig, None, ["env=dial", "data=x.jsonl"])
    assert load_config(TrainConfig, None, ["model.fsdp=true"]).model.fsdp


@pytest.fixture
def group_of_one(monkeypatch):
    """This process as a process group of one (what `model.fsdp=true` without a launcher joins), left again after
    the test; the rendezvous variables it sets are removed so later subprocesses do not inherit its port."""
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    distributed.init(fsdp=True)
    yield
    distributed.shutdown()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sharded_model_steps_generates_and_saves_like_the_plain_one(group_of_one, device):
    """In one process, on the CPU and (in the GPU check) on CUDA under bf16 autocast: a sharded tiny model holds
    DTensor weights, takes the same supervised steps as an unsharded copy, generates the same greedy text inside
    `gathered` (several forwards that need no collective), and its gathered full state is the copy's weights."""
    import copy

    from dreamgym import fsdp
    from dreamgym.llm.base import SamplingParams
    from dreamgym.llm.hf import HFBackend
    from dreamgym.presets import load_preset
    from dreamgym.trainers.common import (ModelConfig, OptimConfig, make_optimizer, prepare_policy, supervised_step,
                                          trainable_parameters)

    base, tok = load_preset("tiny", device=device)
    plain = prepare_policy(copy.deepcopy(base), ModelConfig(preset="tiny", lora=False))
    sharded = prepare_policy(copy.deepcopy(base), ModelConfig(preset="tiny", lora=False, fsdp=True))
    assert fsdp.is_sharded(sharded) and all(fsdp.is_dtensor(p) for p in sharded.parameters())
    cfg = OptimConfig(lr=1e-3, micro_batch_tokens=64)  # several micro-batches per step
    rows = [(tok(f"set the dial to {i}")["input_ids"], tok(f"turn up {i % 3}")["input_ids"]) for i in range(6)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    losses = []
    for m in (plain, sharded):
        params = trainable_parameters(m)
        opt = make_optimizer(params, cfg)
        m.train()
        losses.append([supervised_step(m, opt, params, cfg, rows, pad, torch.device(device))["loss"]
                       for _ in range(3)])
        m.eval()
    assert losses[0] == pytest.approx(losses[1], rel=1e-3) and losses[0][-1] < losses[0][0]
    full = fsdp.full_state(sharded)
    for k, v in plain.state_dict().items():
        if k in full:
            torch.testing.assert_close(full[k].float(), v.detach().cpu().float(), atol=1e-4, rtol=1e-3, msg=k)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    prompts = [[{"role": "user", "content": f"dial {i}"}] for i in range(3)]
    want = [c.text for c in HFBackend(plain, tok).generate(prompts, greedy)]
    with fsdp.gathered(sharded):
        got = [c.text for c in HFBackend(sharded, tok).generate(prompts, greedy)]
    assert got == want


def _base(names) -> dict[str, torch.Tensor]:
    from dreamgym.presets import load_preset

    base = {k: v.float() for k, v in load_preset("tiny", device="cpu")[0].state_dict().items()}
    return {k: base[k] for k in names}


@pytest.mark.slow
def test_sharded_sft_matches_one_unsharded_process(tmp_path):
    """One row per micro-batch and 15 rows per step: rank 1 has 7 micro-batches to rank 0's 8 in every full step
    and runs a zero-weighted repeat of one of them."""
    sft = ["train", "--algo", "sft", *TRAIN, "sft.epochs=2", "sft.batch_size=15", "demo_episodes=12", "optim.lr=3e-3",
           "optim.micro_batch_tokens=1"]
    _run(sft + [f"run_dir={tmp_path / 'plain'}"], 1, tmp_path)
    _run(sft + [f"run_dir={tmp_path / 'fsdp1'}", "model.fsdp=true"], 1, tmp_path)  # no launcher: a group of one
    _run(sft + [f"run_dir={tmp_path / 'fsdp2'}", "model.fsdp=true"], 2, tmp_path)
    one = _weights(tmp_path / "plain" / "final" / "model")
    for run in ("fsdp1", "fsdp2"):
        # Measured: at most 3.9e-5 apart elementwise after 2 epochs of steps at lr 3e-3, one process or two.
        _assert_same_update(one, _weights(tmp_path / run / "final" / "model"), _base(one))
        state = torch.load(tmp_path / run / "final" / "trainer_state.pt", weights_only=False)
        assert state["optimizer_format"] == "names"
    assert yaml.safe_load((tmp_path / "fsdp2" / "config.yaml").read_text())["model"]["fsdp"] is True


@pytest.mark.slow
def test_sharded_lora_grpo_matches_and_resumes_after_a_killed_rank(tmp_path, warm_dir):  # noqa: F811
    """LoRA GRPO from the warm start, rollouts generated in the gathered policy (ranks end their episodes at
    different turns), the update sharded: the same metrics and adapter as one unsharded process. Rank 1 killed
    after its rollouts of iteration 2: the job stops naming it, and --resume from the sharded checkpoint (adapter
    and by-name optimizer state) finishes with the same adapter."""
    from dreamgym.trainers.common import read_meta, resumable_checkpoint

    grpo = ["train", "--algo", "grpo", *TRAIN, f"init={warm_dir}", "iterations=2", "grpo.group_size=4",
            "grpo.tasks_per_iteration=5", "save_every=1", "agent.show_admissible=false", "model.lora=true",
            "optim.lr=1e-2", f"agent.system_prompt={DIAL_AGENT.system_prompt}",
            f"rollout.max_turns={DIAL_ROLLOUT.max_turns}"]
    _run(grpo + [f"run_dir={tmp_path / 'plain'}"], 1, tmp_path)
    _run(grpo + [f"run_dir={tmp_path / 'fsdp'}", "model.fsdp=true"], 2, tmp_path)
    rows = [[r for line in (tmp_path / g / "metrics.jsonl").open() if "episodes" in (r := json.loads(line))]
            for g in ("plain", "fsdp")]
    assert len(rows[0]) == len(rows[1]) == 2 and sum(r["optimizer_steps"] for r in rows[0]) > 0
    for r1, r2 in zip(*rows):
        for k in ("success_rate", "gen_tokens", "samples", "real_steps_used", "optimizer_steps", "loss"):
            assert r1[k] == pytest.approx(r2[k], rel=1e-4, abs=1e-6), k

    def adapter(run: str) -> dict[str, torch.Tensor]:
        return load_file(str(tmp_path / run / "final" / "adapter" / "adapter_model.safetensors"))

    def same_adapter(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
        """LoRA's B starts at 0, so B is its whole update (the 3%-of-the-update test); A starts at a random init
        this test does not see, so A agrees within 1% of its norm."""
        b_keys = [k for k in a if "lora_B" in k]
        assert a.keys() == b.keys() and b_keys
        _assert_same_update({k: a[k] for k in b_keys}, {k: b[k] for k in b_keys},
                            {k: torch.zeros_like(a[k]) for k in b_keys})
        for k in a.keys() - set(b_keys):
            assert float((a[k] - b[k]).norm()) <= 0.01 * float(a[k].norm()), k

    plain = adapter("plain")
    same_adapter(plain, adapter("fsdp"))

    run = tmp_path / "killed"
    proc = _run(grpo + [f"run_dir={run}", "model.fsdp=true"], 2, tmp_path, check=False,
                env={"DREAMGYM_CRASH_AT": "grpo.rolled_out@2", "DREAMGYM_CRASH_RANK": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and ("rank 1" in out or "local_rank: 1" in out), out[-3000:]
    ckpt = resumable_checkpoint(run / "checkpoint")
    assert ckpt is not None and read_meta(ckpt)["iteration"] == 1
    _run(grpo + [f"run_dir={run}", "model.fsdp=true", "--resume"], 2, tmp_path)
    same_adapter(plain, adapter("killed"))


@pytest.mark.slow
def test_sharded_dpo_ppo_and_experience_model_match_one_process(tmp_path, warm_dir):  # noqa: F811
    """DPO with full fine-tuning (its frozen reference a sharded copy), PPO with its value head (replicated, summed
    beside the sharded policy) and a KL reference, and experience-model SFT, each on two sharded ranks against one
    unsharded process."""
    from em_helpers import dial_trajectories

    from dreamgym.collect import run_episode
    from dreamgym.data import write_jsonl
    from dreamgym.envs import dial

    env = dial.make_env("train")
    write_jsonl(tmp_path / "pairs.jsonl", [run_episode(env, dial.POLICIES[p](seed=i), seed=i, task=t, policy_name=p)
                                           for i, t in enumerate(dial.make_tasks("train")[:6])
                                           for p in ("expert", "random", "random")])
    dpo = ["train", "--algo", "dpo", *TRAIN, f"init={warm_dir}", "agent.show_admissible=false",
           f"agent.system_prompt={DIAL_AGENT.system_prompt}", f"rollout.max_turns={DIAL_ROLLOUT.max_turns}",
           f"data={tmp_path / 'pairs.jsonl'}", "dpo.epochs=1", "dpo.pairs_per_step=3"]
    ppo = ["train", "--algo", "ppo", *TRAIN, f"init={warm_dir}", "agent.show_admissible=false",
           f"agent.system_prompt={DIAL_AGENT.system_prompt}", f"rollout.max_turns={DIAL_ROLLOUT.max_turns}",
           "iterations=1", "ppo.tasks_per_iteration=5", "ppo.episodes_per_task=2", "ppo.epochs=2",
           "ppo.minibatches=2", "ppo.kl_coef=0.05"]
    for name, args in (("dpo", dpo), ("ppo", ppo)):
        _run(args + [f"run_dir={tmp_path / (name + '1')}"], 1, tmp_path)
        _run(args + [f"run_dir={tmp_path / (name + '2')}", "model.fsdp=true"], 2, tmp_path)
        one, two = (json.loads((tmp_path / f"{name}{n}" / "summary.json").read_text()) for n in (1, 2))
        assert one["optimizer_steps"] == two["optimizer_steps"] > 0, name
        _assert_same_update(_weights(tmp_path / f"{name}1" / "final" / "model"),
                            _weights(tmp_path / f"{name}2" / "final" / "model"), _weights(warm_dir))

    write_jsonl(tmp_path / "data.jsonl", dial_trajectories(12))
    em = ["train-em", "--data", str(tmp_path / "data.jsonl"), "env=dial", "max_steps=4", "batch_size=8",
          "model.embedder=hashing", "threads=1", "task_writing=0", "micro_batch_tokens=1024"]
    _run(em + [f"out={tmp_path / 'em1'}"], 1, tmp_path)
    _run(em + [f"out={tmp_path / 'em2'}", "fsdp=true"], 2, tmp_path)
    one = _weights(tmp_path / "em1" / "model")
    _assert_same(one, _weights(tmp_path / "em2" / "model"), _base(one))


@pytest.mark.slow
def test_accelerate_launch_with_the_shipped_fsdp_config(tmp_path):
    """`accelerate launch --config_file configs/accelerate/fsdp.yaml` starts the ranks (gloo here); without
    model.fsdp=true the run stops at start-up naming the field, with it two sharded ranks train and rank 0 writes
    a plain Hugging Face folder."""
    import os
    import subprocess
    import sys

    from test_distributed import ROOT

    def launch(*extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "configs" / "accelerate" / "fsdp.yaml"), "--num_processes", "2", "-m", "dreamgym.cli",
               "train", "--algo", "sft", "--env", "dial", "--no-progress", "tensorboard=false", "eval_at_start=false",
               "eval_max_tasks=2", "sft.epochs=1", "demo_episodes=8", f"run_dir={tmp_path / 'run'}", *extra]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "DREAMGYM_DIST_TIMEOUT_S": "120"}
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    refused = launch()
    assert refused.returncode != 0 and "model.fsdp" in refused.stdout + refused.stderr
    ran = launch("model.fsdp=true")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["optimizer_steps"] > 0
    assert (tmp_path / "run" / "final" / "model" / "model.safetensors").is_file()
