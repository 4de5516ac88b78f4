"""DPO: pairs of a won and a failed trajectory of the same task; training raises the chosen-over-rejected margin."""

import math

from dreamgym.commands.collect import run_episode
from dreamgym.envs import dial
from dreamgym.trainers.dpo import DPOConfig, DPOTrainer, build_pairs
from dreamgym.types import Step, Task, Trajectory


def _traj(task_id, won, i):
    task = Task(id=task_id, env="dial", instruction="set the dial to 1 and press submit", goal={"target": 1})
    steps = [Step("[dial] 0", "submit", float(won), True, False)]
    return Trajectory(task=task, steps=steps, won=won, id=f"{task_id}-{i}")


def test_build_pairs_by_hand():
    trajs = [_traj("a", True, 0), _traj("a", False, 1), _traj("a", False, 2), _traj("b", True, 3),
             _traj("c", False, 4), _traj("c", True, 5), _traj("c", True, 6), _traj("c", True, 7)]
    pairs = build_pairs(trajs, max_pairs_per_task=2, seed=0)
    # a: 1 won x 2 failed -> 2 pairs; b: no failure -> none; c: 3 won x 1 failed -> capped at 2
    assert [(c.task.id, r.task.id) for c, r in pairs] == [("a", "a")] * 2 + [("c", "c")] * 2
    assert all(c.won and not r.won for c, r in pairs)
    assert {r.id for c, r in pairs[:2]} == {"a-1", "a-2"} and len({c.id for c, r in pairs[2:]}) == 2
    assert build_pairs(trajs, 2, seed=0) == pairs  # deterministic


def test_dpo_raises_the_preference_margin(tiny_backend, dial_common, tmp_path):
    env = dial.make_env("train")
    tasks = dial.make_tasks("train")[:6]
    trajs = [run_episode(env, dial.POLICIES[p](seed=i), seed=i, task=t, policy_name=p)
             for i, t in enumerate(tasks) for p in ("expert", "random", "random")]
    tr = DPOTrainer(tiny_backend, DPOConfig(beta=0.5, epochs=4, pairs_per_step=4, max_pairs_per_task=1),
                    dial_common(lr=1e-3), admissible_fn=dial.admissible_from_state)
    pairs = tr.pairs(trajs)
    assert len(pairs) >= 4
    tr.ref_logps = tr._reference(pairs)  # what fit() does first: the policy before any step is the reference
    first = tr.train_step(pairs[:4], tr.ref_logps[:4])
    assert abs(first["loss"] - math.log(2)) < 1e-4 and abs(first["margin"]) < 1e-4
    last = tr.fit(trajs)
    assert last["loss"] < 0.45 and last["accuracy"] == 1.0 and last["margin"] > 0
    tr.save(tmp_path / "ck")
    again = DPOTrainer(tiny_backend, tr.config, dial_common(lr=1e-3))
    again.load(tmp_path / "ck")
    assert again.ref_logps is not None and (again.ref_logps == tr.ref_logps).all()
    assert again.iteration == 4 and again.global_step == tr.global_step
