"""Concrete environments, registered with gymnasium as `dreamgym/<Name>-v0`.

Owns: the registration table (entry points are strings, so importing this module loads no environment).
Must not know: models, torch, trainers.

Every environment family is a module or package here that exposes the same small surface, which the
collector, the experience model, the curriculum and evaluation use without knowing the family:

- `make_env(split: str = "train", **kwargs) -> TextEnv`
- `tasks(split: str) -> list[Task]` (splits: "train" and "test"; ALFWorld adds "valid_seen"/"valid_unseen")
- `POLICIES: dict[str, type]`: scripted policies by name ("oracle"/"expert", "noisy", "random"); each is
  constructed as `cls(seed: int)` and offers `reset(task, obs, info)` and `act(obs, info) -> str`
- `admissible_from_state(state: str) -> list[str]`: the actions an abstract state offers
- `parse_goal(instruction: str) -> dict | None`: the structured goal, or None when not well-formed
- `explain(transition: Transition) -> str`: the environment-grounded reasoning trace for a transition
- optional `canonical_state(state: str) -> str`: a state text in the family's canonical layout, derived
  lines recomputed (the synthetic environment passes the model's states through it)
- optional `model_state(state: str) -> str` and `complete_state(written: str, previous: str) -> str`: the part
  of a state an experience model writes, and the whole state rebuilt from it and the state before (lines a
  reset fixes are carried over instead of generated; `ExperienceModelConfig.compact_states`)
- optional `model_observation(state: str) -> str` and `state_after(previous: str, written: str) -> str`: only
  the observation (the feedback to the action) is written, and the whole next state is derived from it and the
  state before by the environment's own bookkeeping (`ExperienceModelConfig.write_observation`)
- optional `noop_state(state: str, action: str) -> str`: the abstract state the real environment shows after an
  action it cannot carry out (ALFWorld: the Observation line becomes "Nothing happens."; WebShop: the same page
  with the shop's notice). The synthetic environment answers inadmissible actions with it; without it the
  state stays as it was
- optional `grounded_outcome(task, state, action, next_state) -> (reward, terminated) | None`: the family's own
  reward rule applied to a transition between abstract states (ALFWorld: the goal conditions on `next_state`;
  WebShop: the purchase score of the catalog product bought from `state`); None when it cannot decide. The
  synthetic environment takes reward and end from it instead of the model's (`reward_from`)
- optional `hidden_outcome_key(task, state, action) -> str | None`: a key under which the action's outcome
  depends only on the task's hidden world (ALFWorld: the first look into a receptacle of that game; WebShop: a
  search, a product's page or tab on that catalog), so any recorded real step with the same key answers it
  (`ExperienceModelConfig.copy_hidden_outcomes`); None when the outcome follows from the state
- optional `determined_outcome(task, state, action) -> str | None`: the environment's answer to `action` when
  the state alone fixes it, as `state_after` folds it into the state (ALFWorld: the engine's feedback to a take
  within reach, a revisit of a known receptacle, an admissible move, inventory; WebShop: the whole next page
  after Back to Search or an option), else None (`ExperienceModelConfig.derive_determined_outcomes`)
- optional `outcome_contradiction(task, state, action, next_state) -> str`: why `next_state` cannot be the
  environment's answer to `action` (ALFWorld: feedback restating another command), "" when it can; the
  experience model re-generates such outputs like malformed ones (`ExperienceModelConfig.reject_contradictions`)

`family(name)` imports one of them by name.
"""

import importlib
from types import ModuleType

import gymnasium

_REGISTRY = {
    "dreamgym/Dial-v0": "dreamgym.envs.dial:DialEnv",
    "dreamgym/WebShop-v0": "dreamgym.envs.webshop.env:WebShopEnv",
    "dreamgym/ALFWorld-v0": "dreamgym.envs.alfworld.env:ALFWorldEnv",
    "dreamgym/TextWorld-v0": "dreamgym.envs.textworld_env:TextWorldEnv",
}

for _id, _entry in _REGISTRY.items():
    if _id not in gymnasium.registry:
        # No step limit wrapper: each env enforces its own limit and the contract's after-end behaviour.
        gymnasium.register(id=_id, entry_point=_entry, disable_env_checker=True, order_enforce=False)

FAMILIES = {
    "dial": "dreamgym.envs.dial",
    "webshop": "dreamgym.envs.webshop",
    "alfworld": "dreamgym.envs.alfworld",
    "textworld": "dreamgym.envs.textworld_env",
}


def family(name: str) -> ModuleType:
    """The family module for `name` (see the module docstring for what it exposes)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown environment family {name!r}; known: {', '.join(FAMILIES)}")
    return importlib.import_module(FAMILIES[name])
