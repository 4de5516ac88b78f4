"""Agent trainers: GRPO and PPO (online: they learn from the episodes a run loop played), SFT and DPO (offline:
they fit stored trajectories).

Owns: nothing itself; each trainer lives in its own module (`grpo`, `ppo`, `sft`, `dpo`) and shares the pieces in
`common`, the pure advantage and loss math in `algos` and the checkpoint files in `checkpoint`; GRPO and PPO share one
update skeleton and its typed result (`online`), with its optional SFT term on demonstrations (`anchor`), SFT and DPO
one fit loop (`offline`). What the loops may call (the
protocols `dreamgym.rl.builders.OnlineTrainer` and `OfflineTrainer`):

    online:  trainer.update(episodes) -> UpdateResult     # one iteration's update; the loop plays and counts
    offline: trainer.fit(trajectories) -> metrics
    both:    trainer.save(directory, run_state); trainer.load(directory) -> run_state   # exact resume

Must not know: the rollout engine, the real-step budget, iterations, environments, presets.
"""

from dreamgym.trainers.common import ModelConfig, OptimConfig, TrainerConfig

__all__ = ["ModelConfig", "OptimConfig", "TrainerConfig"]
