"""The dream audit and the dream's per-iteration report: a dream run replays a sample of its episodes in the real
dial, and the agreement it logs is what replaying those episodes by hand gives; the audit spends none of the
real-step budget; an iteration that trains nothing says so."""

import dataclasses
import json

import pytest

from em_helpers import trained_dial_model
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.dream import audit
from dreamgym.rl.budget import RealStepBudget
from dreamgym.curriculum.generator import CurriculumConfig
from dreamgym.data import read_jsonl
from dreamgym.dream.world import DREAM_EPISODES_DIR, DreamConfig, DreamWorld
from dreamgym.rl.modes import online_phases
from dreamgym.envs import dial, family
from dreamgym.episode import Episode, Turn
from dreamgym.rl.loop import LoopSettings, RunState, run_phases
from dreamgym.trainers.common import OptimConfig, TrainerConfig
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer


def _dream(tmp_path, backend, audit_episodes, rollout=DIAL_ROLLOUT, iterations=2):
    world = DreamWorld("dial", DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(n_seeds=2),
                                           audit_episodes=audit_episodes), tmp_path, seed=0, device="cpu")
    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-4), agent=DIAL_AGENT, rollout=rollout, group_size=2,
                           tasks_per_iteration=3)
    state = RunState(RealStepBudget(0))  # a budget of 0: any real step charged to it would fail the run
    phases = online_phases("dream", family("dial"), "dial", 0, world=world, dream_iterations=iterations,
                           real_iterations=0, tasks_per_iteration=3)
    hist = run_phases(GRPOTrainer(backend, GRPOConfig(), common), phases, state, LoopSettings(common, progress=False))
    return hist.history, state


def _by_hand(traj):
    """Replay a recorded dream episode's actions in a fresh real dial, independently of dreamgym.dream.audit: (real won,
    real steps)."""
    env = dial.DialEnv("train")
    env.reset(seed=0, options={"task": traj.task})
    won, n = False, 0
    for step in traj.steps:
        _, _, term, trunc, info = env.step(step.action)
        won, n = bool(info["won"]), n + 1
        if term or trunc:
            break
    return won, n


def test_a_dream_run_audits_its_episodes_and_logs_what_a_hand_replay_gives(tmp_path, warm_backend):
    hist, state = _dream(tmp_path, warm_backend, audit_episodes=3)
    assert state.budget.used == 0  # the audit's real steps are its own
    rows = [json.loads(line) for line in (tmp_path / audit.AUDIT_FILE).read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 1, 1, 2, 2, 2]
    for it, metrics in enumerate(hist, start=1):
        episodes = list(read_jsonl(tmp_path / DREAM_EPISODES_DIR / f"it-{it:05d}.jsonl"))
        mine = [r for r in rows if r["iteration"] == it]
        agree = false = steps = 0
        for r in mine:
            traj = episodes[r["episode_index"]]
            assert r["dream_file"] == f"{DREAM_EPISODES_DIR}/it-{it:05d}.jsonl" and r["env"] == "dial"
            assert r["policy_version"] == traj.policy_version and r["task"]["id"] == traj.task.id
            assert [s["action"] for s in r["steps"]] == [s.action for s in traj.steps]
            real_won, n = _by_hand(traj)
            assert (r["dream_won"], r["real_won"], r["real_steps"]) == (traj.won, real_won, n)
            agree += traj.won == real_won
            false += traj.won and not real_won
            steps += n
        assert metrics["dream/audit/episodes"] == 3 and metrics["dream/audit/unreplayable"] == 0
        assert metrics["dream/audit/agreement"] == pytest.approx(agree / 3)
        assert metrics["dream/audit/false_successes"] == false
        assert metrics["dream/audit/real_steps"] == steps > 0
        # the iteration's report: the update's figures and the model's failure states, under dream/
        assert metrics["dream/optimizer_steps"] == metrics["losses/optimizer_steps"]
        assert metrics["dream/zero_variance_groups"] == metrics["losses/zero_variance_groups"]
    # failure states per iteration: what the model's running count of failed answers grew by in that iteration
    counts = [0.0] + [m.get("dream/em/failures", 0.0) for m in hist]
    assert [m["dream/failure_states"] for m in hist] == [b - a for a, b in zip(counts, counts[1:])]


def test_an_iteration_that_trains_nothing_warns_and_the_audit_can_be_off(tmp_path, warm_backend, capsys):
    # One turn cannot win a dial task (each starts 5 away from its target): every group's rewards are 0
    hist, _ = _dream(tmp_path, warm_backend, audit_episodes=0,
                     rollout=dataclasses.replace(DIAL_ROLLOUT, max_episode_steps=1), iterations=1)
    assert hist[0]["dream/optimizer_steps"] == 0 and hist[0]["dream/zero_variance_groups"] == 3
    assert "warning: dream iteration 1 trained nothing (0 optimiser steps): 3 of 3 groups had equal rewards" \
        in capsys.readouterr().out
    assert not (tmp_path / audit.AUDIT_FILE).exists() and not any(k.startswith("dream/audit/") for k in hist[0])


def _episode(task, actions, won=False):
    return Episode(task=task, seed=7, group=0, member=0, source="synthetic", end_reason="terminated", won=won,
                   initial_state=dial.abstract_state(3),
                   turns=[Turn(state="", prompt_ids=[], completion_ids=[], logprobs=[], text=a, action=a,
                               next_state="", reward=float(won), stepped=True) for a in actions])


def test_an_episode_the_real_environment_cannot_replay_is_counted_apart():
    good = dial.tasks("train")[0]
    # a curriculum variant the real dial has no game for
    variant = dataclasses.replace(good, id="gen-1", instruction="spin the dial", goal={})
    reps = [audit.replay(_episode(good, ["submit"], won=True), lambda: dial.DialEnv("train"), 0),
            audit.replay(_episode(variant, ["submit"]), lambda: dial.DialEnv("train"), 1)]
    assert reps[1].error.startswith("ValueError") and reps[1].real_steps == 0
    s = audit.summarize(r.to_row() for r in reps)
    assert s["episodes"] == 2 and s["unreplayable"] == 1 and s["real_steps"] == 1
    # the dream credited a submit far from the target: a false success
    assert s["agreement"] == 0 and s["false_successes"] == 1 and s["false_success_rate"] == 1


def test_the_audit_file_keeps_earlier_iterations_and_unreadable_lines_and_replaces_redone_ones(tmp_path):
    path = tmp_path / audit.AUDIT_FILE
    audit.write_rows(path, 1, [{"iteration": 1, "n": 1}])
    audit.write_rows(path, 2, [{"iteration": 2, "n": 1}])
    with open(path, "a") as fh:
        fh.write("{torn\n")
    audit.write_rows(path, 2, [{"iteration": 2, "n": 2}])  # a resumed run redoing iteration 2
    assert path.read_text().splitlines() == ['{"iteration": 1, "n": 1}', "{torn", '{"iteration": 2, "n": 2}']


def test_the_sample_is_seeded_and_leaves_untrainable_episodes_out():
    task = dial.tasks("train")[0]
    eps = [_episode(task, ["submit"]) for _ in range(6)]
    eps[2].end_reason = "env_error"
    assert audit.sample(eps, 3, seed=5) == audit.sample(eps, 3, seed=5)
    assert 2 not in audit.sample(eps, 5, seed=1) and len(audit.sample(eps, 10, seed=1)) == 5


def test_variants_the_real_environment_cannot_start_are_left_out_of_the_sample_and_not_replayed():
    task = dial.tasks("train")[0]
    variant = dataclasses.replace(task, id=task.id + "~g1.0", split="generated", parent_id=task.id)
    eps = [_episode(variant if i % 2 else task, ["submit"]) for i in range(6)]
    assert set(audit.sample(eps, 6, seed=0)) == set(range(6))
    assert audit.sample(eps, 6, seed=0, variants=False) == [0, 2, 4]
    # a variant whose real start is not the dream's (a MiniWoB++ variant on its parent's page) is not replayed
    shown = _episode(variant, ["submit"])
    shown.initial_state = "another page"
    rep = audit.replay(shown, lambda: dial.DialEnv("train"), 0)
    assert "another task" in rep.error and rep.real_steps == 0
