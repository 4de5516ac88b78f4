"""`dreamgym train` and `dreamgym eval` end to end on the Dial env (tiny sizes: this checks the plumbing —
run directory, checkpoints, --resume, init from another run, evaluation — not learning)."""

import json

from dreamgym.cli import COMMANDS
from dreamgym.envs import family
from dreamgym.rl.evaluate import main as eval_main
from dreamgym.utils.metric_names import NAMESPACES
from dreamgym.utils.metrics import read_metrics
from dreamgym.commands.train import main as train_main

FAST = ["--no-progress", "tensorboard=false", "eval_max_tasks=2", "agent.history=0", "agent.show_admissible=false",
        "rollout.max_new_tokens=10", "rollout.max_episode_steps=4", "optim.lr=1e-3"]


def _names(run_dir):
    """Every metric name the run logged, each checked to be under one of the namespaces."""
    names = {k for r in read_metrics(run_dir / "metrics.jsonl") for k in r if k not in ("step", "time")}
    assert all(k.startswith(NAMESPACES) for k in names), sorted(k for k in names if not k.startswith(NAMESPACES))
    return names


def test_train_sft_then_grpo_with_resume_then_eval(tmp_path, capsys):
    assert COMMANDS["train"][0] == "dreamgym.commands.train:main"
    sft_dir = tmp_path / "sft"
    assert train_main(["--algo", "sft", "--env", "dial", f"run_dir={sft_dir}", "demo_episodes=6", "sft.epochs=1",
                       "sft.batch_size=8", "sft.log_every=1", "save_every=0", *FAST]) == 0
    for f in ("config.yaml", "metrics.jsonl", "eval.jsonl", "summary.json", "demos.jsonl",
              "final/trainer_state.json", "final/model/config.json"):
        assert (sft_dir / f).is_file(), f
    summary = json.loads((sft_dir / "summary.json").read_text())
    assert summary["algo"] == "sft" and summary["optimizer_steps"] >= 1 and summary["final"]["n"] == 2
    assert summary["machine"]["torch_cpu_capability"] and summary["machine"]["cpu_count"] >= 1
    assert _names(sft_dir) >= {"losses/loss", "losses/grad_norm", "losses/epoch", "eval/success_rate"}

    grpo_dir = tmp_path / "grpo"
    args = ["--algo", "grpo", "--env", "dial", f"run_dir={grpo_dir}", f"init={sft_dir / 'final'}",
            "group_size=2", "tasks_per_iteration=2", "save_every=1", "real_step_budget=200",
            "rollout.on_invalid_action=pass", *FAST]
    assert train_main(args + ["iterations=2", "eval_at_start=false"]) == 0
    assert [json.loads(line)["tag"] for line in (grpo_dir / "eval.jsonl").open()] == ["final"]  # no start evaluation
    assert json.loads((grpo_dir / "checkpoint" / "trainer_state.json").read_text())["iteration"] == 2
    assert train_main(args + ["iterations=3", "--resume", "eval_every=3", "keep_evaluated=true"]) == 0
    assert "resumed from" in capsys.readouterr().out
    # The evaluated policy is kept under its eval.jsonl tag (checkpoint/ would be replaced by later iterations).
    kept = json.loads((grpo_dir / "it3" / "trainer_state.json").read_text())
    assert kept["iteration"] == 3 and (grpo_dir / "it3" / "model" / "config.json").is_file()
    assert not (grpo_dir / "it2").exists()  # iteration 2 was not evaluated
    summary = json.loads((grpo_dir / "summary.json").read_text())
    assert summary["iterations"] == 3 and 0 < summary["real_steps_used"] <= 200
    # The evaluation at the last iteration is the final one: not run twice.
    evals = [json.loads(line) for line in (grpo_dir / "eval.jsonl").open()]
    assert [e["tag"] for e in evals] == ["final", "it3"] and summary["final"] == {
        k: v for k, v in evals[-1].items() if k not in ("tag", "step", "episodes")}
    # Each evaluation keeps its episodes, so two runs pair episode by episode (experiments/paired_eval.py).
    for e in evals:
        assert len(e["episodes"]) == e["n"] + e["n_failed"]
        assert sum(r["won"] for r in e["episodes"]) == e["n_success"]
        assert {(r["task"], r["seed"]) for r in e["episodes"]} == {(r["task"], r["seed"]) for r in evals[0]["episodes"]}
    rows = [r for r in read_metrics(grpo_dir / "metrics.jsonl") if "rollout/success_rate" in r]
    assert [r["step"] for r in rows] == [1, 2, 3] and all("rollout/real_steps_used" in r for r in rows)
    assert _names(grpo_dir) >= {"rollout/episodes", "rollout/iteration", "losses/loss", "losses/groups",
                                "losses/update_time_s", "eval/success_rate"}

    # A kill between the two renames of a checkpoint switch leaves the good one as .checkpoint.old and a row of an
    # iteration the checkpoint does not hold in metrics.jsonl: --resume recovers the first and drops the second.
    (grpo_dir / "checkpoint").rename(grpo_dir / ".checkpoint.old")
    with open(grpo_dir / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 4, "rollout/success_rate": 0.5}) + "\n")
    assert train_main(args + ["iterations=4", "--resume", "eval_at_start=false"]) == 0
    assert "resumed from" in capsys.readouterr().out and not (grpo_dir / ".checkpoint.old").exists()
    rows = [r for r in read_metrics(grpo_dir / "metrics.jsonl") if "rollout/success_rate" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all("losses/loss" in r for r in rows)  # the stray row is gone
    # A checkpoint that cannot be loaded is refused before any model loads, never restarted from iteration 0.
    (grpo_dir / "checkpoint" / "trainer_state.pt").unlink()
    assert train_main(args + ["iterations=5", "--resume"]) == 2
    assert "trainer_state.pt" in capsys.readouterr().err

    out = tmp_path / "eval.json"
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--max-tasks", "3", "--seeds", "0,1",
                      "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["n"] + res["n_failed"] == 6 and res["config"]["agent"]["history"] == 0  # trained prompt format kept
    assert res["config"]["rollout"]["max_new_tokens"] == 10  # and the reply length it was trained to write
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--max-tasks", "3", "--json", str(out),
                      "rollout.max_new_tokens=12", "rollout.ground_actions=0.9"]) == 0
    cfg = json.loads(out.read_text())["config"]["rollout"]
    assert cfg["max_new_tokens"] == 12 and cfg["ground_actions"] == 0.9  # the command line wins
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--skip-tasks", "2", "--max-tasks", "2",
                      "--seeds", "0,1", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = res["episodes"]
    assert len(rows) == 4 and sorted({r["seed"] for r in rows}) == [0, 1]  # one row per (task, seed)
    test_ids = [t.id for t in family("dial").tasks("test")]
    assert {r["task"] for r in rows} == set(test_ids[2:4])  # the first two left out
    assert sum(r["won"] for r in rows) == res["n_success"] and res["skip_tasks"] == 2
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--skip-tasks", "100000"]) == 2
    # --tasks-from: only the split's tasks a trajectory file played (here two test tasks), then --max-tasks
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl

    played = dial_trajectories(2, split="test")
    write_jsonl(tmp_path / "played.jsonl", played)
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--tasks-from",
                      str(tmp_path / "played.jsonl"), "--seeds", "0,1", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {r["task"] for r in res["episodes"]} == {t.task.id for t in played} and len(res["episodes"]) == 4
    assert eval_main(["--env", "dial", "--policy", str(grpo_dir / "final"), "--split", "train", "--tasks-from",
                      str(tmp_path / "played.jsonl")]) == 2  # it played no train task


def test_real_iterations_play_only_the_tasks_whose_episodes_fit_the_budget(tmp_path):
    """Episodes step in lockstep, so an iteration with more episodes than the remaining real-step budget can
    finish would end every one of them by the budget, none trainable: fewer tasks are played instead."""
    run = tmp_path / "grpo"
    assert train_main(["--algo", "grpo", "--env", "dial", f"run_dir={run}", "group_size=2",
                       "tasks_per_iteration=4", "real_step_budget=24", "iterations=3", "eval_at_start=false",
                       "save_every=0", "rollout.on_invalid_action=pass", *FAST]) == 0
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "rollout/success_rate" in r]
    assert rows[0]["rollout/episodes"] == 6 and rows[0]["rollout/episodes_failed"] == 0  # 24 // (2 x 4 turns): 3 tasks
    assert all(r["rollout/episodes"] >= 2 for r in rows) and rows[-1]["rollout/real_steps_used"] <= 24


def test_a_budget_that_cannot_finish_one_group_is_left_unspent(tmp_path, capsys):
    """2 episodes x 4 turns need 8 steps: with 7 left, playing would only produce episodes the budget cuts off."""
    run = tmp_path / "grpo"
    assert train_main(["--algo", "grpo", "--env", "dial", f"run_dir={run}", "group_size=2",
                       "tasks_per_iteration=4", "real_step_budget=7", "iterations=3", "eval_at_start=false",
                       "save_every=0", "rollout.on_invalid_action=pass", *FAST]) == 0
    assert "stopping after 0 iterations" in capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["real_steps_used"] == 0 and summary["iterations"] == 0


def test_the_budget_is_planned_at_the_family_s_step_limit_when_the_run_asks_for_more(tmp_path, capsys):
    """The dial ends every episode by its 12th step (`MAX_STEPS`): at rollout.max_episode_steps=50 a budget of 24
    still affords one task of 2 episodes (2 x 12, `EnvFamily.step_limit`), where planning at 50 steps would spend
    none of it."""
    run = tmp_path / "grpo"
    assert train_main(["--algo", "grpo", "--env", "dial", f"run_dir={run}", "group_size=2",
                       "tasks_per_iteration=4", "real_step_budget=24", "iterations=1", "eval_at_start=false",
                       "save_every=0", "rollout.on_invalid_action=pass", *FAST, "rollout.max_episode_steps=50"]) == 0
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "rollout/success_rate" in r]
    assert rows[0]["rollout/episodes"] == 2 and rows[0]["rollout/real_steps_used"] <= 24


def test_demonstrations_without_data_come_from_the_family_s_declared_roles(tmp_path, capsys):
    """Refused at start-up, before any model loads (no run folder yet), in one line naming the problem."""
    run = tmp_path / "sft"
    assert train_main(["--algo", "sft", "--env", "webarena_lite", f"run_dir={run}", *FAST]) == 2
    assert "family 'webarena_lite' declares no expert policy (EXPERT_POLICY)" in capsys.readouterr().err
    assert train_main(["--algo", "dpo", "--env", "dial", f"run_dir={run}", "demo_policies=oracle,wander", *FAST]) == 2
    assert "demo_policies: family 'dial' has no policy 'wander'; known: oracle" in capsys.readouterr().err
    assert not run.exists()


def test_bad_config_is_reported_not_raised(capsys):
    assert train_main(["--algo", "grpo", "--env", "dial", "grpo.no_such_field=1"]) == 2
    assert "grpo.no_such_field" in capsys.readouterr().err
    assert train_main(["--algo", "grpo", "--env", "nowhere"]) == 2


def test_dream_modes_fail_at_start_up_naming_the_field(capsys):
    from dreamgym.commands.train import main

    assert main(["--algo", "grpo", "mode=dream"]) == 2
    assert "dream.em" in capsys.readouterr().err
    assert main(["--algo", "sft", "mode=s2r", "dream.em=somewhere"]) == 2
    assert "train: mode: " in capsys.readouterr().err


def test_dream_mode_from_the_command_line_keeps_each_evaluated_policy(tmp_path):
    """`dreamgym train mode=dream`: zero real steps in training, periodic evaluations in the real env tagged
    dream-it<N>, and with keep_evaluated each evaluated policy kept under its tag."""
    from em_helpers import trained_dial_model

    run = tmp_path / "dream"
    assert train_main(["--algo", "grpo", "--env", "dial", "mode=dream", f"dream.em={trained_dial_model()}",
                       f"run_dir={run}", "dream.iterations=2", "dream.curriculum.n_seeds=1", "group_size=2",
                       "tasks_per_iteration=2", "eval_every=1", "eval_at_start=false", "keep_evaluated=true",
                       "save_every=1", *FAST]) == 0
    tags = [json.loads(line)["tag"] for line in (run / "eval.jsonl").open()]
    assert tags == ["dream-it1", "dream-it2"]  # the final evaluation is the one at iteration 2, not repeated
    for tag, it in (("dream-it1", 1), ("dream-it2", 2)):
        assert json.loads((run / tag / "trainer_state.json").read_text())["iteration"] == it
    assert json.loads((run / "summary.json").read_text())["real_steps_used"] == 0
    from dreamgym.data import load_trajectories

    for it in (1, 2):  # every synthetic episode trained on, per iteration, with its provenance
        dreamt = load_trajectories(run / "dream_episodes" / f"it-{it:05d}.jsonl")
        assert len(dreamt) == 4 and all(t.source == "synthetic" and t.policy == f"grpo-seed0-it{it - 1}"
                                        for t in dreamt)
    # The curriculum's state survives the end-of-run checkpoint, so --resume continues it instead of restarting.
    state = json.loads((run / "dream_state.json").read_text())
    assert state["iteration"] == 2
    assert train_main(["--algo", "grpo", "--env", "dial", "mode=dream", f"dream.em={trained_dial_model()}",
                       f"run_dir={run}", "dream.iterations=3", "dream.curriculum.n_seeds=1", "group_size=2",
                       "tasks_per_iteration=2", "eval_every=0", "eval_at_start=false", "save_every=2",
                       "--resume", *FAST]) == 0
    resumed = json.loads((run / "dream_state.json").read_text())
    assert resumed["iteration"] == 3  # saved after the last iteration although 3 is not a multiple of save_every
    assert resumed["generated"][:len(state["generated"])] == state["generated"]
    assert all(resumed["stats"][k] >= v for k, v in state["stats"].items())


def test_a_ppo_dream_feeds_the_curriculum_every_episode_of_each_task(tmp_path):
    """PPO plays `group_size` episodes of each task as GRPO does; the curriculum's V_τ of a task is over all of them
    (the dream world used to keep only each task's first reward under PPO, so V_τ came from one episode)."""
    from em_helpers import trained_dial_model

    run = tmp_path / "ppo-dream"
    assert train_main(["--algo", "ppo", "--env", "dial", "mode=dream", f"dream.em={trained_dial_model()}",
                       f"run_dir={run}", "dream.iterations=1", "dream.curriculum.enabled=false", "group_size=4",
                       "tasks_per_iteration=2", "eval_every=0", "eval_at_start=false", *FAST]) == 0
    rows = json.loads((run / "curriculum.jsonl").read_text().splitlines()[-1])["variance"]
    assert len(rows) == 2 and all(row["n"] > 1 for row in rows), rows


def test_s2r_mode_from_the_command_line_dreams_then_spends_its_budget_in_the_real_env(tmp_path, capsys):
    """`dreamgym train mode=s2r`: the dream phase (tagged dream-it<N>, no real step), then the real phase on the
    train tasks the dream left mixed (tagged s2r-it<N>, counted from its own start) under the real-step budget."""
    from em_helpers import trained_dial_model

    run = tmp_path / "s2r"
    assert train_main(["--algo", "grpo", "--env", "dial", "mode=s2r", f"dream.em={trained_dial_model()}",
                       f"run_dir={run}", "dream.iterations=1", "dream.s2r_iterations=2", "dream.curriculum.n_seeds=1",
                       "group_size=2", "tasks_per_iteration=2", "eval_every=2", "eval_at_start=false",
                       "real_step_budget=100", "save_every=1", "rollout.on_invalid_action=pass", *FAST]) == 0
    out = capsys.readouterr().out
    assert "s2r: " in out  # the real phase says which train tasks it draws from
    tags = [json.loads(line)["tag"] for line in (run / "eval.jsonl").open()]
    assert tags == ["s2r-it3"]  # the real phase's 2nd iteration; the final evaluation is that one, not repeated
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 3 and 0 < summary["real_steps_used"] <= 100


def test_real_task_pool_keeps_the_train_tasks_a_data_file_played(tmp_path, capsys):
    """Real RL on the games an offline file played (the games a dream.task_pool=data run plays)."""
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl
    from dreamgym.curriculum.pools import task_pool

    data = tmp_path / "played.jsonl"
    trajs = dial_trajectories(5)
    write_jsonl(data, trajs)
    fam = family("dial")
    pool = task_pool(fam.tasks("train"), str(data), name="real_task_pool", env="dial")
    assert {t.id for t in pool} == {t.task.id for t in trajs} and len(pool) < len(fam.tasks("train"))
    run = tmp_path / "grpo"
    assert train_main(["--algo", "grpo", "--env", "dial", f"run_dir={run}", f"real_task_pool={data}",
                       "group_size=2", "tasks_per_iteration=2", "iterations=1", "eval_at_start=false",
                       "save_every=0", "rollout.on_invalid_action=pass", *FAST]) == 0
    assert f"real_task_pool: {len(pool)} of" in capsys.readouterr().out
    # a file that played no train task, or mode=dream, fails at start-up naming the field
    empty = tmp_path / "none.jsonl"
    write_jsonl(empty, dial_trajectories(2, split="test"))
    assert train_main(["--algo", "grpo", "--env", "dial", f"real_task_pool={empty}"]) == 2
    assert "real_task_pool" in capsys.readouterr().err
    assert train_main(["--algo", "grpo", "--env", "dial", "mode=dream", "dream.em=x", f"real_task_pool={data}"]) == 2
    assert "real_task_pool" in capsys.readouterr().err


def test_s2r_starts_one_way_a_dream_run_as_real_task_pool_points_to_mode_s2r(tmp_path, capsys):
    """S2R from a dream run is `mode=s2r`; `mode=real real_task_pool=<dream run>` (a second route) is refused at
    start-up, before any model loads, naming the field and the one route."""
    from dreamgym.curriculum.generator import Curriculum, CurriculumConfig
    from dreamgym.envs.dial import parse_goal
    from dreamgym.curriculum.pools import VARIANCE_LOG

    train = family("dial").tasks("train")
    dream = tmp_path / "dream"
    cur = Curriculum(train, parse_goal, None, CurriculumConfig(enabled=False), log_path=dream / VARIANCE_LOG)
    cur.update(0, {train[0].id: [1, 0], train[1].id: [0, 1]}, {t.id: t for t in train})
    run = tmp_path / "s2r"
    assert train_main(["--algo", "grpo", "--env", "dial", f"run_dir={run}", f"real_task_pool={dream}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dreamgym train: real_task_pool: ") and "mode=s2r" in err and len(err.splitlines()) == 1
    assert not run.exists()
