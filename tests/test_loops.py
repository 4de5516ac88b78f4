"""The training-loop layer: which train tasks a run draws from, the one real-RL loop (its counts, save points,
evaluation tags and budget stop, with a stand-in trainer: no model), and that the loop layer, the dream, the
recipe and `dreamgym train` import one another in one direction only."""

from pathlib import Path

import pytest
from import_graph import MODULES, import_graph

from dreamgym.config import ConfigError
from dreamgym.curriculum import Curriculum, CurriculumConfig
from dreamgym.envs import family
from dreamgym.loops import DREAM_VARIANCE_LOG, iteration_tasks, task_pool, train_real
from dreamgym.budget import RealStepBudget


def test_dream_task_pool_data_keeps_the_train_tasks_with_real_steps_in_the_buffer(tmp_path):
    from dreamgym import collect as C
    from dreamgym.config import load_config
    from dreamgym.data import read_jsonl, write_jsonl
    from dreamgym.dream import DreamConfig
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

    def s2r_task_pool(fam, dream_dir, n):  # how the real phase of S2R picks its tasks (`dream.train_s2r_real`)
        return task_pool(fam.tasks("train"), dream_dir, name="s2r", env="dial", fall_back_below=n)

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


class StandIn:
    """An online trainer without a model: each iteration plays its tasks, one episode of 2 real steps each."""

    def __init__(self, iteration: int = 0, budget: int | None = None):
        self.iteration, self.budget = iteration, RealStepBudget(budget)
        self.played: list[list[str]] = []
        self.saved: list[tuple[str, int]] = []

    def train_iteration(self, tasks, env_factory):
        self.played.append([t.id for t in tasks])
        assert self.budget.take(len(tasks) * 2)
        self.iteration += 1
        return [], {"success_rate": 0.0}

    def save(self, directory):
        self.saved.append((Path(directory).name, self.iteration))


def test_a_run_of_its_own_counts_from_zero_so_a_resumed_one_continues_its_periods(tmp_path):
    """`dreamgym train mode=real --resume` at iteration 2 of 5: saves and evaluations fall on the run's own
    multiples, and each iteration draws the tasks its iteration number seeds."""
    fam, trainer, evals = family("dial"), StandIn(iteration=2), []
    pool = fam.tasks("train")
    hist = train_real(trainer, fam, pool, iterations=5, tasks_per_iteration=3, group_size=1, max_turns=2, seed=7,
                      label="real grpo",
                      evaluate=lambda tag, it: evals.append((tag, it)), eval_every=3, save_every=2,
                      checkpoint=tmp_path / "checkpoint", progress=False)
    assert len(hist) == 3 and trainer.iteration == 5
    assert trainer.played == [[t.id for t in iteration_tasks(pool, 3, 7, it)] for it in (2, 3, 4)]
    assert trainer.saved == [("checkpoint", 4)] and evals == [("it3", 3)]


def test_a_phase_that_continues_another_counts_from_its_start(tmp_path):
    """S2R's real phase after 2 dream iterations: 3 more iterations, evaluated every 2 of its own, tagged s2r-it."""
    fam, trainer, evals = family("dial"), StandIn(iteration=2), []
    train_real(trainer, fam, fam.tasks("train"), iterations=3, tasks_per_iteration=3, group_size=1, max_turns=2, seed=0,
               label="s2r real",
               counted_from=2, evaluate=lambda tag, it: evals.append((tag, it)), eval_every=2, eval_tag="s2r-it",
               progress=False)
    assert trainer.iteration == 5 and evals == [("s2r-it4", 4)] and trainer.saved == []


def test_the_loop_stops_when_the_budget_is_spent_or_cannot_finish_one_task(capsys):
    fam = family("dial")
    trainer = StandIn(budget=6)  # 2 tasks (4 steps), then the 2 steps left afford 1 task and spend the budget
    hist = train_real(trainer, fam, fam.tasks("train"), iterations=10, tasks_per_iteration=2, group_size=1,
                      max_turns=2, seed=0, label="x", progress=False)
    assert [len(p) for p in trainer.played] == [2, 1] and len(hist) == 2 and trainer.budget.exhausted
    trainer = StandIn(budget=1)  # not one task's episodes fit: nothing is spent
    assert train_real(trainer, fam, fam.tasks("train"), iterations=10, tasks_per_iteration=2, group_size=1,
                      max_turns=2, seed=0, label="x", progress=False) == []
    assert trainer.budget.used == 0 and "stopping after 0 iterations" in capsys.readouterr().out


LAYER = ("dreamgym.loops", "dreamgym.dream", "dreamgym.recipe", "dreamgym.train")


def test_the_loop_layer_dream_recipe_and_train_import_one_way():
    """loops <- dream <- recipe, and train over loops and dream: nothing any of them reaches imports it back."""
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
    assert not graph["dreamgym.loops"] & {"dreamgym.dream", "dreamgym.recipe", "dreamgym.train"}
    assert not graph["dreamgym.dream"] & {"dreamgym.recipe", "dreamgym.train"}
    assert "dreamgym.recipe" not in graph["dreamgym.train"]
