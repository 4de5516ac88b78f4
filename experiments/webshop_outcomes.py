"""Where a WebShop policy's episodes end: no purchase (stuck repeating one action, or wandering), or a purchase
scored part by part, and for a purchase that missed whether the product it bought could have scored 1.

Success and mean reward say how much a policy wins; they do not say why it loses, nor what RL changed. This
plays a policy greedily on test goals (as `dreamgym eval` does), keeps each episode's final `info` (WebShop's
`reward_parts`: type, attributes, options, price) and sorts the episodes into:

- won;
- bought, right product: every goal attribute, the type and the price matched, so only options were missed and
  choosing the goal's option values on the same page would have won (the product's best score is 1);
- bought, wrong product: the product itself could not score 1 with any options;
- no purchase, stuck: the last four actions were one or two actions repeated (greedy decoding from the same page
  repeats forever);
- no purchase, other: ran out of turns otherwise (or wrote no action).

It also prints which reward parts the losing purchases missed, how many wrong-product purchases had a product that
could have won on a results page the policy saw (search found it, the choice missed it), on how many distinct
pages the policy did what the `shopper` policy (its SFT teacher, which decides from the instruction and the page
alone) does there, and how many product clicks named an id that action grounding had to rewrite.

    python experiments/webshop_outcomes.py --policy runs/ws-sft20/final --max-tasks 500 \
        agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 \
        rollout.max_episode_steps=15
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from typing import Any

import torch

from dreamgym.config import load_config
from dreamgym.envs import family
from dreamgym.envs.webshop.pages import norm_label, parse_abstract
from dreamgym.envs.webshop.policies import ShopperPolicy
from dreamgym.envs.webshop.reward import get_reward
from dreamgym.rl.evaluate import EvalConfig, evaluate_policy
from dreamgym.rl.builders import build_backend
from dreamgym.utils.paths import atomic_write_text
from dreamgym.commands.train import TrainConfig

ASIN = re.compile(r"\bB0[0-9A-Z]{8}\b")
PRODUCT_CLICK = re.compile(r"click\[b0[0-9a-z]{6,}\]", re.I)
CATEGORIES = ("won", "bought, right product, wrong options", "bought, wrong product", "no purchase, stuck",
              "no purchase, other")


class _KeepLastInfo:
    """Delegates to a real WebShop env and keeps the `info` of its latest reset or step."""

    def __init__(self, env: Any):
        self.env, self.last_info, self.listed = env, {}, set()

    def _keep(self, info: dict[str, Any]) -> None:
        self.last_info = info
        if info.get("page") == "results":
            self.listed |= set(ASIN.findall(info.get("abstract_state", "")))

    def reset(self, *a: Any, **kw: Any) -> Any:
        obs, info = self.env.reset(*a, **kw)
        self._keep(info)
        return obs, info

    def step(self, action: str) -> Any:
        out = self.env.step(action)
        self._keep(out[4])
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def teacher_pages(episode: Any, teacher: ShopperPolicy) -> list[tuple[Any, str]]:
    """Each distinct page of `episode` (a page seen again in a loop counts once) as (its turn, the shopper's
    action there); shared with `webshop_dagger.py`, which trains on these labels."""
    teacher.reset(episode.task, "", {})
    seen: set[str] = set()
    out = []
    for t in episode.turns:
        if t.state not in seen:
            seen.add(t.state)
            out.append((t, teacher.act("", {"abstract_state": t.state})))
    return out


def best_score(env: Any, asin: str, goal: dict[str, Any]) -> float:
    """The best score the bought product could get: each of its options set in turn to the value that scores
    highest (the reward's option match is fuzzy for colours, so trying the values beats comparing strings)."""
    product = env.catalog.by_asin.get(asin)
    if product is None:
        return 0.0
    chosen: dict[str, str] = {}
    for name, values in product.options.items():
        chosen[name] = max(values, key=lambda v: get_reward(product, goal, product.price, {**chosen, name: v})[0])
    return get_reward(product, goal, product.price, chosen)[0]


def categorise(episode: Any, env: _KeepLastInfo) -> str:
    info = env.last_info
    if episode.won:
        return CATEGORIES[0]
    if info.get("reward_parts"):
        goal = episode.task.goal
        return CATEGORIES[1] if best_score(env, info.get("asin") or "", goal) >= 1.0 else CATEGORIES[2]
    actions = [t.action for t in episode.turns]
    return CATEGORIES[3] if len(actions) >= 4 and len(set(actions[-4:])) <= 2 else CATEGORIES[4]


def webshop_policy(policy: str, overrides: list[str], threads: int) -> tuple[Any, TrainConfig, Any]:
    """The WebShop family, the config the overrides give (the policy's prompt and rollout) and the policy backend;
    shared with `webshop_dagger.py`."""
    torch.set_num_threads(threads)
    cfg = load_config(TrainConfig, None, ["env=webshop", *overrides])
    return family("webshop"), cfg, build_backend(cfg, policy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="policy checkpoint or model directory")
    ap.add_argument("--max-tasks", type=int, default=500, help="the first N test goals")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="", help="also write the per-episode categories here")
    ap.add_argument("overrides", nargs="*", help="TrainConfig overrides for the policy's prompt and rollout")
    args = ap.parse_args()
    fam, cfg, backend = webshop_policy(args.policy, args.overrides, args.threads)
    envs: list[_KeepLastInfo] = []

    def factory() -> _KeepLastInfo:
        envs.append(_KeepLastInfo(fam.make_env("test")))
        return envs[-1]

    tasks = fam.tasks("test")[: args.max_tasks]
    ecfg = EvalConfig(agent=cfg.agent, rollout=cfg.rollout)
    result = evaluate_policy(backend, factory, tasks, [0], ecfg)
    # The rollout engine builds one env per episode, in episode order, and never reuses one, so the i-th env
    # built holds the i-th episode's final info.
    if len(envs) != len(result.episodes):
        raise SystemExit(f"{len(envs)} environments for {len(result.episodes)} episodes: cannot pair them")
    counts: collections.Counter = collections.Counter()
    missed: collections.Counter = collections.Counter()  # purchases that did not win: which parts fell short
    product_clicks = rewritten = wrong_but_listed = 0
    agree: collections.Counter = collections.Counter()  # page kind -> turns whose action is the shopper's
    turns_on: collections.Counter = collections.Counter()
    shopper = ShopperPolicy()
    rows = []
    for ep, w in zip(result.episodes, envs):
        cat = categorise(ep, w)
        counts[cat] += 1
        if cat == CATEGORIES[2]:
            wrong_but_listed += any(best_score(w, a, ep.task.goal) >= 1.0 for a in w.listed)
        parts = w.last_info.get("reward_parts") or {}
        if parts and not ep.won:
            missed.update(k for k in ("r_type", "r_attr", "r_option", "r_price") if parts[k] < 1.0)
        for t, label in teacher_pages(ep, shopper):
            kind = parse_abstract(t.state)["page"]
            turns_on[kind] += 1
            agree[kind] += norm_label(t.action or "") == norm_label(label)
        for t in ep.turns:
            if t.action and PRODUCT_CLICK.match(t.action):
                product_clicks += 1
                rewritten += t.generated_action is not None
        rows.append({"task": ep.task.id, "category": cat, "reward": ep.reward,
                     "actions": [t.action for t in ep.turns]})
    print(f"{args.policy}: {result.n_success}/{result.n} won, mean reward {result.mean_reward:.3f}")
    for c in CATEGORIES:
        print(f"  {c:38s} {counts[c]:4d}")
    print("  purchases that did not win, by part short of 1: "
          + ", ".join(f"{k[2:]} {missed[k]}" for k in ("r_type", "r_attr", "r_option", "r_price")))
    print(f"  wrong-product purchases with a product that could win on a results page the policy saw: "
          f"{wrong_but_listed} of {counts[CATEGORIES[2]]}")
    # The SFT start imitates the `shopper` policy's wins, and the shopper decides from the instruction and the
    # page alone, so on any state it is the teacher's action: agreement per page kind says which decision the
    # policy gets wrong (the search query must match word for word, so its rate is a lower bound).
    print("  distinct pages where the policy did what the shopper does: "
          + ", ".join(f"{k} {agree[k]}/{turns_on[k]}" for k in sorted(turns_on, key=lambda k: -turns_on[k])))
    # The policy writes a product id it read on the results page; an id that is not there is replaced by the
    # most similar one on the page (rollout.ground_actions), which picks a product the policy did not choose.
    print(f"  product clicks whose id grounding rewrote: {rewritten} of {product_clicks}")
    if args.json:
        atomic_write_text(args.json, json.dumps({"policy": args.policy, "counts": dict(counts), "episodes": rows},
                                                indent=1))


if __name__ == "__main__":
    main()
