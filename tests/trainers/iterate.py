"""One iteration as the run loop (`dreamgym.rl.loop`) plays it, for trainer tests that pick their own tasks and
environment class: `group_size` episodes of each task, seeded by the trainer's seed and `iteration`, then the
trainer's update. Returns the episodes and the row the loop would log (rollout figures, then the update's)."""

from dreamgym.episode import rollout_metrics
from dreamgym.rl.rollout import run_rollouts
from dreamgym.trainers.common import mix_seed


def play_and_update(trainer, tasks, env_factory, iteration=0):
    episodes = run_rollouts(trainer.backend, env_factory, tasks, group_size=trainer.common.group_size,
                            seed=mix_seed(trainer.common.seed, iteration), config=trainer.common.rollout,
                            agent=trainer.common.agent)
    return episodes, {**rollout_metrics(episodes), **trainer.update(episodes).metrics}
