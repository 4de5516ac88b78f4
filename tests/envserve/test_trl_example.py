"""examples/trl_grpo_served_dream.py: TRL's GRPOTrainer trains the tiny preset for a few steps on multi-turn episodes
of the served synthetic dial (TRL's `rollout_func`): the loss is finite and the parameters move; a run whose
parameters do not move exits 1; each prompt chooses its own episode, however TRL groups prompts.

Run against the pinned TRL (1.16.0) and the oldest `trl>=1.0` allows (1.0.0, installed with `pip install --no-deps
--target DIR trl==1.0.0` and put first on PYTHONPATH): both pass."""

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from dreamgym.envserve.server import EnvServerConfig, start_env_server
from em_helpers import trained_dial_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo_served_dream.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("trl_grpo_served_dream", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_grpo_trains_on_the_served_synthetic_environment(example, tmp_path):
    cfg = EnvServerConfig(env="dial", dream=True, em=str(trained_dial_model()), device="cpu", batch_wait_ms=20)
    with start_env_server(cfg) as srv:
        result = example.run(srv.url, out_dir=str(tmp_path / "trl"), steps=2, group=4, prompts_per_step=2,
                             max_turns=3)
    assert len(result["losses"]) == 2 and all(math.isfinite(x) for x in result["losses"])
    assert result["parameters_changed"] and example.nothing_trained(result) is None
    assert result["device"] == example.pick_device()  # chosen, not hard-coded
    # The rollouts' steps reached the server together: experience-model batches of several sessions.
    assert result["server_batches"]["largest_batch"] > 1


def test_a_run_whose_parameters_do_not_move_exits_1(example, tmp_path, capsys):
    rc = example.main(["--em", str(trained_dial_model()), "--out", str(tmp_path / "trl"), "--steps", "1",
                       "--max-turns", "2", "--learning-rate", "0", "--device", "cpu"])
    assert rc == 1 and "nothing trained: the parameters did not change" in capsys.readouterr().err


def test_each_prompt_chooses_its_episode_whatever_the_grouping(example):
    """One episode per prompt given, in order; equal prompts play the same episode, different ones their own: no
    reliance on TRL repeating a prompt, nor on a prompt ending in a number."""
    from dreamgym.llm.presets import load_preset

    model, tok = load_preset("tiny", device="cpu")
    tok.padding_side = "left"
    with start_env_server(EnvServerConfig(env="dial")) as srv:
        rollout = example.make_rollout_func(srv.url, max_turns=1, max_action_tokens=2)
        prompts = ["Play the dial.", "Another dial, please", "Play the dial."]
        out = rollout(prompts, SimpleNamespace(model=model, processing_class=tok))
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["env_reward"]) == 3
    assert out["prompt_ids"][0] == out["prompt_ids"][2] != out["prompt_ids"][1]
    assert example.episode_seed(prompts[0]) != example.episode_seed(prompts[1])



def test_the_policy_reads_dreamgym_s_agent_prompt_so_a_dreamgym_policy_carries_over(example):
    """The first turn's prompt is `dreamgym train`'s for the same task and state (`build_messages` in the chat
    template, token for token), and later turns continue the same chat; the reply format is DreamGym's."""
    from dreamgym.agent import SYSTEM_PROMPT, build_messages
    from dreamgym.envs import family
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.presets import load_preset

    model, tok = load_preset("tiny", device="cpu")
    tok.padding_side = "left"
    with start_env_server(EnvServerConfig(env="dial")) as srv:
        rollout = example.make_rollout_func(srv.url, max_turns=2, max_action_tokens=4)
        out = rollout(["Play the dial."], SimpleNamespace(model=model, processing_class=tok))
    env = family("dial").make_env("train")
    obs, info = env.reset(seed=example.episode_seed("Play the dial."))
    request = build_messages(info["task"], [], obs, info["admissible_actions"], example.AGENT)
    assert out["prompt_ids"][0] == HFBackend(model, tok).prompt_ids(request)  # what dreamgym train would send
    assert SYSTEM_PROMPT in tok.decode(out["prompt_ids"][0])
    feedback = [t for t, m in zip(out["completion_ids"][0], out["env_mask"][0]) if m == 0]
    if feedback:  # the episode went on: the next state came as a user turn of the same chat
        assert "Current state:" in tok.decode(feedback) and "Task:" not in tok.decode(feedback)
