"""The training-loop layer: which train tasks a run draws from, the one run loop over phases (its counts, save
points, evaluation tags, budget stop and what it asks of a world, with a stand-in trainer: no model, a scripted
policy), a mode as phases, and that the loop layer, the run loop, the dream, the recipe and `dreamgym train` import
one another in one direction only."""

from pathlib import Path

import pytest
from import_graph import MODULES, import_graph
from scripted_policy import ScriptedBackend, expert_reply

from dreamgym.agent import AgentConfig
from dreamgym.rl.budget import RealStepBudget
from dreamgym.config import ConfigError
from dreamgym.curriculum.generator import Curriculum, CurriculumConfig
from dreamgym.envs import family
from dreamgym.envs.dial import DialEnv
from dreamgym.episode import RolloutConfig
from dreamgym.data import iter_jsonl_records
from dreamgym.rl.evaluate import EvalConfig
from dreamgym.curriculum.pools import VARIANCE_LOG, iteration_tasks, stratified_tasks, task_pool
from dreamgym.rl.builders import Evaluation
from dreamgym.utils.metrics import MetricsLogger, read_metrics
from dreamgym.trainers.common import TrainerConfig
from dreamgym.trainers.online import UpdateResult
from dreamgym.rl.loop import LoopSettings, Phase, RealWorld, RunState, run_phases


def test_dream_task_pool_data_keeps_the_train_tasks_with_real_steps_in_the_buffer(tmp_path):
    from dreamgym.commands import collect as C
    from dreamgym.config import load_config
    from dreamgym.data import read_jsonl, write_jsonl
    from dreamgym.dream.world import DreamConfig
    from dreamgym.experience import buffer_for, em_transitions

    def dream_tasks(tasks, buf, env, pool):  # how DreamWorld picks its base tasks (`dream.task_pool`)
        return task_pool(tasks, pool, name="dream.task_pool", env=env, buffer=buf)

    C.collect("dial", {"oracle": 1}, 5, tmp_path / "d.jsonl", seed=0, progress=False)
    trajs = list(read_jsonl(tmp_path / "d.jsonl"))
    buf = buffer_for(em_transitions(trajs, history=2), "hashing")
    train = list(family("dial").tasks("train"))
    got = dream_tasks(train, buf, "dial", "data")
    assert sorted(t.id for t in got) == sorted({t.task.id for t in trajs}) and len(got) == 5 < len(train)
    assert dream_tasks(train, buf, "dial", "all") == train
    with pytest.raises(ConfigError, match=r"^dream\.task_pool: none of"):
        dream_tasks(list(family("dial").tasks("test")), buf, "dial", "data")
    # a trajectory file: the train tasks it played (a fixed set real RL can train on too, `real_task_pool`)
    write_jsonl(tmp_path / "two.jsonl", trajs[:2])
    got = dream_tasks(train, buf, "dial", str(tmp_path / "two.jsonl"))
    assert [t.id for t in got] == [t.id for t in train if t.id in {trajs[0].task.id, trajs[1].task.id}]
    assert load_config(DreamConfig, None, [f"task_pool={tmp_path / 'two.jsonl'}"]).task_pool.endswith("two.jsonl")
    with pytest.raises(ConfigError, match=r"^dream\.task_pool: none of .* were played in"):
        dream_tasks(list(family("dial").tasks("test")), buf, "dial", str(tmp_path / "two.jsonl"))


def test_s2r_task_pool_aims_at_tasks_with_mixed_dream_outcomes_else_all(tmp_path, capsys):
    from dreamgym.envs.dial import parse_goal

    fam = family("dial")
    train = fam.tasks("train")

    def s2r_task_pool(fam, dream_dir, n):  # how the real phase of S2R picks its tasks (`dreamgym.rl.modes.SimToRealWorld`)
        return task_pool(fam.tasks("train"), dream_dir, name="s2r", env="dial", fall_back_below=n)

    assert [t.id for t in s2r_task_pool(fam, tmp_path, 2)] == [t.id for t in train]  # no dream log: all tasks
    cur = Curriculum(train, parse_goal, None, CurriculumConfig(enabled=False), log_path=tmp_path / VARIANCE_LOG)
    cur.update(0, {train[0].id: [1, 0], train[1].id: [0, 0], train[2].id: [1, 1], train[3].id: [0, 1]},
               {t.id: t for t in train})
    cur.update(1, {train[3].id: [1, 1], train[1].id: [0, 1]}, {t.id: t for t in train})  # the latest group decides
    assert [t.id for t in s2r_task_pool(fam, tmp_path, 2)] == [train[0].id, train[1].id]
    assert "2 of" in capsys.readouterr().out
    # fewer mixed tasks than one iteration draws: all train tasks, not the same two over and over
    assert len(s2r_task_pool(fam, tmp_path, 3)) == len(train)
    assert "drawing from all" in capsys.readouterr().out


class StandIn:
    """An online trainer without a model: the dial's rule plays (`expert_reply`), `update` records each iteration's
    tasks."""

    algo = "standin"

    def __init__(self, tokenizer):
        self.backend, self.global_step = ScriptedBackend(tokenizer, expert_reply), 0
        self.played: list[list[str]] = []
        self.saved: list[tuple[str, int]] = []

    def update(self, episodes):
        self.played.append([e.task.id for e in episodes])
        return UpdateResult(optimizer_steps=1, loss=0.5, tokens=0, metrics={"loss": 0.5})

    def save(self, directory, run=None):
        self.saved.append((Path(directory).name, run["iteration"]))

    def load(self, directory):
        return {}


AGENT = AgentConfig(history=0, show_admissible=False, system_prompt="You are an agent.")


@pytest.fixture(scope="module")
def tokenizer():
    from dreamgym.llm.presets import load_preset

    return load_preset("tiny", device="cpu")[1]


def settings(n_tasks: int, **kw) -> LoopSettings:
    """One episode per task, at most 2 turns: every dial train task (start and target differ) takes 2 real steps."""
    return LoopSettings(TrainerConfig(seed=7, tasks_per_iteration=n_tasks, group_size=1, agent=AGENT,
                                      rollout=RolloutConfig(max_episode_steps=2, max_new_tokens=32)),
                        progress=False, **kw)


def test_a_run_of_its_own_counts_from_zero_so_a_resumed_one_continues_its_periods(tmp_path, tokenizer):
    """`dreamgym train mode=real --resume` at iteration 2 of 5: saves and evaluations fall on the run's own
    multiples, each iteration draws the tasks its iteration number seeds, and its row holds the rollouts' figures
    and the loop's under rollout/, the update's under losses/."""
    fam, trainer, evals = family("dial"), StandIn(tokenizer), []
    pool = fam.tasks("train")
    state = RunState(RealStepBudget(None), iteration=2)
    end = run_phases(trainer, [Phase(RealWorld(fam, 7, pool), 5)], state,
                settings(3, eval_every=3, save_every=2, run_dir=tmp_path),
                evaluate=lambda tag, it: evals.append((tag, it)))
    assert len(end.history) == 3 and state.iteration == 5 and not end.out_of_budget
    assert trainer.played == [[t.id for t in iteration_tasks(pool, 3, 7, it)] for it in (2, 3, 4)]
    assert trainer.saved == [("checkpoint", 4)] and evals == [("it3", 3)]
    row = end.history[0]
    assert row["rollout/episodes"] == 3 and row["losses/loss"] == 0.5 and row["rollout/iteration"] == 3
    assert row["rollout/real_steps_used"] == 6 and row["losses/update_time_s"] >= 0
    assert {k.split("/")[0] for k in row} == {"rollout", "losses"}, sorted(row)
    assert state.budget.used == 18


def test_a_stratified_real_world_plays_the_stratified_draw_of_each_iteration(tmp_path, tokenizer):
    """`task_strata=target`: a real run resumed at iteration 2 plays, each iteration, the tasks the stratified draw
    gives that iteration number (the loop passes the field through the world, not a uniform sample)."""
    fam, trainer = family("dial"), StandIn(tokenizer)
    pool = fam.tasks("train")
    run_phases(trainer, [Phase(RealWorld(fam, 7, pool, "target"), 4)], RunState(RealStepBudget(None), iteration=2),
               settings(4, run_dir=tmp_path))
    assert trainer.played == [[t.id for t in stratified_tasks(pool, 4, 7, it, "target")] for it in (2, 3)]
    assert trainer.played != [[t.id for t in iteration_tasks(pool, 4, 7, it)] for it in (2, 3)]


def test_a_phase_that_continues_another_counts_from_its_start(tokenizer):
    """S2R's real phase after 2 dream iterations: 3 more iterations, evaluated every 2 of its own, tagged s2r-it; the
    phase already done is not run again."""
    fam, trainer, evals = family("dial"), StandIn(tokenizer), []
    state = RunState(RealStepBudget(None), iteration=2)
    run_phases(trainer, [Phase(RealWorld(fam, 0), 2, "dream-it"), Phase(RealWorld(fam, 0), 3, "s2r-it")], state,
          settings(3, eval_every=2), evaluate=lambda tag, it: evals.append((tag, it)))
    assert state.iteration == 5 and len(trainer.played) == 3 and evals == [("s2r-it4", 4)] and trainer.saved == []


def test_the_run_ends_when_the_budget_is_spent_or_cannot_finish_one_task(tokenizer, capsys):
    fam = family("dial")
    trainer = StandIn(tokenizer)
    state = RunState(RealStepBudget(6))  # 2 tasks (4 steps), then the 2 steps left afford 1 task and spend the budget
    phases = [Phase(RealWorld(fam, 0), 10), Phase(RealWorld(fam, 0), 10, "s2r-it")]
    end = run_phases(trainer, phases, state, settings(2))
    assert [len(p) for p in trainer.played] == [2, 1] and len(end.history) == 2
    assert end.out_of_budget and state.budget.exhausted and state.iteration == 2  # the later phase never ran
    trainer, state = StandIn(tokenizer), RunState(RealStepBudget(1))  # not one task's episodes fit: nothing is spent
    end = run_phases(trainer, phases, state, settings(2))
    assert end.history == [] and end.out_of_budget and state.budget.used == 0 and trainer.played == []
    assert "stopping after 0 iterations" in capsys.readouterr().out


class SyntheticDial(DialEnv):
    is_synthetic = True


class ScriptedDream:
    """A `World` whose environments are synthetic: it records what the loop asks of it."""

    name, real, family, keeps_policies = "dream", False, family("dial"), 0

    def __init__(self):
        self.calls: list[tuple] = []

    def start(self, iteration):
        self.calls.append(("start", iteration))

    def tasks(self, iteration, n):
        return family("dial").tasks("train")[:n]

    def envs(self, policy_version):
        self.calls.append(("envs", policy_version))
        return SyntheticDial

    def after_iteration(self, iteration, episodes, policy_version, update):
        self.calls.append(("after", iteration, len(episodes), policy_version))
        return {"buffer/size": float(iteration)}

    def save(self, iteration):
        self.calls.append(("save", iteration))

    def phase_end(self):
        return None


def test_a_world_is_asked_in_order_and_its_metrics_are_logged_under_its_name(tmp_path, tokenizer):
    """A synthetic world spends none of the budget; after each iteration its own figures go to metrics.jsonl under
    its name, beside the loop's row; its state is kept with every checkpoint and at the end of its phase."""
    world, trainer = ScriptedDream(), StandIn(tokenizer)
    state = RunState(RealStepBudget(0))
    logger = MetricsLogger(tmp_path, tensorboard=False)
    end = run_phases(trainer, [Phase(world, 3, "dream-it")], state, settings(2, save_every=2, run_dir=tmp_path),
                logger=logger)
    logger.close()
    assert world.calls == [("start", 0), ("envs", "standin-seed7-it0"), ("after", 1, 2, "standin-seed7-it0"),
                           ("envs", "standin-seed7-it1"), ("after", 2, 2, "standin-seed7-it1"), ("save", 2),
                           ("envs", "standin-seed7-it2"), ("after", 3, 2, "standin-seed7-it2"), ("save", 3)]
    assert state.budget.used == 0 and not end.out_of_budget and trainer.saved == [("checkpoint", 2)]
    assert all(r["rollout/synthetic_steps"] == 4 and r["dream/buffer/size"] == r["rollout/iteration"]
               for r in end.history)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], "dream/buffer/size" in r, "losses/loss" in r) for r in rows] == \
        [(1, False, True), (1, True, False), (2, False, True), (2, True, False), (3, False, True), (3, True, False)]


def test_a_mode_is_a_list_of_phases():
    from dreamgym.rl.modes import online_phases

    fam = family("dial")
    [real] = online_phases("real", fam, "dial", 0, world=None, real_iterations=4, dream_iterations=0,
                           tasks_per_iteration=2)
    assert isinstance(real.world, RealWorld) and (real.iterations, real.tag) == (4, "it")
    [s2r] = online_phases("s2r", fam, "dial", 0, world=None, real_iterations=3, dream_iterations=5,
                          tasks_per_iteration=2, dream_log=Path("runs/dream"))
    assert isinstance(s2r.world, RealWorld) and (s2r.iterations, s2r.tag) == (3, "s2r-it")
    with pytest.raises(ValueError, match="mode 'sim'"):
        online_phases("sim", fam, "dial", 0, world=None, real_iterations=1, dream_iterations=1, tasks_per_iteration=1)


LAYER = ("dreamgym.rl.builders", "dreamgym.rl.loop", "dreamgym.dream.world", "dreamgym.commands.recipe", "dreamgym.commands.train")


def test_an_evaluation_row_torn_by_a_kill_is_set_aside_before_the_next_is_appended(tmp_path, tokenizer):
    log = tmp_path / "eval.jsonl"
    log.write_bytes(b'{"tag": "it1", "step": 1, "success_rate": 1.0}\n{"tag": "it2", "st')
    fam = family("dial")
    ev = Evaluation(fam, "test", fam.tasks("test")[:2], [0], EvalConfig(agent=AGENT), log=log)
    res = ev(ScriptedBackend(tokenizer, expert_reply), "it3", 3)
    rows = [rec for _, rec in iter_jsonl_records(log)]
    assert [r["tag"] for r in rows] == ["it1", "it3"] and rows[1]["success_rate"] == res.success_rate == 1.0
    assert (tmp_path / "eval.jsonl.torn").read_bytes() == b'{"tag": "it2", "st\n'


def test_the_loop_layer_dream_recipe_and_train_import_one_way():
    """loops <- run <- dream <- recipe, and train over them: nothing any of them reaches imports it back."""
    # With the packages each import runs: reaching a module back through a package's __init__ counts too.
    graph = {name: {".".join(m.split(".")[:i]) for m in found for i in range(2, m.count(".") + 2)} & set(MODULES)
             for name, found in import_graph().items()}
    assert "dreamgym.pipeline" not in MODULES
    for start in LAYER:
        seen, stack, back = set(), list(graph[start]), []
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            back += [cur] if start in graph[cur] else []
            stack.extend(graph[cur])
        assert not back, f"{start} is imported back by {sorted(back)}, which it reaches"
    assert not graph["dreamgym.rl.builders"] & {"dreamgym.rl.loop", "dreamgym.dream.world", "dreamgym.commands.recipe", "dreamgym.commands.train"}
    assert not graph["dreamgym.rl.loop"] & {"dreamgym.dream.world", "dreamgym.commands.recipe", "dreamgym.commands.train"}
    assert not graph["dreamgym.dream.world"] & {"dreamgym.commands.recipe", "dreamgym.commands.train"}
    assert "dreamgym.commands.recipe" not in graph["dreamgym.commands.train"]
