"""The synthetic side: the experience model as an environment, the dream world a run plays in, and its audit.

Owns, one concept per module:

- `synthetic_env`: `SyntheticEnv`, the experience model as a `TextEnv` (reward from the model or grounded in the
  family's reward rule on the written states; a GRPO group shares sampling noise);
- `audit`: dream episodes replayed action by action in the real environment, outcome agreement;
- `guard`: the audit guard, the rule that stops a dream whose audit finds too many false successes and names the
  policy to roll back to;
- `world`: `DreamConfig` and `DreamWorld`, a `dreamgym.rl.loop.World` holding the experience model, its
  co-evolving replay buffer, the curriculum and the synthetic environments of one run.

Must not know: the run loop and its modes (they use a `DreamWorld`; it never reaches back), trainers, concrete
environments, how the experience model formats its prompts.
"""
