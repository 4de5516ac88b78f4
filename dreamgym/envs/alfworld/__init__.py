"""The ALFWorld environment family: generated (or official) games on the real ALFWorld engine.

Owns: the family surface every DreamGym environment family exposes (see `dreamgym.envs`): `make_env`,
`tasks`, `POLICIES`, `admissible_from_state`, `canonical_state`, `model_state`, `complete_state`,
`model_observation`, `state_after`, `noop_state`, `hidden_outcome_key`, `determined_outcome`, `outcome_contradiction`,
`parse_goal`, `goal_reached`, `grounded_outcome`, `explain`, `corpus_text`.
Must not know: models, torch, trainers. Importing this package does not start the engine.

Splits: "train" (3,553 games by default, written and checked lazily on first use unless
`dreamgym alfworld generate --train` made them all), "valid_seen" (140 games, the training floor plans with new
arrangements), "valid_unseen" (134 games on the 24 held-out floor plans), and "test" = valid_unseen followed by
valid_seen. With `ALFWORLD_DATA` set, the official game files of each split are used instead.
"""

from __future__ import annotations

from typing import Any

from dreamgym.envs.alfworld import games
from dreamgym.envs.alfworld.corpus import corpus_text
from dreamgym.envs.alfworld.env import MAX_STEPS
from dreamgym.envs.alfworld.games import tasks
from dreamgym.envs.alfworld.goals import explain, goal_reached, grounded_outcome, parse_goal
from dreamgym.envs.alfworld.knowledge import TASK_TYPES, ALFWorldMissing
from dreamgym.envs.alfworld.policies import POLICIES, ExpertPolicy, NoisyPolicy, RandomPolicy
from dreamgym.envs.alfworld.state import (admissible_from_state, canonical_state, complete_state,
                                         determined_outcome, hidden_outcome_key, model_observation, model_state,
                                         noop_state, outcome_contradiction, state_after)

SPLITS = (*games.SPLITS, "test")


def make_env(split: str = "train", **kwargs: Any):
    from dreamgym.envs.alfworld.env import ALFWorldEnv

    return ALFWorldEnv(split=split, **kwargs)


EXPERT_POLICY = "expert"
"""The scripted policy whose episodes are SFT demonstrations (`EnvFamily.EXPERT_POLICY`)."""
EXPLORE_POLICIES = {"noisy": 0.7, "random": 0.3}
"""The exploring scripted policies and their weights, DPO's demonstrations (`EnvFamily.EXPLORE_POLICIES`)."""

__all__ = ["EXPERT_POLICY", "EXPLORE_POLICIES",
           "ALFWorldMissing", "ExpertPolicy", "MAX_STEPS", "NoisyPolicy", "POLICIES", "RandomPolicy", "SPLITS",
           "TASK_TYPES",
           "admissible_from_state", "canonical_state", "complete_state", "corpus_text", "determined_outcome", "explain",
           "goal_reached", "grounded_outcome", "hidden_outcome_key", "make_env", "model_observation", "model_state",
           "noop_state", "outcome_contradiction", "parse_goal", "state_after", "tasks"]
