"""WebShopEnv: the WebShop page flow as a `TextEnv` (search -> results -> item -> sub-pages -> done).

Owns: the episode logic: action parsing, page transitions, the step limit, the purchase and its reward,
the observation modes and the `info` dict.
Must not know: models, torch, trainers, the experience model, how trajectories are stored.

Actions: `search[query]` (on the search page) and `click[element text]` (an element of the current page;
case and whitespace do not matter; an option may also be clicked as `click[size: large]`). Anything else,
and any element not on the page, is answered with the same page plus a short notice. The episode ends
with `click[Buy Now]` (terminated, reward = the WebShop score) or after `max_steps` steps (truncated,
reward 0). A query is cut at 500 characters (and the search engine reads at most 64 words).

Observation modes (`obs_mode`): "text" (WebShop's simple mode, `html_to_text`), "html" (the raw page) and
"abstract" (`html_to_abstract`, which is also always in `info["abstract_state"]`). In "abstract" mode the
observation does not repeat the instruction: agents read it from `info["task"].instruction`.

`info` keys beyond the TextEnv contract: `page` (page kind), `asin` (product on screen), `selected_options`,
`notice` ("" when the action was valid), `valid_action`, `step`, `catalog_key` (to rebuild the catalog
elsewhere), `r_type`/`r_attr`/`r_option`/`r_price` (None until a purchase) and `reward_parts`.
`raw_obs` is the page's HTML in every mode.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.envs.webshop.catalog import DEFAULT_N_PRODUCTS, DEFAULT_SEED, Catalog, get_catalog, synthetic_key
from dreamgym.envs.webshop.goals import parse_goal
from dreamgym.envs.webshop.outcomes import catalog_id, clean_query
from dreamgym.envs.webshop.pages import (ACTION_RE, BUY_NOW, PageState, admissible_from_state, clickables,
                                         html_to_abstract, html_to_text, norm_label, parse_abstract, refusal_notice,
                                         render_html)
from dreamgym.envs.webshop.reward import get_reward
from dreamgym.types import Task

OBS_MODES = ("text", "html", "abstract")


def goal_to_task(goal: dict[str, Any], split: str, index: int, prefix: str = "webshop") -> Task:
    return Task(id=f"{prefix}-{split}-{index:05d}", env="webshop", instruction=goal["instruction_text"],
                goal=goal, split=split)


_TASKS: dict[tuple[str, str], list[Task]] = {}


def catalog_tasks(catalog: Catalog, split: str) -> list[Task]:
    """The tasks of a catalog's split, built once per process (callers get a copy of the list)."""
    key = (catalog.key, split)
    if key not in _TASKS:
        prefix = "webshop" if catalog.key == synthetic_key() else f"webshop[{catalog.key}]"
        _TASKS[key] = [goal_to_task(g, split, i, prefix) for i, g in enumerate(catalog.goals(split))]
    return list(_TASKS[key])


def task_catalog(task: Task) -> Catalog | None:
    """The catalog a task's goals were drawn from, read from its id (`catalog_tasks`' prefixes), or None for an
    id of another form."""
    if task.id.startswith("webshop-"):
        return get_catalog(synthetic_key())
    if task.id.startswith("webshop["):
        return get_catalog(catalog_id(task))
    return None


def grounded_outcome(task: Task, state: str, action: str, next_state: str,
                     history: Sequence[tuple[str, str]] = ()) -> tuple[float, bool] | None:
    """WebShop's reward rule on abstract states (the family surface of `dreamgym.envs`): `click[Buy Now]` on an
    item page buys the catalog product that page names, with the options the page marks selected (only those
    the product really has), and scores it with the original formula at the catalog price; it ends the
    episode. Any other step gives 0 and goes on. A product id the catalog lacks buys nothing (0, ended). None
    when the task's catalog or goal is unknown. `next_state` is not read: what the model wrote on the
    confirmation page (its score line included) does not decide the reward."""
    m = ACTION_RE.match(action or "")
    if not (m and m.group(1).lower() == "click" and norm_label(m.group(2)) == norm_label(BUY_NOW)):
        return 0.0, False
    page = parse_abstract(state)
    if page["page"] != "item":
        return 0.0, False  # the real page has no Buy Now button there: nothing happens
    catalog = task_catalog(task)
    goal = task.goal if task.goal else parse_goal(task.instruction)
    if catalog is None or not goal:
        return None
    product = catalog.by_asin.get(page["asin"])
    if product is None:
        return 0.0, True
    offered = {(norm_label(k), norm_label(v)): (k, v) for k, vs in product.options.items() for v in vs}
    chosen = dict(offered[(norm_label(o["name"]), norm_label(o["value"]))] for o in page["options"]
                  if o["selected"] and (norm_label(o["name"]), norm_label(o["value"])) in offered)
    reward, _ = get_reward(product, goal, product.price, chosen)
    return float(reward), True


MAX_STEPS = 15
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""


class WebShopEnv(TextEnv):
    """One shopping session. Many envs share one catalog (built once per process, see `get_catalog`)."""

    env_family = "webshop"

    def __init__(self, split: str = "train", obs_mode: str = "text", max_steps: int = MAX_STEPS,
                 n_products: int = DEFAULT_N_PRODUCTS, seed: int = DEFAULT_SEED,
                 official_dir: str | Path | None = None, catalog_key: str | None = None):
        super().__init__()
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        self.catalog = get_catalog(catalog_key, n_products=n_products, seed=seed, official_dir=official_dir)
        self.split = split
        self.obs_mode = obs_mode
        self.max_steps = max_steps
        self.tasks = catalog_tasks(self.catalog, split)
        self.task: Task = self.tasks[0] if self.tasks else Task(id="none", env="webshop", instruction="")
        self.goal: dict[str, Any] = {}
        self.state = PageState()
        self.t = 0

    # -- episode -------------------------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.get("task")
        if task is None:
            if not self.tasks:
                raise ValueError(f"WebShop split {self.split!r} has no tasks")
            i = random.Random(seed).randrange(len(self.tasks)) if seed is not None else \
                int(self.np_random.integers(len(self.tasks)))
            task = self.tasks[i]
        goal = task.goal if task.goal else parse_goal(task.instruction)
        if not goal:
            raise ValueError(f"WebShop task {task.id!r} has no goal and its instruction does not parse")
        self.task, self.goal = task, goal
        self.state = PageState()
        self.t = 0
        return self._observe()

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        reward, terminated = 0.0, False
        new_state, notice = self._transition(action)
        if notice:
            new_state = self.state.with_notice(notice)
        elif new_state.kind == "done":
            assert new_state.purchase is not None  # a done page is the page after a purchase
            reward, terminated = float(new_state.purchase["reward"]), True
        self.state = new_state
        obs, info = self._observe()
        info["invalid_action"] = bool(notice)  # the page did not change: the rollout counts it as a no-op step
        truncated = not terminated and self.t >= self.max_steps
        return obs, reward, terminated, truncated, info

    def _transition(self, action: str) -> tuple[PageState, str]:
        """The next page for an action, or (current page, notice) when the action cannot be carried out."""
        s = self.state.with_notice("")
        m = ACTION_RE.match(action) if isinstance(action, str) else None
        if not m:
            return s, refusal_notice(s.kind, action)
        verb, arg = m.group(1).lower(), m.group(2)
        if verb == "search":
            query = clean_query(arg)
            if s.kind != "search" or not query:
                return s, refusal_notice(s.kind, action)
            return PageState("results", query=query, results=tuple(self.catalog.search.search(query)), page=1), ""
        product = self.catalog.by_asin.get(s.asin) if s.asin else None
        target = norm_label(arg)
        effect = None
        for label, eff in clickables(s, product):
            if norm_label(label) == target or (eff[0] == "option" and norm_label(f"{eff[1]}: {eff[2]}") == target):
                effect = eff
                break
        if effect is None:
            return s, refusal_notice(s.kind, action)
        kind = effect[0]
        if kind == "search":
            return PageState(), ""
        if kind == "page":
            return PageState("results", query=s.query, results=s.results, page=int(effect[1])), ""
        if kind == "item":
            return PageState("item", query=s.query, results=s.results, page=s.page, asin=effect[1]), ""
        if kind == "option":
            sel = dict(s.selected)
            sel[effect[1]] = effect[2]
            return PageState("item", query=s.query, results=s.results, page=s.page, asin=s.asin,
                             selected=tuple(sel.items())), ""
        if kind == "sub":
            return PageState(effect[1], query=s.query, results=s.results, page=s.page, asin=s.asin,
                             selected=s.selected), ""
        if kind == "item_back":
            return PageState("item", query=s.query, results=s.results, page=s.page, asin=s.asin,
                             selected=s.selected), ""
        if kind == "results_back":
            return PageState("results", query=s.query, results=s.results, page=s.page), ""
        # buy
        assert product is not None
        reward, parts = get_reward(product, self.goal, product.price, s.selected_dict)
        opts = ", ".join(f"{k}: {v}" for k, v in s.selected)
        breakdown = (f"type {parts['r_type']:g} | attributes {parts['n_attr']}/{parts['n_goal_attrs']} | "
                     f"options {parts['n_option']}/{parts['n_goal_options']} | price {int(parts['r_price'])}/1")
        purchase = {"asin": product.asin, "options": opts, "score": round(reward, 4), "reward": reward,
                    "breakdown": breakdown, "parts": parts, "selected": s.selected_dict}
        return PageState("done", query=s.query, asin=product.asin, selected=s.selected, purchase=purchase), ""

    # -- observation ---------------------------------------------------------------------------------------
    def _observe(self) -> tuple[str, dict[str, Any]]:
        html = render_html(self.state, self.catalog, self.task.instruction)
        abstract = html_to_abstract(html)
        obs = {"text": html_to_text, "html": lambda h: h, "abstract": html_to_abstract}[self.obs_mode](html)
        purchase = self.state.purchase or {}
        parts = purchase.get("parts") or {}
        info = {
            "task": self.task,
            "won": bool(purchase) and purchase["reward"] == 1.0,
            "admissible_actions": admissible_from_state(abstract),
            "raw_obs": html,
            "abstract_state": abstract,
            "page": self.state.kind,
            "asin": self.state.asin,
            "selected_options": self.state.selected_dict,
            "notice": self.state.notice,
            "valid_action": not self.state.notice,
            "step": self.t,
            "catalog_key": self.catalog.key,
            "r_type": parts.get("r_type"), "r_attr": parts.get("r_attr"),
            "r_option": parts.get("r_option"), "r_price": parts.get("r_price"),
            "reward_parts": parts or None,
        }
        return obs, info
