"""How much of a dream GRPO group's reward spread is the experience model's luck rather than the policy's doing?

A GRPO group plays one task G times from one reset seed. In a real ALFWorld game the group shares the hidden
world (where each object lies), so members that act alike fare alike, and the group-relative advantage ranks
what they did. Inside a sampled experience model each member's observations are drawn separately, so members
can meet G different worlds, and the advantage then also ranks whom the model was kind to. This plays a scripted
policy that reads only the abstract state (`searcher-list`; with `--epsilon` each member takes a uniformly random
admissible command with that probability, so members differ as a sampled LLM policy's do) G times per task
inside the model, once with independent sampling noise per member and once with the noise shared within the
group (`SyntheticEnv.shared_noise`, common random numbers). Then every episode's actions are replayed in the real
game the synthetic episodes start from (seed-0 reset). Printed per condition: synthetic success, the share of
groups whose rewards differ, the mean within-group reward variance (the curriculum's V_tau), distinct action
sequences per group, the real success of the replayed episodes, how often the dream's outcome equals the
replay's, and the correlation of each episode's group-relative advantage in the dream with the same actions'
advantage in reality (the direction a GRPO update moves the policy, dream vs real), and where the dream and the
replay part: the share of steps before the first step whose observations differ (the family's
`model_observation`) and the kinds of action (`fidelity.action_kind`) at those first divergences. With `--epsilon 0` the
policy is deterministic: every reward difference under independent noise is the model's luck, and under shared
noise the members are identical by construction.

    python experiments/dream_group_noise.py --env alfworld --em runs/alf-em16 --data runs/alf/em-data.jsonl \
        --tasks 16 --group 8 --temperature 1.0 --max-steps 40 --epsilon 0.2
    # the same with the first looks into receptacles answered from recorded real steps (docs/log/11-copy-hidden-world.md)
    ... --em-override copy_hidden_outcomes=true
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from dreamgym.data import played_tasks
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.envs import family
from dreamgym.experience.fidelity import action_kind
from dreamgym.dream.synthetic_env import SyntheticEnv


class EpsilonPolicy:
    """A scripted policy that, with probability `epsilon`, takes a uniformly random admissible command instead."""

    def __init__(self, base: Any, epsilon: float, seed: int):
        self.base, self.epsilon, self.rng = base, epsilon, random.Random(seed)

    def reset(self, task: Any, obs: str, info: dict[str, Any]) -> None:
        self.base.reset(task, obs, info)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        adm = list(info.get("admissible_actions") or [])
        if adm and self.rng.random() < self.epsilon:
            return self.rng.choice(adm)
        return self.base.act(obs, info)


def member_policy(fam: Any, policy: str, epsilon: float, seed: int, task_index: int, member: int) -> EpsilonPolicy:
    """Member `member` of task `task_index`'s group: the same scripted policy in every member (and in the dream and
    the real game); only the epsilon draws differ between members."""
    return EpsilonPolicy(fam.POLICIES[policy](seed + task_index), epsilon, seed * 7919 + task_index * 101 + member)


def play_groups(world: DreamWorld, tasks: list, group: int, policy: str, *, shared: bool, max_steps: int,
                seed: int, epsilon: float) -> list[list[dict[str, Any]]]:
    """Each task's group of `group` members, played in lockstep with one batched model call per turn.
    Returns, per task, one record per member: reward, won, steps, actions, em_failure."""
    fam = world.family
    slots = []
    for ti, task in enumerate(tasks):
        for m in range(group):
            env = SyntheticEnv(world.model, world.buffer, tasks=[task], env=world.family_name, max_steps=max_steps,
                               reward_from=world.config.reward_from, shared_noise=shared, add_to_buffer=False)
            obs, info = env.reset(seed=seed + ti, options={"task": task})
            pol = member_policy(fam, policy, epsilon, seed, ti, m)
            pol.reset(task, obs, info)
            slots.append({"task": ti, "env": env, "pol": pol, "obs": obs, "info": info, "reward": 0.0,
                          "won": False, "steps": 0, "actions": [], "observations": [], "em_failure": False,
                          "done": False})
    turn = 0
    while any(not s["done"] for s in slots):
        live = [s for s in slots if not s["done"]]
        actions = [s["pol"].act(s["obs"], s["info"]) for s in live]
        for s, a, (obs, r, term, trunc, info) in zip(live, actions, SyntheticEnv.step_batch([s["env"] for s in live],
                                                                                             actions)):
            s["actions"].append(a)
            s["observations"].append(obs)
            s["obs"], s["info"], s["steps"] = obs, info, s["steps"] + 1
            s["reward"] += float(r)
            s["won"] = s["won"] or bool(info.get("won"))
            s["em_failure"] = s["em_failure"] or bool(info.get("em_failure"))
            s["done"] = bool(term or trunc)
        turn += 1
        if turn % 10 == 0:
            print(f"  turn {turn}: {len(live)} live episodes", flush=True)
    groups: list[list[dict[str, Any]]] = [[] for _ in tasks]
    for s in slots:
        s["env"].close()
        groups[s["task"]].append({k: s[k] for k in ("reward", "won", "steps", "actions", "observations",
                                                    "em_failure")})
    return groups


def real_groups(fam: Any, tasks: list, group: int, policy: str, seed: int, epsilon: float) -> dict[str, float]:
    """The same members played in the real game from the seed-0 reset the synthetic episodes start from: what a
    real GRPO group of this policy sees (its success and how many of its groups carry a signal)."""
    from dreamgym.commands.collect import run_episode

    env = fam.make_env("train")
    rewards = []
    for ti, task in enumerate(tasks):
        rewards.append([float(run_episode(env, member_policy(fam, policy, epsilon, seed, ti, m), 0, task=task,
                                          policy_name=policy).won) for m in range(group)])
    env.close()
    return {"success": statistics.fmean(r for g in rewards for r in g),
            "groups_with_unequal_rewards": sum(len(set(g)) > 1 for g in rewards) / len(rewards)}


def replay_real(fam: Any, tasks: list, groups: list[list[dict[str, Any]]]) -> None:
    """Adds `real_reward` to every member (its actions replayed in the real game from the seed-0 reset) and
    `diverged_at` (index of the first step whose real observation differs from the dream's; None if none did)."""
    observe = fam.hooks.model_observation if fam.hooks.writes_observations else str.strip
    env = fam.make_env("train")
    for task, g in zip(tasks, groups):
        for m in g:
            env.reset(seed=0, options={"task": task})
            total = 0.0
            m["diverged_at"] = None
            for i, (a, dream_obs) in enumerate(zip(m["actions"], m["observations"])):
                obs, r, term, trunc, info = env.step(a)
                total += float(r)
                real_state = info.get("abstract_state") or obs  # what the synthetic env returns as its observation
                if m["diverged_at"] is None and observe(real_state) != observe(dream_obs):
                    m["diverged_at"], m["divergence"] = i, (a, observe(dream_obs), observe(real_state))
                if term or trunc:
                    break
            m["real_reward"] = total
    env.close()


def _advantages(values: list[float]) -> list[float]:
    mean = statistics.fmean(values)
    return [v - mean for v in values]


def summarize(groups: list[list[dict[str, Any]]]) -> dict[str, float]:
    eps = [m for g in groups for m in g]
    rewards = [[m["reward"] for m in g] for g in groups]
    a_dream = [a for r in rewards for a in _advantages(r)]
    a_real = [a for g in groups for a in _advantages([m["real_reward"] for m in g])]
    try:
        corr = statistics.correlation(a_dream, a_real)
    except statistics.StatisticsError:  # no spread on one side: nothing to correlate
        corr = float("nan")
    return {"episodes": len(eps), "success": sum(m["won"] for m in eps) / len(eps),
            "groups_with_unequal_rewards": sum(len(set(r)) > 1 for r in rewards) / len(groups),
            "mean_group_reward_variance": statistics.fmean(statistics.pvariance(r) for r in rewards),
            "distinct_action_sequences_per_group": statistics.fmean(len({tuple(m["actions"]) for m in g})
                                                                    for g in groups),
            "mean_steps": statistics.fmean(m["steps"] for m in eps),
            "em_failure_episodes": sum(m["em_failure"] for m in eps) / len(eps),
            "replayed_real_success": sum(m["real_reward"] >= 1.0 for m in eps) / len(eps),
            "dream_real_outcome_agreement": sum(m["won"] == (m["real_reward"] >= 1.0) for m in eps) / len(eps),
            "groups_with_unequal_real_rewards": sum(len({m["real_reward"] for m in g}) > 1 for g in groups) / len(groups),
            "advantage_correlation_dream_vs_real": corr,
            "steps_before_first_divergence": statistics.fmean(
                (m["steps"] if m["diverged_at"] is None else m["diverged_at"]) / max(1, m["steps"]) for m in eps),
            "first_divergence_by_action_kind": dict(Counter(
                action_kind(m["actions"][m["diverged_at"]]) for m in eps if m["diverged_at"] is not None).most_common())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="alfworld", help="environment family")
    ap.add_argument("--em", required=True, help="experience-model checkpoint (dreamgym train-em)")
    ap.add_argument("--data", default="", help="offline data seeding the buffer (default: the model's own)")
    ap.add_argument("--policy", default="searcher-list", help="a deterministic scripted policy of the family")
    ap.add_argument("--tasks", type=int, default=16, help="train tasks, one group each")
    ap.add_argument("--tasks-from", default="",
                    help="take the tasks of this trajectory file's first episodes (games with real data in the "
                         "buffer) instead of the first train tasks")
    ap.add_argument("--group", type=int, default=8, help="group size G")
    ap.add_argument("--temperature", type=float, default=1.0, help="experience-model sampling temperature")
    ap.add_argument("--max-steps", type=int, default=40, help="synthetic episode step limit")
    ap.add_argument("--epsilon", type=float, default=0.0, help="per-step probability of a random admissible command")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show-divergences", type=int, default=0, help="print this many first divergences")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--em-override", action="append", default=[], metavar="KEY=VALUE",
                    help="experience-model config override (repeatable), e.g. copy_hidden_outcomes=true")
    ap.add_argument("--conditions", nargs="+", default=["independent", "shared"], choices=("independent", "shared"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fam = family(args.env)
    tasks = (played_tasks(args.tasks_from) if args.tasks_from else list(fam.tasks("train")))[:args.tasks]
    real = real_groups(fam, tasks, args.group, args.policy, args.seed, args.epsilon)
    print(f"real games, {args.policy} (epsilon {args.epsilon:g}), {len(tasks)} tasks x {args.group}: "
          + ", ".join(f"{k} {v:.3f}" for k, v in real.items()), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        dcfg = DreamConfig(em=args.em, em_data=args.data,
                           em_overrides=[f"temperature={args.temperature}", *args.em_override])
        world = DreamWorld(args.env, dcfg, Path(tmp), args.seed)
        for cond in args.conditions:
            t0 = time.time()
            before = Counter(world.model.stats)
            groups = play_groups(world, tasks, args.group, args.policy, shared=cond == "shared",
                                 max_steps=args.max_steps, seed=args.seed, epsilon=args.epsilon)
            replay_real(fam, tasks, groups)
            stats = summarize(groups)
            for m in [m for g in groups for m in g if m["diverged_at"] is not None][:args.show_divergences]:
                a, dream_obs, real_obs = m["divergence"]
                print(f"  step {m['diverged_at']} {a!r}\n    dream: {dream_obs[:160]}\n    real:  {real_obs[:160]}")
            used = Counter(world.model.stats)
            used.subtract(before)
            stats["model_stats"] = {k: v for k, v in used.items() if v}
            print(f"{cond} noise ({time.time() - t0:.0f} s): " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items()), flush=True)


if __name__ == "__main__":
    main()
