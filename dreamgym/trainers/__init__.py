"""Agent trainers: GRPO and PPO (online, over a `TextEnv` factory), SFT and DPO (offline, over trajectories).

Owns: nothing itself; each trainer lives in its own module and shares the pieces in `common`. What the training
loops may call is written down once, as the protocols in `protocols`:

    OnlineTrainer:  trainer.train_iteration(tasks, env_factory) -> (episodes, metrics)   # one rollout batch + update
                    trainer.policy_version()
    OfflineTrainer: trainer.fit(trajectories) -> metrics
    both:           trainer.save(directory); trainer.load(directory)                      # exact resume

Must not know: concrete environments (trainers get a `TextEnv` factory or plain trajectories), presets.
"""

from dreamgym.trainers.common import ModelConfig, OptimConfig, TrainerConfig

__all__ = ["ModelConfig", "OptimConfig", "TrainerConfig"]
