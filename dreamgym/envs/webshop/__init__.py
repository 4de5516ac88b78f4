"""WebShop: a web-shopping environment family that behaves like Princeton's WebShop on a generated catalog
(or on the official data files, when a user has them).

Owns: the family surface (see `dreamgym.envs.family`): `make_env`, `tasks`, `POLICIES`, `admissible_from_state`,
`parse_goal`, `explain`, `corpus_text`, `grounded_outcome`, `model_observation`, `state_after`, `noop_state`,
`hidden_outcome_key`, `determined_outcome`, plus the published mappers `html_to_abstract` /
`html_to_text`.
Must not know: models, torch, trainers, storage formats.

Modules: vocab (word lists), product (the product schema), catalog (generator, catalogs, cache), search
(bm25s), goals (instructions, splits, parser), reward (the original formula), pages (page state, HTML, abstract
states), env (`WebShopEnv`), outcomes (the steps a page or a recorded real step fixes), policies (oracle / noisy /
random), explain (reasoning traces), official (reader of the official files), server (`dreamgym webshop
serve`).

Catalog settings (`n_products`, `seed`, `official_dir`, `catalog_key`) are accepted by `make_env`, `tasks`
and `corpus_text`; the defaults give the 2,000-product synthetic catalog with its fixed splits.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from dreamgym.envs.webshop.catalog import get_catalog
from dreamgym.envs.webshop.env import MAX_STEPS, WebShopEnv, catalog_tasks, grounded_outcome
from dreamgym.envs.webshop.explain import explain
from dreamgym.envs.webshop.goals import parse_goal
from dreamgym.envs.webshop.outcomes import (determined_outcome, hidden_outcome_key, model_observation, noop_state,
                                            state_after)
from dreamgym.envs.webshop.pages import admissible_from_state, html_to_abstract, html_to_text, parse_abstract
from dreamgym.envs.webshop.policies import POLICIES
from dreamgym.types import Task

_CATALOG_KW = ("n_products", "seed", "official_dir", "catalog_key")

EXPERT_POLICY = "expert"
"""The scripted policy whose episodes are SFT demonstrations (`EnvFamily.EXPERT_POLICY`)."""
EXPLORE_POLICIES = {"noisy": 0.7, "random": 0.3}
"""The exploring scripted policies and their weights, DPO's demonstrations (`EnvFamily.EXPLORE_POLICIES`)."""

__all__ = ["EXPERT_POLICY", "EXPLORE_POLICIES",
           "make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain",
           "corpus_text", "grounded_outcome", "model_observation", "noop_state", "state_after", "hidden_outcome_key",
           "determined_outcome", "html_to_abstract", "html_to_text", "parse_abstract", "WebShopEnv"]


def make_env(split: str = "train", **kwargs: Any) -> WebShopEnv:
    """A `WebShopEnv` on the given split; kwargs: obs_mode ("text" | "html" | "abstract"), max_steps (15),
    n_products (2000), seed (0), official_dir, catalog_key."""
    return WebShopEnv(split=split, **kwargs)


def tasks(split: str = "train", **kwargs: Any) -> list[Task]:
    """The tasks of a split: "train" (the training pool) or "test" (the fixed 500 held-out goals)."""
    kw = {k: v for k, v in kwargs.items() if k in _CATALOG_KW}
    key = kw.pop("catalog_key", None)
    return catalog_tasks(get_catalog(key, **kw), split)


def corpus_text(n_episodes: int = 160, **kwargs: Any) -> list[str]:
    """Representative WebShop text for training a tokenizer: training instructions, product titles, and the
    abstract states, simple-mode observations, actions and reasoning traces of oracle and noisy episodes on
    training tasks (never test tasks). Deterministic; about a second on first call, cached afterwards."""
    kw = tuple(sorted((k, v) for k, v in kwargs.items() if k in _CATALOG_KW))
    return list(_corpus(int(n_episodes), kw))


@lru_cache(maxsize=4)
def _corpus(n_episodes: int, kw: tuple[tuple[str, Any], ...]) -> tuple[str, ...]:
    from dreamgym.types import Transition

    opts = dict(kw)
    key = opts.pop("catalog_key", None)
    catalog = get_catalog(key, **opts)
    train = catalog_tasks(catalog, "train")
    lines: list[str] = [t.instruction for t in train[:1500]]
    lines += [p.title for p in catalog.products[:500]]
    env = WebShopEnv(split="train", obs_mode="text", catalog_key=catalog.key)
    step = max(1, len(train) // max(1, n_episodes))
    for i, task in enumerate(train[::step][:n_episodes]):
        policy = POLICIES["oracle" if i % 2 == 0 else "noisy"](i)
        obs, info = env.reset(options={"task": task})
        policy.reset(task, obs, info)
        lines.append(obs)
        for _ in range(env.max_steps):
            action = policy.act(obs, info)
            state = info["abstract_state"]
            obs, reward, term, trunc, info = env.step(action)
            tr = Transition(task=task, history=[], state=state, action=action,
                            next_state=info["abstract_state"], reward=reward, done=term or trunc)
            lines += [state, action, explain(tr), obs]
            if term or trunc:
                lines.append(info["abstract_state"])
                break
    env.close()
    return tuple(lines)
