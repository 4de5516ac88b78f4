"""Sharded training (FSDP2 over gloo on the CPU): the lockstep padding, the start-up refusals, a sharded model in
one process against an unsharded copy (steps, gathered generation, full state; on CUDA in the GPU check), LoRA GRPO
on two sharded ranks through a killed rank and `--resume`, and `accelerate launch` with the shipped FSDP config.
The sharded runs of agent SFT, DPO, PPO and experience-model SFT sit beside their one-process baselines in
`tests/utils/test_distributed.py`."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from test_distributed import TRAIN, _assert_same_update, _run, warm_dir  # noqa: F401
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.utils import distributed
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
    from dreamgym.commands.train import TrainConfig

    # Each error names the field as the command line spells it.
    with pytest.raises(ConfigError, match="^model.fsdp: a 4-bit base"):
        load_config(TrainConfig, None, ["model.fsdp=true", "model.lora=true", "model.quantize=4bit"])
    with pytest.raises(ConfigError, match="^ppo.critic:"):
        load_config(TrainConfig, None, ["model.fsdp=true", "algo=ppo", "ppo.critic=separate"])
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accelerate launch --config_file configs/accelerate/fsdp.yaml
    with pytest.raises(ConfigError, match="^model.fsdp: accelerate launched"):
        load_config(TrainConfig, None, [])
    with pytest.raises(ConfigError, match="^model.fsdp: accelerate launched"):
        load_config(TrainEMConfig, None, ["env=dial", "data=x.jsonl"])
    assert load_config(TrainConfig, None, ["model.fsdp=true"]).model.fsdp


@pytest.fixture
def group_of_one(monkeypatch):
    """This process as a process group of one (what `model.fsdp=true` without a launcher joins), left again after
    the test; the rendezvous variables it sets are removed so later subprocesses do not inherit its port."""
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(k, "")  # recorded, so the teardown puts back the environment as it was
        monkeypatch.delenv(k)
    distributed.init(fsdp=True)
    yield
    distributed.shutdown()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sharded_model_steps_generates_and_saves_like_the_plain_one(group_of_one, device):
    """In one process, on the CPU and (in the GPU check) on CUDA under bf16 autocast: a sharded tiny model holds
    DTensor weights, takes the same supervised steps as an unsharded copy, generates the same greedy text inside
    `gathered` (several forwards that need no collective), and its gathered full state is the copy's weights."""
    import copy

    from dreamgym.utils import fsdp
    from dreamgym.llm.base import SamplingParams
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.presets import load_preset
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


@pytest.mark.slow
def test_sharded_lora_grpo_matches_and_resumes_after_a_killed_rank(tmp_path, warm_dir):  # noqa: F811
    """LoRA GRPO from the warm start on two sharded ranks, rollouts generated in the gathered policy (ranks end
    their episodes at different turns), the updates sharded; rank 1 is killed after its rollouts of iteration 2, the
    job stops naming it, and --resume from the sharded checkpoint (adapter and by-name optimizer state) finishes.
    Both iterations have the rollouts and figures of one unsharded process, and the final adapter is its adapter."""
    from dreamgym.trainers.checkpoint import read_meta, resumable_checkpoint

    grpo = ["train", "--algo", "grpo", *TRAIN, f"init={warm_dir}", "iterations=2", "group_size=4",
            "tasks_per_iteration=5", "save_every=1", "agent.show_admissible=false", "model.lora=true",
            "optim.lr=1e-2", f"agent.system_prompt={DIAL_AGENT.system_prompt}",
            f"rollout.max_episode_steps={DIAL_ROLLOUT.max_episode_steps}"]
    _run(grpo + [f"run_dir={tmp_path / 'plain'}"], 1, tmp_path)

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

    run = tmp_path / "killed"
    proc = _run(grpo + [f"run_dir={run}", "model.fsdp=true"], 2, tmp_path, check=False,
                env={"DREAMGYM_CRASH_AT": "loop.rolled_out@2", "DREAMGYM_CRASH_RANK": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and ("rank 1" in out or "local_rank: 1" in out), out[-3000:]
    ckpt = resumable_checkpoint(run / "checkpoint")
    assert ckpt is not None and read_meta(ckpt)["iteration"] == 1
    _run(grpo + [f"run_dir={run}", "model.fsdp=true", "--resume"], 2, tmp_path)
    # Iteration 1 before the kill and iteration 2 after the resume: the rollouts and figures of one process.
    rows = [[r for line in (tmp_path / g / "metrics.jsonl").open() if "rollout/episodes" in (r := json.loads(line))]
            for g in ("plain", "killed")]
    assert len(rows[0]) == len(rows[1]) == 2 and sum(r["losses/optimizer_steps"] for r in rows[0]) > 0
    for r1, r2 in zip(*rows):
        for k in ("rollout/success_rate", "rollout/gen_tokens", "losses/samples", "rollout/real_steps_used",
                  "losses/optimizer_steps", "losses/loss"):
            assert r1[k] == pytest.approx(r2[k], rel=1e-4, abs=1e-6), k
    same_adapter(adapter("plain"), adapter("killed"))


@pytest.mark.slow
def test_accelerate_launch_with_the_shipped_fsdp_config(tmp_path):
    """`accelerate launch --config_file configs/accelerate/fsdp.yaml` starts two sharded ranks (gloo here) that
    train, and rank 0 writes a plain Hugging Face folder (without model.fsdp=true the config check refuses the run:
    `test_fsdp_refuses_what_it_cannot_shard`)."""
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

    ran = launch("model.fsdp=true")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["optimizer_steps"] > 0
    assert (tmp_path / "run" / "final" / "model" / "model.safetensors").is_file()
