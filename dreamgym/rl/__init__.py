"""The RL loop: where a policy plays, what it may spend, and how it is evaluated.

Owns, one concept per module:

- `budget`: the real-step budget, a hard cap, and what an iteration can afford;
- `rollout`: batched multi-turn rollouts, token-in/token-out, failures isolated, the budget enforced;
- `evaluate`: success rate with 95% intervals on held-out real tasks;
- `compare`: evaluations compared: episodes paired across policies, the exact sign test, the IQM over runs;
- `builders`: the trainer seams the loops use, building policy backends and trainers, the offline loop, the one
  evaluation path;
- `loop`: the run loop over phases (tasks, rollouts, update, the world's turn, log, save, evaluate), `World`,
  `RunState`, `LoopSettings`;
- `modes`: real, dream and sim-to-real runs, each a named list of phases, and the real world they play in.

Must not know: trainers' internals (an update is a typed result), concrete environments (families are reached
through `dreamgym.envs.family`), the experience model's prompt format, command lines.
"""
