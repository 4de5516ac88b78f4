"""The recipe and its reports: one thread count for every stage, the results table, the machine line, and the
quickstart/table configs rejecting bad values by name."""

import dataclasses
import json

import pytest

from dreamgym.commands.recipe import Recipe, render_table


def test_render_table_lists_every_method():
    row = {"success_rate": 0.5, "ci_low": 0.3, "ci_high": 0.7, "mean_reward": 0.5, "mean_steps": 3.0,
           "real_data": 100, "real_steps": 10, "wall_time_s": 5}
    text = render_table({"SFT": row, "DreamGym GRPO": dict(row, real_steps=0)}, "t")
    assert "| SFT | 100 | 10 | 50.0 [30.0, 70.0] |" in text and "| DreamGym GRPO | 100 | 0 |" in text


def test_recipe_sets_one_thread_count_for_every_stage_and_the_experience_model(tmp_path):
    """The experience model's training used to set torch's threads as a side effect, so a recipe resumed with its
    model on disk trained SFT on a different count than a fresh one, and that alone moved the dial's SFT by 22
    points (docs/log/01-quickstart.md). The recipe now sets the count and hands the same one to the experience model."""
    import threadpoolctl
    import torch

    from dreamgym.config import apply_overrides

    before = torch.get_num_threads()
    blas_before = threadpoolctl.threadpool_limits(limits=None, user_api="blas")  # restores the BLAS pools on exit
    try:
        for n in (1, 2):
            r = Recipe("dial", tmp_path / str(n), threads=n)
            assert torch.get_num_threads() == n
            # numpy's BLAS too: its thread count changes retrieval scores' rounding, and so the trained weights.
            blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
            assert blas and all(i["num_threads"] == n for i in blas)
            assert r.em_base.threads == n
        # The caller's own experience-model override still wins for that stage.
        r = Recipe("dial", tmp_path / "3", threads=2, em_overrides=["threads=1"])
        # (no offline data yet: the file check of `data` is the experience model's stage's)
        assert apply_overrides(dataclasses.replace(r.em_base, data=""), r.em_overrides).threads == 1
    finally:
        torch.set_num_threads(before)
        blas_before.restore_original_limits()


def test_report_names_the_machine_it_ran_on(tmp_path):
    """report.md ends with the machine line and summary.json keeps the record: the same recipe lands elsewhere on
    other kernels (docs/log/01-quickstart.md), so a table without its machine cannot be checked."""
    r = Recipe("dial", tmp_path)
    r.results["SFT"] = {"success_rate": 0.5, "ci_low": 0.3, "ci_high": 0.7, "mean_reward": 0.5, "mean_steps": 3.0,
                        "real_data": 100, "real_steps": 0, "wall_time_s": 5}
    text = r.write_report("t")
    machine = json.loads((tmp_path / "summary.json").read_text())["machine"]
    assert (tmp_path / "report.md").read_text() == text and "| SFT | 100 | 0 | 50.0 [30.0, 70.0] |" in text
    assert text.rstrip().splitlines()[-1].startswith("Machine: ")
    assert f"with {machine['torch_cpu_capability']} kernels" in text


def test_recipe_rejects_an_unknown_mode_before_training(tmp_path):
    with pytest.raises(ValueError, match="mode 'sim'"):
        Recipe("dial", tmp_path).run_method("x", algo="grpo", mode="sim")
    assert not (tmp_path / "x").exists()


def test_quickstart_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.commands.recipe import QuickstartConfig

    for bad, field_name in (("em_steps=0", "em_steps"), ("em_batch_size=-1", "em_batch_size"),
                            ("sft_batch_size=0", "sft_batch_size"), ("offline_episodes=3", "offline_episodes"),
                            ("threads=-1", "threads")):
        with pytest.raises(ConfigError, match=field_name):
            load_config(QuickstartConfig, None, [bad])


def test_table_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.commands.table import TableConfig

    for bad, field_name in ((["budget=8"], "budget"), (["sft_policy=shopper"], "sft_policy"),
                            (["eval_seeds=[]"], "eval_seeds"), (["eval_temperature=-1"], "eval_temperature"),
                            (["threads=-1"], "threads")):
        with pytest.raises(ConfigError, match=field_name):
            load_config(TableConfig, None, bad)
    cfg = load_config(TableConfig, None, ["sft_policy=shopper", "offline_mix=shopper:0.5,noisy:0.3,random:0.2"])
    assert cfg.sft_policy == "shopper"


def test_the_quickstart_report_says_where_sft_stopped_and_whether_the_criterion_was_met():
    """The SFT row is the start of every RL row: the report says at which step and replay probability it stopped, and
    warns when the epoch cap ended it short of `sft_stop_at` (a weaker start than the defaults intend)."""
    from dreamgym.config import load_config
    from dreamgym.commands.recipe import QuickstartConfig, sft_start_note

    q = load_config(QuickstartConfig, None, [])
    met = sft_start_note({"step": 985, "replay_success": 0.2006, "criterion_met": True}, q)
    assert "step 985" in met and "0.201 >= sft_stop_at=0.2" in met and "every 5 steps" in met
    short = sft_start_note({"step": 2368, "replay_success": 0.12, "criterion_met": False}, q)
    assert "cap (2368 steps, sft_epochs=64)" in short and "short of sft_stop_at=0.2" in short
