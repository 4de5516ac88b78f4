"""The DreamGym loop end to end on the dial: RL inside the experience model touches no real step, grows the
replay buffer with synthetic transitions and runs the curriculum; S2R then stays inside its real-step budget."""

import json

import pytest

from em_helpers import trained_dial_model
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT, tiny_preset, warm_backend, warm_state  # noqa: F401

from dreamgym.curriculum import CurriculumConfig
from dreamgym.dream import DreamConfig, DreamWorld, train_dream, train_s2r_real
from dreamgym.envs import family
from dreamgym.budget import RealStepBudget
from dreamgym.trainers.common import OptimConfig, TrainerConfig
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer


def test_dream_then_s2r(tmp_path, warm_backend):  # noqa: F811
    em = trained_dial_model()
    world = DreamWorld("dial", DreamConfig(em=str(em), curriculum=CurriculumConfig(n_seeds=2)), tmp_path, seed=0,
                       device="cpu")
    seed_size = len(world.buffer)
    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-4), agent=DIAL_AGENT, rollout=DIAL_ROLLOUT)
    budget = RealStepBudget(0)
    trainer = GRPOTrainer(warm_backend, GRPOConfig(group_size=4, tasks_per_iteration=4), common, budget=budget)
    hist = train_dream(trainer, world, iterations=2, tasks_per_iteration=4, algo="grpo", run_dir=tmp_path,
                       logger=None, progress=False)
    assert len(hist) == 2 and budget.used == 0  # dream mode: zero real steps
    assert hist[-1]["synthetic_steps"] > 0
    assert len(world.buffer) > seed_size  # the buffer co-evolves with the agent's synthetic transitions
    synthetic = [t for t in world.buffer.transitions() if t.source == "synthetic"]
    assert synthetic and all(t.policy_version for t in synthetic)
    log = [json.loads(line) for line in (tmp_path / "curriculum.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in log] == [0, 1] and all("variance" in row for row in log)
    assert "curriculum/valid_share" in hist[-1]

    trainer.budget = RealStepBudget(60)  # one group of 4 x 12 turns fits, a second never does
    # this dream's log (in tmp_path) decides which real tasks S2R draws
    hist = train_s2r_real(trainer, family("dial"), tmp_path, env="dial", iterations=5, tasks_per_iteration=4,
                          group_size=4, max_turns=DIAL_ROLLOUT.max_turns, seed=0, progress=False)
    assert 0 < trainer.budget.used <= 60  # a hard cap: the rollout engine refuses steps past it
    assert all(m["episodes_failed"] == 0 for m in hist)  # no episode was cut off by the budget


def test_dream_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.train import TrainConfig

    for bad, field_name in (("reward_from=oracle", "reward_from"), ("initial_state=x", "initial_state"),
                            ("task_pool=some", "task_pool")):
        with pytest.raises(ConfigError, match=f"^{field_name}: "):
            load_config(DreamConfig, None, [bad])
        # within `dreamgym train` the field is named from the top
        with pytest.raises(ConfigError, match=f"^dream\\.{field_name}: "):
            load_config(TrainConfig, None, [f"dream.{bad}"])
    assert load_config(DreamConfig, None, ["reward_from=model"]).reward_from == "model"
