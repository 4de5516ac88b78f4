"""The DreamGym loop end to end on the dial: RL inside the experience model touches no real step, grows the
replay buffer with synthetic transitions and runs the curriculum; S2R then stays inside its real-step budget."""

import json

import pytest

from em_helpers import trained_dial_model
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT, tiny_preset, warm_backend, warm_state  # noqa: F401

from dreamgym.curriculum import CurriculumConfig
from dreamgym.envs import family
from dreamgym.pipeline import (DreamConfig, DreamWorld, Recipe, render_table, s2r_task_pool, train_dream,
                               train_s2r_real)
from dreamgym.rollout import RealStepBudget
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
    pool = s2r_task_pool(family("dial"), tmp_path, 4)  # this dream's log decides which real tasks S2R draws
    hist = train_s2r_real(trainer, family("dial"), iterations=5, tasks_per_iteration=4, seed=0, progress=False,
                          pool=pool)
    assert 0 < trainer.budget.used <= 60  # a hard cap: the rollout engine refuses steps past it
    assert all(m["episodes_failed"] == 0 for m in hist)  # no episode was cut off by the budget


def test_render_table_lists_every_method():
    row = {"success_rate": 0.5, "ci_low": 0.3, "ci_high": 0.7, "mean_reward": 0.5, "mean_steps": 3.0,
           "real_data": 100, "real_steps": 10, "wall_time_s": 5}
    text = render_table({"SFT": row, "DreamGym GRPO": dict(row, real_steps=0)}, "t")
    assert "| SFT | 100 | 10 | 50.0 [30.0, 70.0] |" in text and "| DreamGym GRPO | 100 | 0 |" in text


def test_recipe_sets_one_thread_count_for_every_stage_and_the_experience_model(tmp_path):
    """The experience model's training used to set torch's threads as a side effect, so a recipe resumed with its
    model on disk trained SFT on a different count than a fresh one, and that alone moved the dial's SFT by 22
    points (README section 1). The recipe now sets the count and hands the same one to the experience model."""
    import threadpoolctl
    import torch

    from dreamgym import experience_model
    from dreamgym.config import load_config

    before = torch.get_num_threads()
    blas_before = threadpoolctl.threadpool_limits(limits=None, user_api="blas")  # restores the BLAS pools on exit
    try:
        for n in (1, 2):
            r = Recipe("dial", tmp_path / str(n), threads=n)
            assert torch.get_num_threads() == n
            # numpy's BLAS too: its thread count changes retrieval scores' rounding, and so the trained weights.
            blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
            assert blas and all(i["num_threads"] == n for i in blas)
            em_cfg = load_config(experience_model.TrainEMConfig, None, ["env=dial", *r.em_overrides])
            assert em_cfg.threads == n
        # The caller's own experience-model override still wins for that stage.
        r = Recipe("dial", tmp_path / "3", threads=2, em_overrides=["threads=1"])
        assert load_config(experience_model.TrainEMConfig, None, ["env=dial", *r.em_overrides]).threads == 1
    finally:
        torch.set_num_threads(before)
        blas_before.restore_original_limits()


def test_report_names_the_machine_it_ran_on(tmp_path):
    """report.md ends with the machine line and summary.json keeps the record: the same recipe lands elsewhere on
    other kernels (README section 1), so a table without its machine cannot be checked."""
    r = Recipe("dial", tmp_path)
    r.results["SFT"] = {"success_rate": 0.5, "ci_low": 0.3, "ci_high": 0.7, "mean_reward": 0.5, "mean_steps": 3.0,
                        "real_data": 100, "real_steps": 0, "wall_time_s": 5}
    text = r.write_report("t")
    machine = json.loads((tmp_path / "summary.json").read_text())["machine"]
    assert (tmp_path / "report.md").read_text() == text and "| SFT | 100 | 0 | 50.0 [30.0, 70.0] |" in text
    assert text.rstrip().splitlines()[-1].startswith("Machine: ")
    assert f"with {machine['torch_cpu_capability']} kernels" in text


def test_quickstart_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.pipeline import QuickstartConfig

    for bad, field_name in (("em_steps=0", "em_steps"), ("em_batch_size=-1", "em_batch_size"),
                            ("sft_batch_size=0", "sft_batch_size"), ("offline_episodes=3", "offline_episodes"),
                            ("threads=0", "threads")):
        with pytest.raises(ConfigError, match=field_name):
            load_config(QuickstartConfig, None, [bad])


def test_table_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.table import TableConfig

    for bad, field_name in ((["budget=8"], "budget"), (["sft_policy=shopper"], "sft_policy"),
                            (["eval_seeds=[]"], "eval_seeds"), (["eval_temperature=-1"], "eval_temperature"),
                            (["threads=0"], "threads")):
        with pytest.raises(ConfigError, match=field_name):
            load_config(TableConfig, None, bad)
    cfg = load_config(TableConfig, None, ["sft_policy=shopper", "offline_mix=shopper:0.5,noisy:0.3,random:0.2"])
    assert cfg.sft_policy == "shopper"


def test_dream_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.pipeline import DreamConfig

    for bad, field_name in (("reward_from=oracle", "dream.reward_from"), ("initial_state=x", "dream.initial_state"),
                            ("task_pool=some", "dream.task_pool")):
        with pytest.raises(ConfigError, match=field_name.replace(".", r"\.")):
            load_config(DreamConfig, None, [bad])
    assert load_config(DreamConfig, None, ["reward_from=model"]).reward_from == "model"


def test_dream_task_pool_data_keeps_the_train_tasks_with_real_steps_in_the_buffer(tmp_path):
    from dreamgym import collect as C
    from dreamgym.config import ConfigError
    from dreamgym.config import load_config
    from dreamgym.data import read_jsonl, write_jsonl
    from dreamgym.experience_model import buffer_for, em_transitions
    from dreamgym.pipeline import DreamConfig, dream_tasks

    C.collect("dial", {"oracle": 1}, 5, tmp_path / "d.jsonl", seed=0, progress=False)
    trajs = list(read_jsonl(tmp_path / "d.jsonl"))
    buf = buffer_for(em_transitions(trajs, history=2), "hashing")
    train = list(family("dial").tasks("train"))
    got = dream_tasks(train, buf, "dial", "data")
    assert sorted(t.id for t in got) == sorted({t.task.id for t in trajs}) and len(got) == 5 < len(train)
    assert dream_tasks(train, buf, "dial", "all") == train
    with pytest.raises(ConfigError, match=r"dream\.task_pool=data"):
        dream_tasks(list(family("dial").tasks("test")), buf, "dial", "data")
    # a trajectory file: the train tasks it played (a fixed set real RL can train on too, `real_task_pool`)
    write_jsonl(tmp_path / "two.jsonl", trajs[:2])
    got = dream_tasks(train, buf, "dial", str(tmp_path / "two.jsonl"))
    assert [t.id for t in got] == [t.id for t in train if t.id in {trajs[0].task.id, trajs[1].task.id}]
    assert load_config(DreamConfig, None, [f"task_pool={tmp_path / 'two.jsonl'}"]).task_pool.endswith("two.jsonl")
    with pytest.raises(ConfigError, match=r"dream\.task_pool="):
        dream_tasks(list(family("dial").tasks("test")), buf, "dial", str(tmp_path / "two.jsonl"))


def test_s2r_task_pool_aims_at_tasks_with_mixed_dream_outcomes_else_all(tmp_path, capsys):
    from dreamgym.curriculum import Curriculum
    from dreamgym.envs.dial import parse_goal
    from dreamgym.pipeline import DREAM_VARIANCE_LOG

    fam = family("dial")
    train = fam.tasks("train")
    assert [t.id for t in s2r_task_pool(fam, tmp_path, 2)] == [t.id for t in train]  # no dream log: all tasks
    cur = Curriculum(train, parse_goal, None, CurriculumConfig(enabled=False), log_path=tmp_path / DREAM_VARIANCE_LOG)
    cur.update(0, {train[0].id: [1, 0], train[1].id: [0, 0], train[2].id: [1, 1], train[3].id: [0, 1]},
               {t.id: t for t in train})
    cur.update(1, {train[3].id: [1, 1], train[1].id: [0, 1]}, {t.id: t for t in train})  # the latest group decides
    assert [t.id for t in s2r_task_pool(fam, tmp_path, 2)] == [train[0].id, train[1].id]
    assert "2 of" in capsys.readouterr().out
    # fewer mixed tasks than one iteration draws: all train tasks, not the same two over and over
    assert len(s2r_task_pool(fam, tmp_path, 3)) == len(train)
    assert "drawing from all" in capsys.readouterr().out
