"""The DreamGym loop end to end on the dial: RL inside the experience model touches no real step, grows the
replay buffer with synthetic transitions and runs the curriculum; S2R then stays inside its real-step budget."""

import json

import pytest

from em_helpers import trained_dial_model
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.rl.budget import RealStepBudget
from dreamgym.curriculum.generator import CurriculumConfig
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.rl.modes import online_phases
from dreamgym.envs import family
from dreamgym.rl.loop import LoopSettings, RunState, run_phases
from dreamgym.trainers.common import OptimConfig, TrainerConfig
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer


def test_dream_then_s2r(tmp_path, warm_backend):  # noqa: F811
    em = trained_dial_model()
    world = DreamWorld("dial", DreamConfig(em=str(em), curriculum=CurriculumConfig(n_seeds=2)), tmp_path, seed=0,
                       device="cpu")
    seed_size = len(world.buffer)
    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-4), agent=DIAL_AGENT, rollout=DIAL_ROLLOUT, group_size=4,
                           tasks_per_iteration=4)
    trainer = GRPOTrainer(warm_backend, GRPOConfig(), common)
    settings = LoopSettings(common, progress=False)
    state = RunState(RealStepBudget(0))

    def phases(mode, world, **kw):
        return online_phases(mode, family("dial"), "dial", 0, world=world, dream_iterations=2, real_iterations=5,
                             tasks_per_iteration=4, **kw)

    hist = run_phases(trainer, phases("dream", world), state, settings).history
    assert len(hist) == 2 and state.budget.used == 0  # dream mode: zero real steps
    assert hist[-1]["rollout/synthetic_steps"] > 0
    assert len(world.buffer) > seed_size  # the buffer co-evolves with the agent's synthetic transitions
    synthetic = [t for t in world.buffer.transitions() if t.source == "synthetic"]
    assert synthetic and all(t.policy_version for t in synthetic)
    log = [json.loads(line) for line in (tmp_path / "curriculum.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in log] == [0, 1] and all("variance" in row for row in log)
    assert "dream/curriculum/valid_share" in hist[-1]

    # The same run as S2R: its dream phase is done, its real phase draws the tasks the dream's log (in tmp_path)
    # left mixed; one group of 4 x 12 turns fits the budget, a second never does
    state.budget = RealStepBudget(60)
    end = run_phases(trainer, phases("s2r", world), state, settings)
    assert end.history and end.history[0]["rollout/iteration"] == 3  # the run's count goes on
    assert 0 < state.budget.used <= 60 and end.out_of_budget  # a hard cap: the rollout engine refuses steps past it
    assert all(m["rollout/episodes_failed"] == 0 for m in end.history)  # no episode was cut off by the budget


def test_dream_config_rejects_bad_values_naming_the_field():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.commands.train import TrainConfig

    for bad, field_name in (("reward_from=oracle", "reward_from"), ("initial_state=x", "initial_state"),
                            ("task_pool=some", "task_pool")):
        with pytest.raises(ConfigError, match=f"^{field_name}: "):
            load_config(DreamConfig, None, [bad])
        # within `dreamgym train` the field is named from the top
        with pytest.raises(ConfigError, match=f"^dream\\.{field_name}: "):
            load_config(TrainConfig, None, [f"dream.{bad}"])
    assert load_config(DreamConfig, None, ["reward_from=model"]).reward_from == "model"


def _played(task, group: int, rewards: list[float], won: bool = False):
    from dreamgym.episode import Episode, Turn

    return [Episode(task=task, seed=0, group=group, member=m, end_reason="terminated", won=won and r > 0,
                    turns=[Turn(state="s", prompt_ids=[1], completion_ids=[2], logprobs=[0.0], text="a", action="a",
                                reward=r)])
            for m, r in enumerate(rewards)]


def test_the_curriculum_reads_every_episode_of_a_task_whatever_the_algorithm(tmp_path):
    """PPO plays `group_size` episodes per task like GRPO: the curriculum's V_τ of a task is over all of them (the
    dream world used to keep each task's first reward under PPO and cluster tasks, dropping the rest), and the
    world is built without being told the algorithm."""
    world = DreamWorld("dial", DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(enabled=False),
                                           clusters=1), tmp_path, seed=0, device="cpu")
    a, b = world.base_tasks[:2]
    world.curriculum_step(0, _played(a, 0, [1.0, 0.0, 0.0, 0.0]) + _played(b, 1, [1.0, 1.0, 1.0, 1.0]))
    logged = {row["task_id"]: row for row in world.curriculum.variance_log}
    assert logged[a.id]["n"] == 4 and logged[a.id]["variance"] == pytest.approx(0.1875)
    assert logged[b.id]["n"] == 4 and logged[b.id]["variance"] == 0.0
    # one episode per task: its own outcome cannot vary, so V_τ is over a cluster of similar tasks (here one cluster)
    world.curriculum.variance_log.clear()
    world.curriculum_step(1, _played(a, 0, [1.0]) + _played(b, 1, [0.0]))
    assert [(row["n"], row["variance"]) for row in world.curriculum.variance_log] == [(2, 0.25), (2, 0.25)]


def test_a_stratified_dream_draws_its_base_tasks_like_the_real_run(tmp_path):
    """`task_strata`: the dream's base tasks of an iteration are the stratified draw of its pool for that iteration,
    the draw real RL and S2R's real phase make; a field the pool lacks fails when the world is built."""
    from dreamgym.config import ConfigError
    from dreamgym.curriculum.pools import stratified_tasks

    cfg = DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(enabled=False))
    world = DreamWorld("dial", cfg, tmp_path, seed=4, device="cpu", strata="target")
    for it in (0, 3):
        # the curriculum shuffles its batch (generated variants among base tasks): the same tasks, in its order
        assert sorted(t.id for t in world.tasks(it, 5)) == sorted(t.id for t in stratified_tasks(world.base_tasks, 5,
                                                                                                   4, it, "target"))
    with pytest.raises(ConfigError, match="task_strata"):
        DreamWorld("dial", cfg, tmp_path / "b", seed=4, device="cpu", strata="family")


def test_skip_won_leaves_out_the_strata_the_policy_won_whole_until_none_would_be_left(tmp_path):
    """`dream.skip_won`: a stratum whose latest draw the policy won in every episode is not drawn again (a group won
    whole has zero advantage), a stratum with one loss stays, a later draw updates the verdict, the verdicts survive
    the saved state (a resumed run draws the same tasks), and when every stratum is won the draw is all base tasks."""
    cfg = DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(enabled=False), skip_won=True)
    world = DreamWorld("dial", cfg, tmp_path, seed=4, device="cpu", strata="target")
    by_target: dict[str, list] = {}
    for t in world.base_tasks:
        by_target.setdefault(str(t.goal["target"]), []).append(t)
    won, mixed = by_target["3"][0], by_target["5"][0]
    world.note_outcomes(_played(won, 0, [1.0, 1.0], won=True) + _played(mixed, 1, [1.0, 0.0]))
    drawn = {str(t.goal["target"]) for it in range(4) for t in world.tasks(it, 8)}
    assert "3" not in drawn and "5" in drawn and len(drawn) == len(by_target) - 1
    resumed = DreamWorld("dial", cfg, tmp_path / "r", seed=4, device="cpu", strata="target")
    resumed.load_state_dict(json.loads(json.dumps(world.state_dict())))
    assert [t.id for t in resumed.tasks(2, 8)] == [t.id for t in world.tasks(2, 8)]
    world.note_outcomes(_played(by_target["3"][1], 0, [1.0, 0.0]))  # a later draw of stratum 3 lost once
    assert "3" in {str(t.goal["target"]) for t in world.unwon_tasks()}
    for i, tasks in enumerate(by_target.values()):
        world.note_outcomes(_played(tasks[0], i, [1.0, 1.0], won=True))
    assert world.unwon_tasks() == world.base_tasks


def test_a_family_writer_the_family_lacks_fails_at_start_naming_the_field(tmp_path):
    """`curriculum.writer=family` on a family without `task_variants` (the dial) fails when the world is built."""
    from dreamgym.config import ConfigError

    cfg = DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(writer="family"))
    with pytest.raises(ConfigError, match=r"dream\.curriculum\.writer"):
        DreamWorld("dial", cfg, tmp_path, seed=0, device="cpu")
