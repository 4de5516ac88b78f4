"""Agent trainers: GRPO and PPO (online, over a `TextEnv` factory), SFT and DPO (offline, over trajectories).

Owns: nothing itself; each trainer lives in its own module and shares the pieces in `common`.
Must not know: concrete environments (trainers get a `TextEnv` factory or plain trajectories), presets.

The online trainers' API, used by `dreamgym.train` and the DreamGym pipeline:

    trainer.train_iteration(tasks, env_factory) -> (episodes, metrics)   # one rollout batch + one update
    trainer.save(directory); trainer.load(directory)                      # exact resume

The offline trainers: `trainer.fit(trajectories) -> metrics`, plus the same save/load.
"""

from dreamgym.trainers.common import ModelConfig, OptimConfig, TrainerConfig

__all__ = ["ModelConfig", "OptimConfig", "TrainerConfig"]
