"""The viewer's real-beside-dream replay (`dreamgym.view.replay.replay_in_env`): a recorded dream episode replayed in
the real environment starts where the dream started, whatever seed the rollout gave the episode."""

from dreamgym.envs import family
from dreamgym.dream.synthetic_env import SyntheticEnv
from dreamgym.types import Step, Trajectory
from dreamgym.view.replay import replay_in_env


def test_a_dream_episode_replays_from_the_state_the_dream_started_in_whatever_its_rollout_seed():
    # ALFWorld draws its search order from the reset seed, so a replay reset with the rollout's seed (5 here)
    # starts in another state than the dream, which took its initial state from the synthetic environment.
    task = family("alfworld").tasks("train")[0]
    dream = SyntheticEnv(None, env="alfworld", initial_state="real")  # "real": the start needs no model
    start, info = dream.reset(seed=5, options={"task": task})
    action = info["admissible_actions"][0]
    traj = Trajectory(task=task, steps=[Step(start, action, 0.0, False, False, next_state=start)],
                      source="synthetic", seed=5, initial_state=start)

    cmp = replay_in_env(traj)

    assert not [n for n in cmp.notes if "another state" in n or "cannot replay" in n], cmp.notes
    assert cmp.steps[0].real is not None and cmp.steps[0].real.next_state.strip()
