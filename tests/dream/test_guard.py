"""The audit guard: its rule on audit summaries (threshold, min_wins, window), its config, and a guarded dream on the
dial that stops, rolls the policy back to the snapshot the rule names and, resumed, does not play on."""

import json

import pytest
import torch

from em_helpers import trained_dial_model
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.config import ConfigError, load_config
from dreamgym.curriculum.generator import CurriculumConfig
from dreamgym.dream.guard import AuditGuardConfig, GuardStop, check
from dreamgym.dream.world import DREAM_STATE_FILE, DreamConfig, DreamWorld
from dreamgym.envs import family
from dreamgym.rl.budget import RealStepBudget
from dreamgym.rl.loop import SNAPSHOTS_DIR, LoopSettings, RunState, run_phases
from dreamgym.rl.modes import online_phases
from dreamgym.trainers.common import OptimConfig, TrainerConfig
from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer


def audits(*wins_false):
    """Per-iteration audit summaries (iterations 1, 2, ...) from (dreamt wins, false successes) pairs."""
    return [(i, {"episodes": 4.0, "dream_wins": float(w), "false_successes": float(f)})
            for i, (w, f) in enumerate(wins_false, start=1)]


def guard(rate=0.5, window=2, min_wins=4):
    return AuditGuardConfig(max_false_success_rate=rate, window=window, min_wins=min_wins)


# ------------------------------------------------------------------------------------------------ the rule
def test_the_rule_fires_only_above_the_threshold():
    # window of the last two: 6 dreamt wins; 3 false is a rate of 0.5, not above 0.5; 4 false is
    assert check(audits((1, 0), (3, 1), (3, 2)), guard()) is None
    stop = check(audits((1, 0), (3, 2), (3, 2)), guard())
    assert stop == GuardStop(stopped_at=3, restore=0, dream_wins=6, false_successes=4, first=2, limit=0.5)
    assert stop.rate == pytest.approx(4 / 6)
    assert "iterations 2-3" in stop.reason and "4 false successes among 6 dreamt wins" in stop.reason
    assert check(audits((3, 2), (3, 1)), guard(rate=0.49)) is not None  # 3 of 6 > 0.49
    assert check(audits((3, 0), (3, 0)), guard(rate=0.0)) is None  # no false success: never above any rate


def test_the_rule_trusts_no_window_with_fewer_dreamt_wins_than_min_wins():
    assert check(audits((1, 1), (2, 2)), guard(min_wins=4)) is None  # 3 wins, all false: too few to judge
    assert check(audits((2, 2), (2, 2)), guard(min_wins=4)) is not None
    assert check(audits((0, 0), (1, 1)), guard(rate=0.0, min_wins=1)) is not None


def test_the_rule_judges_only_the_last_window_and_restores_the_player_of_the_iteration_before_it():
    # the seed-1 quickstart's audits (dream wins, false wins per iteration): it fires after iteration 8, the last
    # (iterations 6-7 hold 3 dreamt wins: too few to judge)
    seed1 = audits((4, 0), (2, 1), (2, 0), (1, 1), (3, 1), (0, 0), (3, 2), (3, 3))
    for i in range(1, 8):
        assert check(seed1[:i], guard()) is None
    stop = check(seed1, guard())
    # the window is iterations 7-8; the iteration before it, 6, was played by the policy after 5 updates
    assert (stop.stopped_at, stop.first, stop.restore, stop.dream_wins, stop.false_successes) == (8, 7, 5, 6, 5)
    # seeds 0 and 2: never (a window of 3 wins is not trusted; 4 of 8 or 3 of 6 is not above 0.5)
    seed0 = audits((1, 0), (2, 2), (2, 0), (0, 0), (2, 0), (2, 0), (1, 1), (1, 0))
    seed2 = audits((0, 0), (1, 0), (0, 0), (1, 1), (4, 0), (3, 0), (3, 2), (3, 1))
    assert all(check(s[:i], guard()) is None for s in (seed0, seed2) for i in range(1, 9))
    # a window of 3: iterations 5-7 dilute iteration 7 (3 of 6: not above), 6-8 do not, and the restore goes back one
    # more; a window of 1 judges iteration 7 alone
    assert check(seed1[:7], guard(window=3)) is None
    stop = check(seed1, guard(window=3))
    assert (stop.stopped_at, stop.first, stop.restore) == (8, 6, 4)
    stop = check(seed1[:7], guard(window=1, min_wins=3))
    assert (stop.stopped_at, stop.first, stop.restore, stop.false_successes) == (7, 7, 5, 2)
    # a window at the start: never before the first policy
    assert check(audits((4, 4)), guard()).restore == 0


def test_the_guard_off_never_fires_and_a_verdict_round_trips_through_json():
    assert check(audits((4, 4), (4, 4)), AuditGuardConfig()) is None
    stop = check(audits((4, 4), (4, 4)), guard())
    assert GuardStop.from_dict(json.loads(json.dumps(stop.to_dict()))) == stop


# ------------------------------------------------------------------------------------------------ its config
def test_the_guard_needs_an_audit_and_its_fields_are_ranged(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(DreamConfig, None, ["guard.max_false_success_rate=0.5", "audit_episodes=0"], )
    assert e.value.field == "guard.max_false_success_rate"
    from dreamgym.commands.train import TrainConfig

    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, ["dream.guard.max_false_success_rate=0.5", "dream.audit_episodes=0"])
    assert e.value.field == "dream.guard.max_false_success_rate"
    for bad, name in (("max_false_success_rate=1.5", "max_false_success_rate"), ("window=0", "window"),
                      ("min_wins=0", "min_wins")):
        with pytest.raises(ConfigError) as e:
            load_config(TrainConfig, None, [f"dream.guard.{bad}"])
        assert e.value.field == f"dream.guard.{name}"
    cfg = load_config(TrainConfig, None, ["dream.guard.max_false_success_rate=0", "dream.guard.window=3"])
    assert cfg.dream.guard == AuditGuardConfig(max_false_success_rate=0.0, window=3, min_wins=4)
    assert load_config(TrainConfig, None, ["dream.audit_episodes=0"]).dream.guard.max_false_success_rate is None


# ------------------------------------------------------------------------------------------------ a guarded dream
class ScriptedAudit(DreamWorld):
    """The dial's dream world with its audit's summaries scripted (the guard's input: (dreamt wins, false
    successes) per iteration); the experience model, buffer, curriculum, trainer and snapshots are real."""

    script: dict[int, tuple[int, int]] = {}

    def audit_iteration(self, iteration, episodes, policy_version):
        wins, false = self.script[iteration]
        return {"episodes": 4.0, "dream_wins": float(wins), "false_successes": float(false), "real_steps": 0.0}


def _world(run_dir, script):
    world = ScriptedAudit("dial", DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(n_seeds=2),
                                              guard=guard(rate=0.5, window=2, min_wins=2)), run_dir, seed=0,
                          device="cpu")
    world.script = script
    return world


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_guarded_dream_stops_rolls_back_to_its_snapshot_and_a_resumed_run_does_not_play_on(tmp_path, warm_backend,
                                                                                             capsys):
    # planned: 5 iterations; the window of iterations 3-4 holds 2 false successes among 3 dreamt wins: the guard
    # stops after iteration 4 and restores the player of iteration 2, the policy after 1 update
    script = {1: (0, 0), 2: (1, 0), 3: (1, 0), 4: (2, 2), 5: (0, 0)}
    world = _world(tmp_path, script)
    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-3), agent=DIAL_AGENT, rollout=DIAL_ROLLOUT, group_size=2,
                           tasks_per_iteration=2)
    trainer = GRPOTrainer(warm_backend, GRPOConfig(), common)
    policies = {0: _weights(trainer.model)}

    def evaluate(tag, it):  # every iteration: the policy after it
        policies[it] = _weights(trainer.model)

    phases = lambda w: online_phases("dream", family("dial"), "dial", 0, world=w, dream_iterations=5,  # noqa: E731
                                     real_iterations=0, tasks_per_iteration=2)
    state = RunState(RealStepBudget(0))
    settings = LoopSettings(common, eval_every=1, run_dir=tmp_path, progress=False)
    hist = run_phases(trainer, phases(world), state, settings, evaluate=evaluate).history

    assert len(hist) == 4 and state.iteration == 4 and state.cut == 1  # fewer iterations than planned
    assert hist[-1]["dream/guard/stopped_at"] == 4 and hist[-1]["dream/guard/rolled_back_to"] == 1
    assert not any("dream/guard/stopped_at" in row for row in hist[:-1])
    out = capsys.readouterr().out
    assert "dream phase stopped after iteration 4 by its guard: the audit of iterations 3-4 found 2 false " \
           "successes among 3 dreamt wins, a rate of 0.67 > dream.guard.max_false_success_rate=0.5; the policy is " \
           "rolled back to grpo-seed0-it1" in out
    # the weights are the snapshot's, the policy after 1 iteration (not the one after 4: the updates moved it)
    now = _weights(trainer.model)
    assert sorted(policies) == [0, 1, 2, 3] and now.keys() == policies[1].keys()
    assert all(torch.equal(now[k], policies[1][k]) for k in now)
    assert any(not torch.equal(policies[1][k], policies[3][k]) for k in now)
    # the snapshots still reachable when it fired: the last window + 1 (it-0 was deleted after iteration 3)
    assert sorted(p.name for p in (tmp_path / SNAPSHOTS_DIR).iterdir()) == ["it-1", "it-2", "it-3"]
    saved = json.loads((tmp_path / DREAM_STATE_FILE).read_text())
    assert saved["iteration"] == 4 and saved["guard"]["stop"]["stopped_at"] == 4

    # Resumed (as `dreamgym train --resume` does: a new world in the run folder, the checkpoint's run state at 4,
    # without the `cut` this run recorded): the world's saved verdict ends the phase, no iteration is played
    world.buffer.close()  # the run's process ended
    resumed = _world(tmp_path, script)
    resumed.start(4)
    assert resumed.phase_end() == world.phase_end() and resumed.phase_end().restore == 1
    again = RunState(RealStepBudget(0), iteration=4)
    before = _weights(trainer.model)
    end = run_phases(trainer, phases(resumed), again, settings, evaluate=evaluate)
    assert end.history == [] and again.iteration == 4 and again.cut == 1
    assert all(torch.equal(before[k], v) for k, v in _weights(trainer.model).items())
    assert "dream phase ended after iteration 4" in capsys.readouterr().out
    # a checkpoint from before the verdict (iteration 3): the run redoes iteration 4, the guard judges it again
    resumed.buffer.close()
    early = _world(tmp_path, script)
    early.start(3)
    assert early.phase_end() is None


def test_an_unguarded_dream_writes_no_snapshot_and_keeps_its_saved_state_as_before(tmp_path, warm_backend):
    world = DreamWorld("dial", DreamConfig(em=str(trained_dial_model()), curriculum=CurriculumConfig(n_seeds=2),
                                           audit_episodes=1), tmp_path, seed=0, device="cpu")
    assert world.keeps_policies == 0 and world.phase_end() is None
    assert "guard" not in world.state_dict()
    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-4), agent=DIAL_AGENT, rollout=DIAL_ROLLOUT, group_size=2,
                           tasks_per_iteration=2)
    state = RunState(RealStepBudget(0))
    phases = online_phases("dream", family("dial"), "dial", 0, world=world, dream_iterations=1, real_iterations=0,
                           tasks_per_iteration=2)
    run_phases(GRPOTrainer(warm_backend, GRPOConfig(), common), phases, state,
               LoopSettings(common, run_dir=tmp_path, progress=False))
    assert not (tmp_path / SNAPSHOTS_DIR).exists() and state.state_dict().keys() == {"iteration", "budget"}
    assert world.audit_real_steps() > 0  # the audit's own steps, from its file
