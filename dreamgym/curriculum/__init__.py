"""The task generator: which tasks an iteration plays.

Owns, one concept per module:

- `pools`: the train tasks a run draws from (all, those with real data, those a trajectory file played, those a
  dream left undecided), a seeded draw per iteration, and the dream's reward-variance log they are read from;
- `generator`: `Curriculum`, harder variants of the tasks whose outcomes vary most (reward variance, the λ cap),
  written by the experience model's own LLM, and the examples that teach it to write them.

Must not know: torch or any model library, trainers, the run loop, concrete environments (a family's goal parser is
passed in).
"""
