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


def test_recipe_rejects_an_unknown_mode_and_a_real_row_without_a_budget_before_training(tmp_path):
    with pytest.raises(ValueError, match="mode 'sim'"):
        Recipe("dial", tmp_path).run_method("x", algo="grpo", mode="sim", tasks_per_iteration=2, group_size=2)
    # a real phase without a real-step budget used to play nothing and report the start's figures as a trained row
    from dreamgym.config import ConfigError

    for mode in ("real", "s2r"):
        with pytest.raises(ConfigError, match=r"^budget: x: a (real|s2r) row plays real steps"):
            Recipe("dial", tmp_path).run_method("x", algo="grpo", mode=mode, tasks_per_iteration=2, group_size=2)
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
    kept = sft_start_note({"step": 2240, "replay_success": 0.141, "criterion_met": False,
                           "kept_best": {"step": 1280.0, "replay_success": 0.141, "last_replay_success": 0.054}}, q)
    assert "probability 0.141" in kept and "best check, step 1280" in kept and "0.054" in kept


def test_seeds_and_workers_are_checked_at_start_up_naming_the_field():
    import os

    from dreamgym.config import ConfigError, load_config
    from dreamgym.commands.recipe import QuickstartConfig
    from dreamgym.commands.table import TableConfig

    cores = len(os.sched_getaffinity(0))
    for cls in (QuickstartConfig, TableConfig):
        with pytest.raises(ConfigError, match="seeds: seed 1 is listed twice"):
            load_config(cls, None, ["seeds=[0,1,1]"])
        with pytest.raises(ConfigError, match="^workers: "):
            load_config(cls, None, [f"seeds={list(range(cores + 1))}", f"workers={cores + 1}", "threads=1"])
        with pytest.raises(ConfigError, match="^workers: "):  # two threads each: half as many runs at a time
            load_config(cls, None, [f"seeds={list(range(cores))}", f"workers={cores}", "threads=2"])
        with pytest.raises(ConfigError, match="seeds"):
            load_config(cls, None, ["seeds=[-1]"])
        assert load_config(cls, None, ["seeds=[0,1]", "workers=1", "threads=1"]).seeds == [0, 1]


SMOKE = ["offline_episodes=10", "dream_iterations=1", "budget=16", "real_iterations=1", "eval_tasks=3",
         "eval_seeds=[0,1]", "group_size=2", "tasks_per_iteration=2", "threads=1"]
"""A recipe at smoke size: seconds per row on one thread (it learns nothing; the mechanics are what is tested)."""


def _cli(args, tmp_path, env_extra=None):
    import os
    import subprocess
    import sys

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "dreamgym.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)


def _seed_rows(seed_folder):
    """Every finished row's record and episodes in a seed's run folder, as the recipe saved them."""
    rows = {}
    for f in seed_folder.glob("*/result.json"):
        saved = json.loads(f.read_text())
        rows[f.parent.name] = saved
    return rows


def test_an_interrupted_table_over_seeds_resumes_without_rerunning_finished_rows(tmp_path):
    """`table --seeds` killed after its second finished row: run again, it reads the finished rows back (their files
    untouched), runs the rest, and the report over seeds is computed on the per-seed episodes on disk."""
    from dreamgym.rl.compare import aggregate_runs, compare_paired, improvement_interval, outcomes, task_scores

    run = tmp_path / "t"
    args = ["table", "--env", "dial", "--no-progress", "--seeds", "0,1", "--workers", "1", f"run_dir={run}",
            "rows=[SFT,GRPO real,DreamGym GRPO]", "sft_epochs=1", "em_epochs=0.05", "eval_every=0",
            "em_overrides=[max_steps=2]", *SMOKE]
    killed = _cli(args, tmp_path, {"DREAMGYM_CRASH_AT": "recipe.row_saved@2"})
    assert killed.returncode != 0 and "seed 0: a run's process died" in killed.stderr + killed.stdout
    done = _seed_rows(run / "seed-0")
    assert sorted(done) == ["grpo-real", "sft"] and not (run / "seed-1" / "sft" / "result.json").exists()
    stamps = {name: (run / "seed-0" / name / "result.json").stat().st_mtime_ns for name in done}

    resumed = _cli(args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = resumed.stdout
    assert log.count("finished in an earlier run with these settings") == 2  # seed 0's SFT and GRPO real only
    for name, stamp in stamps.items():
        assert (run / "seed-0" / name / "result.json").stat().st_mtime_ns == stamp
    summary = json.loads((run / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["sft_start"] == "per seed"
    per_seed = {s: _seed_rows(run / f"seed-{s}") for s in (0, 1)}
    slugs = {"SFT": "sft", "GRPO real": "grpo-real", "DreamGym GRPO": "dreamgym-grpo"}
    played = {row: {s: outcomes(per_seed[s][slug]["episodes"], run=s) for s in (0, 1)} for row, slug in slugs.items()}
    for row, runs in played.items():
        got = summary["over_seeds"][row]
        want = aggregate_runs(runs)
        assert (got["n"], got["n_success"], got["per_run"], got["iqm"]) == (
            want.n, want.n_success, want.per_run, want.iqm)
        assert got["n"] == sum(per_seed[s][slugs[row]]["result"]["n"] for s in (0, 1)) == 2 * 3 * 2
        if row != "SFT":
            pooled = [{k: v for s in (0, 1) for k, v in played[name][s].items()} for name in ("SFT", row)]
            paired = compare_paired(*pooled).to_dict()
            assert {k: got["vs"]["SFT"][k] for k in paired} == paired
            p, lo, hi = improvement_interval(task_scores(runs)[1], task_scores(played["SFT"])[1])
            assert (got["vs"]["SFT"]["probability_of_improvement"], got["vs"]["SFT"]["poi_low"],
                    got["vs"]["SFT"]["poi_high"]) == (p, lo, hi)
            assert got["vs"]["SFT"]["n"] == 2 * 3 * 2 and got["vs"]["SFT"]["unpaired_first"] == 0
    report = (run / "report.md").read_text()
    assert "| method | seed 0 | seed 1 |" in report and "| DreamGym GRPO |" in report
    assert (run / "results.md").read_text() == report
    # The wall time says what the table cost, not only what the resumed run had left: seed 0's report names the rows
    # it read back, and the report over seeds sums every row's own wall time.
    assert "(SFT, GRPO real read back from an earlier run" in (run / "seed-0" / "report.md").read_text()
    rows_wall = sum(per_seed[s][slug]["result"]["wall_time_s"] for s in (0, 1) for slug in slugs.values())
    assert f"the rows' own wall times summed over the seeds {rows_wall:.0f} s" in report


def test_the_quickstart_over_two_seeds_in_parallel_writes_per_seed_runs_and_the_report_over_seeds(tmp_path):
    """`quickstart --seeds 0,1 --workers 2`: each seed a whole one-seed quickstart in seed-<s>/ (its own SFT start and
    report), their output in their logs, and at the top the per-seed table, the aggregates and the paired tests,
    with the text under them derived from the figures."""
    run = tmp_path / "q"
    res = _cli(["quickstart", "--no-progress", "--seeds", "0,1", "--workers", "2", f"run_dir={run}", "em_steps=2",
                "sft_epochs=1", *SMOKE], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    for s in (0, 1):
        seed_report = (run / f"seed-{s}" / "report.md").read_text()
        assert "| method | real data (transitions) |" in seed_report  # the one-seed report, unchanged in shape
        log = (run / f"seed-{s}" / "log.txt").read_text()
        assert "== SFT policy on the demonstrations" in log
        # --no-progress reaches each seed's own process: no library's bar (transformers' "Loading weights") either
        assert "Loading weights" not in log and "it/s]" not in log, log[-2000:]
        assert f"seed {s} finished" in res.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["workers"] == 2
    assert list(summary["over_seeds"]) == ["SFT", "DreamGym GRPO", "DreamGym-S2R GRPO", "GRPO real"]
    assert set(summary["over_seeds"]["DreamGym GRPO"]["vs"]) == {"SFT", "GRPO real"}
    assert summary["over_seeds"]["GRPO real"]["vs"].keys() == {"SFT"}
    report = (run / "report.md").read_text()
    assert "vs SFT: only it / only SFT (p); P(it > SFT) [95% CI]" in report and "IQM % [95% CI]" in report
    assert "- DreamGym GRPO: above SFT in " in report and "the SFT start is per seed" in report
    assert report.rstrip().splitlines()[-1].startswith("Machine (seed 0's run): ")


def test_an_off_guard_leaves_every_rows_hashed_config_as_before_the_guard():
    """The SFT, DPO and real rows hash the whole `dreamgym train` config, dream section included: an off guard must
    not enter it (run folders from before the guard read their rows back), an on guard must."""
    from dreamgym.commands.row_hash import row_config
    from dreamgym.commands.train import TrainConfig
    from dreamgym.dream.guard import AuditGuardConfig

    off = row_config(TrainConfig())
    assert "guard" not in off["dream"] and off["dream"]["audit_episodes"] == 4
    # the same for the fields that came later at their defaults: a uniform draw, no SFT anchor
    cfg = TrainConfig()
    assert "task_strata" not in off and "anchor" not in off["grpo"] and "anchor" not in off["ppo"]
    grpo = dataclasses.replace(cfg.grpo, anchor=dataclasses.replace(cfg.grpo.anchor, coef=0.5, data="demos.jsonl"))
    later = row_config(dataclasses.replace(cfg, task_strata="target", grpo=grpo))
    assert later["task_strata"] == "target" and later["grpo"]["anchor"]["coef"] == 0.5
    cfg = TrainConfig()
    on = dataclasses.replace(cfg, dream=dataclasses.replace(cfg.dream, guard=AuditGuardConfig(
        max_false_success_rate=0.5)))
    assert row_config(on)["dream"]["guard"]["max_false_success_rate"] == 0.5


def test_a_row_that_starts_from_another_hashes_no_path_so_a_moved_run_folder_reads_it_back():
    """An RL or DPO row's `init` is a path inside the run folder (the row it starts from, whose own hash the row's
    holds): it stays out of the hashed config; the SFT row's `init` (the base model the user chose) stays in."""
    from dreamgym.commands.row_hash import row_config
    from dreamgym.commands.train import TrainConfig

    here, moved = TrainConfig(init="runs/a/seed-1/sft/final"), TrainConfig(init="/elsewhere/seed-1/sft/final")
    assert row_config(here, from_row=True) == row_config(moved, from_row=True)
    assert row_config(here) != row_config(moved)


def test_a_guarded_dream_row_counts_its_audit_steps_as_real_and_an_unguarded_row_is_unchanged(tmp_path):
    """A dream row with `dream_guard` on chose its policy with the audit's real steps: they are its real steps (and
    real data), with `audit_real_steps` beside them; without the guard the audit's steps stay apart (0 real steps),
    the record holds no `audit_real_steps`, and the row's settings hash is the one it had before the guard existed."""
    from em_helpers import trained_dial_model
    from model_fixtures import warm_model_dir

    from dreamgym.commands.recipe import QuickstartConfig
    from dreamgym.commands.row_hash import dream_settings
    from dreamgym.dream import audit
    from dreamgym.dream.guard import AuditGuardConfig
    from dreamgym.dream.world import DreamConfig

    r = Recipe("dial", tmp_path, eval_tasks=2, eval_seeds=[0], progress=False, threads=1)
    r.collect_offline(10, "oracle:0.5,random:0.5", "oracle")
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "final").symlink_to(warm_model_dir())  # the start every RL row begins from
    em = trained_dial_model()
    never = AuditGuardConfig(max_false_success_rate=1.0, min_wins=1)  # on, but a rate above 1 cannot happen
    rows = {}
    for name, guard in (("off", AuditGuardConfig()), ("on", never)):
        q = QuickstartConfig(dream_guard=guard)
        rows[name] = r.run_method(name, algo="grpo", mode="dream", em=em, dream=q.dream(), dream_iterations=1,
                                  tasks_per_iteration=2, group_size=2)
    audited = {name: audit.real_steps(tmp_path / name / audit.AUDIT_FILE) for name in rows}
    assert audited["on"] > 0 and audited["off"] > 0  # both audited; only the guarded row counts them
    assert rows["on"]["real_steps"] == rows["on"]["audit_real_steps"] == audited["on"]
    assert rows["on"]["real_data"] == r.real_offline + audited["on"]
    assert rows["off"]["real_steps"] == 0 and rows["off"]["real_data"] == r.real_offline
    assert "audit_real_steps" not in rows["off"]
    # the hash: the guard-off row's dream settings are today's (no DreamConfig: None; an ablation's without the
    # guard's key), the guarded one's hold the guard
    off = QuickstartConfig(dream_guard=AuditGuardConfig())
    assert off.dream() is None and r.fingerprints["off"] != r.fingerprints["on"]
    ablation = DreamConfig(em_overrides=["use_retrieval=false"])
    assert off.dream(ablation) is ablation
    # the quickstart guards its dream rows by default (at 0.5), the table does not
    from dreamgym.commands.table import TableConfig

    assert QuickstartConfig().dream_guard == AuditGuardConfig(max_false_success_rate=0.5)
    assert TableConfig().dream() is None
    # Settings that cannot change a row's figures stay out of its hash: the guard while off, `ground_states` while on
    # (no recipe family defines `ground_state`), so run folders from before them read back.
    left_out = ("guard", "ground_states")
    assert dream_settings(ablation) == {k: v for k, v in dataclasses.asdict(ablation).items() if k not in left_out}
    assert dream_settings(dataclasses.replace(ablation, ground_states=False))["ground_states"] is False
    assert dream_settings(QuickstartConfig(dream_guard=never).dream(ablation))["guard"] == dataclasses.asdict(never)


def test_the_guard_is_set_from_the_recipe_command_line_and_checked_by_name():
    from dreamgym.commands.recipe import QuickstartConfig
    from dreamgym.commands.table import TableConfig
    from dreamgym.config import ConfigError, describe, load_config

    for cls in (QuickstartConfig, TableConfig):
        cfg = load_config(cls, None, ["dream_guard.max_false_success_rate=0.5"])
        assert cfg.dream().guard.max_false_success_rate == 0.5 and cfg.dream().audit_episodes > 0
        with pytest.raises(ConfigError) as e:
            load_config(cls, None, ["dream_guard.window=0"])
        assert e.value.field == "dream_guard.window"
        assert "dream_guard.max_false_success_rate" in describe(cls)
