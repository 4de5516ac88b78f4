"""Several processes (torchrun, gloo on the CPU): two ranks take the same optimizer steps as one process on the same
global batch — an experience-model SFT run, an agent SFT run and GRPO iterations (rollouts included) end with the
same weights — and a rank killed mid-iteration stops the job with an error naming it while the last checkpoint still
loads and resumes. Experience-model SFT, agent SFT, PPO and DPO also run with sharded weights (`model.fsdp=true`)
against the same one-process baselines; tests/utils/test_fsdp.py has the rest of sharding."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.utils import distributed

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["--env", "dial", "--no-progress", "tensorboard=false", "eval_max_tasks=5", "eval_at_start=false",
         "agent.history=0", "rollout.max_new_tokens=10", "rollout.max_episode_steps=4", "optim.lr=1e-3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], procs: int, cwd: Path, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    """`dreamgym ARGS` in one plain process, or under torchrun with `procs` ranks (gloo, one thread each)."""
    launch = [sys.executable, "-m", "dreamgym.cli"] if procs == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr", "127.0.0.1",
         "--master_port", str(_free_port()), "-m", "dreamgym.cli"]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "DREAMGYM_DIST_TIMEOUT_S": "120",
                **(env or {})}
    proc = subprocess.run(launch + args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture
def warm_dir(tmp_path, warm_backend):  # noqa: F811
    """The tests' warm-started tiny dial policy as a model folder, what `init=` takes."""
    folder = tmp_path / "warm"
    warm_backend.model.save_pretrained(str(folder))
    warm_backend.tokenizer.save_pretrained(str(folder))
    return folder


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    moved = 0
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=2e-5, rtol=1e-4, msg=k)
        moved += not torch.equal(a[k], base[k])
    assert moved > 0  # training changed the weights, so agreeing says something


def _assert_same_update(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> None:
    """Two runs made the same update: every tensor moved, and the two updates, taken over all weights together,
    differ by under 10% of the update's norm. Not elementwise, nor per tensor: Adam divides by the root of the
    squared gradient, so an element whose gradient is near zero turns a float-order difference in its sum into an
    update difference of up to the learning rate, and in a small tensor a few such elements dominate. Measured after
    two GRPO steps, one vs two ranks: 0.9% per tensor at most in the default setting; with MKL_NUM_THREADS=2 in the
    caller's environment (default or AVX2 kernels alike) 3.6% over all weights (cosine 0.9994) while layer 2's
    64-element input norm alone differed by 17.9% (2026-12-05)."""
    assert a.keys() == b.keys()
    for k in a:
        assert float((a[k] - base[k]).norm()) > 0, k
    ua = torch.cat([(a[k] - base[k]).flatten() for k in a])
    ub = torch.cat([(b[k] - base[k]).flatten() for k in a])
    assert float((ua - ub).norm()) <= 0.10 * float(ua.norm()), float((ua - ub).norm() / ua.norm())


def test_without_a_launcher_every_share_is_the_whole():
    assert not distributed.active() and distributed.world() == 1 and distributed.is_main()
    assert distributed.mine([1, 2, 3]) == [1, 2, 3] and distributed.my_range(5) == (0, 5)
    assert distributed.share_rows(4) == (0, 4) and distributed.sum_floats([1.5]) == [1.5]


@pytest.mark.slow
def test_two_ranks_train_the_experience_model_as_one_process(tmp_path):
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl
    from dreamgym.llm.presets import load_preset

    write_jsonl(tmp_path / "data.jsonl", dial_trajectories(12))
    args = ["train-em", "--data", str(tmp_path / "data.jsonl"), "env=dial", "max_steps=4", "batch_size=8",
            "em.embedder=hashing", "threads=1", "task_writing=0", "optim.micro_batch_tokens=1024",
            "heldout.share=0"]  # every rank trains on the same data; no held-out report of a 4-step model
    _run(args + [f"out={tmp_path / 'one'}"], 1, tmp_path)
    _run(args + [f"out={tmp_path / 'two'}"], 2, tmp_path)
    _run(args + [f"out={tmp_path / 'sharded'}", "model.fsdp=true"], 2, tmp_path)  # FSDP2: dreamgym/utils/fsdp.py
    base = {k: v.float() for k, v in load_preset("tiny", device="cpu")[0].state_dict().items()}
    one, two = _weights(tmp_path / "one" / "model"), _weights(tmp_path / "two" / "model")
    _assert_same(one, two, {k: base[k] for k in one})
    _assert_same(one, _weights(tmp_path / "sharded" / "model"), {k: base[k] for k in one})
    log = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").open()]
    assert log and json.loads((tmp_path / "two" / "train_summary.json").read_text())["processes"] == 2


@pytest.mark.slow
def test_two_ranks_run_sft_as_one_process(tmp_path):
    from dreamgym.llm.presets import load_preset

    sft = ["train", "--algo", "sft", *TRAIN, "sft.epochs=2", "sft.batch_size=16", "demo_episodes=12", "optim.lr=3e-3"]
    _run(sft + [f"run_dir={tmp_path / 'sft1'}"], 1, tmp_path)
    _run(sft + [f"run_dir={tmp_path / 'sft2'}"], 2, tmp_path)
    # Sharded: one micro-batch per step, so rank 1 runs a zero-weighted repeat of it in every step (lockstep).
    _run(sft + [f"run_dir={tmp_path / 'sft2f'}", "model.fsdp=true"], 2, tmp_path)
    one = _weights(tmp_path / "sft1" / "final" / "model")
    base = {k: v.float() for k, v in load_preset("tiny", device="cpu")[0].state_dict().items()}
    _assert_same(one, _weights(tmp_path / "sft2" / "final" / "model"), {k: base[k] for k in one})
    _assert_same(one, _weights(tmp_path / "sft2f" / "final" / "model"), {k: base[k] for k in one})
    state = torch.load(tmp_path / "sft2f" / "final" / "trainer_state.pt", weights_only=False)
    assert state["optimizer_format"] == "names"  # by parameter name: resumes at any world size


@pytest.mark.slow
def test_two_ranks_run_grpo_as_one_process_then_survive_a_killed_rank(tmp_path, warm_dir):
    """Two GRPO iterations from a warm SFT start: the same rollouts (each iteration's metrics agree) and the same
    weights with one and two ranks. Then rank 1 is killed after its rollouts in iteration 2: the job stops naming
    the rank, the checkpoint of iteration 1 loads, and --resume finishes the run."""
    from dreamgym.trainers.checkpoint import read_meta, resumable_checkpoint

    start = _weights(warm_dir)

    grpo = ["train", "--algo", "grpo", *TRAIN, f"init={warm_dir}", "iterations=2", "group_size=4",
            "tasks_per_iteration=5", "save_every=1", "agent.show_admissible=false",
            f"agent.system_prompt={DIAL_AGENT.system_prompt}", f"rollout.max_episode_steps={DIAL_ROLLOUT.max_episode_steps}"]
    _run(grpo + [f"run_dir={tmp_path / 'g1'}"], 1, tmp_path)
    _run(grpo + [f"run_dir={tmp_path / 'g2'}"], 2, tmp_path)
    rows = [[r for line in (tmp_path / g / "metrics.jsonl").open() if "rollout/episodes" in (r := json.loads(line))]
            for g in ("g1", "g2")]
    assert len(rows[0]) == len(rows[1]) == 2
    for r1, r2 in zip(*rows):
        for k in ("rollout/success_rate", "rollout/mean_reward", "rollout/gen_tokens", "losses/samples",
                  "losses/groups", "losses/zero_variance_groups", "rollout/real_steps_used",
                  "losses/optimizer_steps", "losses/loss"):
            assert r1[k] == pytest.approx(r2[k], rel=1e-4, abs=1e-6), k
    assert sum(r["losses/optimizer_steps"] for r in rows[0]) > 0  # the update ran
    # The evaluation, split between the ranks, plays the same episodes as one process.
    evals = [[json.loads(line) for line in (tmp_path / g / "eval.jsonl").open()] for g in ("g1", "g2")]
    assert [(e["tag"], e["n"], e["n_success"], e["mean_steps"], e["episodes"]) for e in evals[0]] == \
        [(e["tag"], e["n"], e["n_success"], e["mean_steps"], e["episodes"]) for e in evals[1]]
    _assert_same_update(_weights(tmp_path / "g1" / "final" / "model"), _weights(tmp_path / "g2" / "final" / "model"),
                        start)

    # Rank 1 dies between its rollouts and the update of iteration 2.
    run = tmp_path / "killed"
    proc = _run(grpo + [f"run_dir={run}"], 2, tmp_path, check=False,
                env={"DREAMGYM_CRASH_AT": "loop.rolled_out@2", "DREAMGYM_CRASH_RANK": "1"})
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "rank 1" in out or "rank: 1" in out, out[-3000:]
    ckpt = resumable_checkpoint(run / "checkpoint")
    assert ckpt is not None and read_meta(ckpt)["iteration"] == 1
    _run(grpo + [f"run_dir={run}", "--resume"], 2, tmp_path)
    assert json.loads((run / "summary.json").read_text())["iterations"] == 2
    _assert_same_update(_weights(run / "final" / "model"), _weights(tmp_path / "g2" / "final" / "model"), start)


@pytest.mark.slow
def test_two_ranks_run_ppo_and_dpo_as_one_process(tmp_path, warm_dir):
    """PPO (critic head, GAE, several minibatches) and DPO (preference pairs) from the warm start: the same
    optimizer steps on one and two ranks."""
    start = _weights(warm_dir)
    from dreamgym.commands.collect import run_episode
    from dreamgym.data import write_jsonl
    from dreamgym.envs import dial

    env = dial.make_env("train")  # preference pairs: a won and a lost episode of the same task
    write_jsonl(tmp_path / "pairs.jsonl", [run_episode(env, dial.POLICIES[p](seed=i), seed=i, task=t, policy_name=p)
                                           for i, t in enumerate(dial.make_tasks("train")[:6])
                                           for p in ("expert", "random", "random")])
    policy = [f"init={warm_dir}", "agent.show_admissible=false",
              f"agent.system_prompt={DIAL_AGENT.system_prompt}", f"rollout.max_episode_steps={DIAL_ROLLOUT.max_episode_steps}"]
    jobs = {"ppo": ["train", "--algo", "ppo", *TRAIN, *policy, "iterations=1", "tasks_per_iteration=5",
                    "group_size=2", "ppo.epochs=2", "ppo.minibatches=2"],
            "dpo": ["train", "--algo", "dpo", *TRAIN, *policy, f"data={tmp_path / 'pairs.jsonl'}", "dpo.epochs=1",
                    "dpo.pairs_per_step=4"]}
    for name, args in jobs.items():
        _run(args + [f"run_dir={tmp_path / (name + '1')}"], 1, tmp_path)
        _run(args + [f"run_dir={tmp_path / (name + '2')}"], 2, tmp_path)
        # Sharded (FSDP2): PPO's value head stays replicated beside the sharded policy; DPO's full-fine-tuning
        # reference is a sharded frozen copy.
        _run(args + [f"run_dir={tmp_path / (name + '2f')}", "model.fsdp=true"], 2, tmp_path)
        for run in ("2", "2f"):
            one, two = (json.loads((tmp_path / f"{name}{n}" / "summary.json").read_text()) for n in ("1", run))
            assert one["optimizer_steps"] == two["optimizer_steps"] > 0, name
            _assert_same_update(_weights(tmp_path / f"{name}1" / "final" / "model"),
                                _weights(tmp_path / f"{name}{run}" / "final" / "model"), start)


@pytest.mark.slow
def test_two_ranks_dream_with_one_buffer_owner(tmp_path, warm_dir):
    """GRPO in the experience model on two ranks: each rank dreams its share of the tasks, rank 0's persistent
    replay buffer ends up with the synthetic transitions of both ranks' episodes, and only rank 0 writes."""
    from em_helpers import trained_dial_model

    from dreamgym.data import load_trajectories
    from dreamgym.experience import checkpoint_buffer

    em = trained_dial_model()
    run = tmp_path / "dream"
    _run(["train", "--algo", "grpo", *TRAIN, f"init={warm_dir}", "mode=dream", f"dream.em={em}",
          "dream.iterations=2", "dream.curriculum.n_seeds=1", "group_size=2", "tasks_per_iteration=4",
          "agent.show_admissible=false", f"agent.system_prompt={DIAL_AGENT.system_prompt}", "rollout.max_episode_steps=4",
          f"run_dir={run}"], 2, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["real_steps_used"] == 0 and summary["iterations"] == 2
    episodes = [t for it in (1, 2) for t in load_trajectories(run / "dream_episodes" / f"it-{it:05d}.jsonl")]
    assert len(episodes) == 16 and all(t.source == "synthetic" for t in episodes)
    stored = {(t.state, t.action, t.next_state) for t in checkpoint_buffer(em, path=run / "buffer").transitions()
              if t.source == "synthetic"}
    played = {(s.state, s.action, s.next_state) for t in episodes for s in t.steps}
    # Tasks are shared contiguously: rank 1 played the second half of each iteration's episodes.
    rank1 = {(s.state, s.action, s.next_state) for t in episodes[4:8] + episodes[12:] for s in t.steps}
    rank0 = {(s.state, s.action, s.next_state) for t in episodes[:4] + episodes[8:12] for s in t.steps}
    assert stored and stored <= played and stored & (rank1 - rank0)  # rank 1's own steps reached rank 0's buffer
