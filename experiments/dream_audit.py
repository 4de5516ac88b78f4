"""On-policy fidelity of an experience model: does the dream agree with reality on *this policy's* episodes?

`dreamgym eval-em` scores the model on held-out real trajectories of the scripted policies; what RL needs is
agreement on the episodes the policy being trained actually produces, and a policy trained in the dream drifts
toward wherever the model is wrong. This plays the policy inside the synthetic environment, replays each dream
episode's actions in the real environment from the same task (`dreamgym.dream.audit`, what a dream run's audit does on a
sample of each iteration's episodes), and prints the outcome confusion (dream won vs real won) and the per-step
next-state agreement (exact abstract state -- the dial compares parsed states -- and token F1, the measure
`dreamgym eval-em` uses).

    python experiments/dream_audit.py --env dial --em runs/quickstart/em --policy runs/dial-transfer/start
    python experiments/dream_audit.py --env webshop --em runs/ws-em2 --policy runs/ws-sft3/final \
        --data runs/table-webshop/offline.jsonl --tasks 64 agent.history=0 agent.show_admissible=false

ALFWorld hides where objects are, so a replay there should fail whenever the dream put the target elsewhere;
for families with a reward rule (`grounded_outcome`) the script also counts the credited wins that the rule
grants on the dream's own last step (ALFWorld: every goal condition holds in the final state).
`--em-temperature` samples the model (the default is its checkpoint's, greedy):

    python experiments/dream_audit.py --env alfworld --em runs/alf-em11 --policy runs/alf-sft10/final \
        --data runs/alf/em-data.jsonl --tasks 16 --repeats 2 --seed 2 --threads 1 --em-temperature 1.0 \
        agent.history=0 agent.show_admissible=false rollout.max_new_tokens=32 rollout.ground_actions=0.8

Measured 2026-11-30 (144 episodes): the quickstart's model on the SFT start of experiments/dial_transfer.py
credited 88 true wins, missed 0, invented 4; on the policy after 10 dream iterations it invented 11 and 17% of
the episodes held a wrong next state (step agreement 0.88).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import tempfile
from pathlib import Path

import torch

from dreamgym.dream import audit
from dreamgym.config import apply_overrides, load_config
from dreamgym.data import played_tasks
from dreamgym.dream.world import DreamConfig, DreamWorld
from dreamgym.envs import family
from dreamgym.episode import rollout_metrics
from dreamgym.experience.fidelity import token_f1
from dreamgym.rl.builders import build_backend
from dreamgym.commands.recipe import env_train_config
from dreamgym.rl.rollout import run_rollouts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="dial", help="environment family")
    ap.add_argument("--em", required=True, help="experience-model checkpoint (dreamgym train-em)")
    ap.add_argument("--policy", required=True, help="policy checkpoint or model directory")
    ap.add_argument("--data", default="", help="offline data seeding the buffer (default: the model's own)")
    ap.add_argument("--tasks", type=int, default=0, help="train tasks to play (0: all)")
    ap.add_argument("--repeats", type=int, default=2, help="episodes per train task")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--em-temperature", type=float, default=None,
                    help="sample the experience model at this temperature (default: its checkpoint's, greedy)")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="episode step limit, at most the family's (rollout.max_episode_steps; 0: the family's)")
    ap.add_argument("--reward-from", default="model", choices=("model", "state", "auto"),
                    help="the synthetic env's success: the model's <reward> (default, what is audited) or the "
                         "family's reward rule on the dream's states (dream.reward_from)")
    ap.add_argument("--tasks-from", default="",
                    help="play the tasks of this trajectory file's episodes (games with real data in the buffer, "
                         "as dream.task_pool=data does) instead of the first train tasks")
    ap.add_argument("--em-override", action="append", default=[], metavar="KEY=VALUE",
                    help="experience-model config override (repeatable), e.g. copy_hidden_outcomes=true")
    ap.add_argument("overrides", nargs="*", help="TrainConfig overrides for the policy's prompt, e.g. agent.history=0")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fam = family(args.env)
    cfg = apply_overrides(env_train_config(args.env), args.overrides)
    dream = [f"em={args.em}"] + ([f"em_data={args.data}"] if args.data else [])
    with tempfile.TemporaryDirectory() as tmp:  # the synthetic transitions' buffer copy is thrown away
        em_overrides = ([f"temperature={args.em_temperature}"] if args.em_temperature is not None else []) \
            + list(args.em_override)
        dcfg = load_config(DreamConfig, None, dream + [f"reward_from={args.reward_from}",
                                                       f"em_overrides={em_overrides}"])
        world = DreamWorld(args.env, dcfg, Path(tmp), args.seed)
        backend = build_backend(cfg, args.policy)
        tasks = played_tasks(args.tasks_from) if args.tasks_from else list(fam.tasks("train"))
        tasks = (tasks[:args.tasks] if args.tasks else tasks) * args.repeats
        limit = fam.step_limit(args.max_steps or cfg.rollout.max_episode_steps)
        rollout = dataclasses.replace(cfg.rollout, max_episode_steps=limit)
        episodes = run_rollouts(backend, world.envs(""), tasks, config=rollout, agent=cfg.agent, seed=args.seed)
    # Seed 0 (`audit.REPLAY_SEED`): the synthetic env starts every episode from the real env's seed-0 reset
    # (ALFWorld draws its search order from the reset seed, so any other seed would differ in every state's
    # "Unexplored" line).
    replays = [audit.replay(ep, lambda: fam.make_env("train"), i) for i, ep in enumerate(episodes)]
    outcomes: collections.Counter = collections.Counter()
    agree = steps = divergent = noops_real = 0
    wrong_lines: collections.Counter = collections.Counter()  # which line of the state the dream got wrong
    f1s: list[float] = []
    for rep in replays:
        wrong = False
        for step in (s for s in rep.steps if s.replayed):
            noops_real += step.real_noop
            same = step.real_next_state.strip() == step.dream_next_state.strip()
            if not same:
                wrong_lines.update(_differing_keys(step.dream_next_state, step.real_next_state))
            f1s.append(token_f1(step.dream_next_state, step.real_next_state))
            agree, steps, wrong = agree + same, steps + 1, wrong or not same
        divergent += wrong
        real = "not replayed" if rep.error else "real win" if rep.real_won else "real loss"
        outcomes[("dream win" if rep.dream_won else "dream loss", real)] += 1
    n = len(episodes)
    consistent = _self_consistent_wins(fam, episodes)
    failed = collections.Counter(e.end_reason for e in episodes if not e.trainable)
    print(f"{n} episodes; dream success {sum(e.won for e in episodes) / n:.3f}; environment failures "
          f"{sum(failed.values())} {dict(failed) if failed else ''}")
    # All four cells, zeros included, so an absent line cannot be misread (a Counter returns 0 for a missing key).
    for d in ("dream loss", "dream win"):
        for r in ("real loss", "real win"):
            print(f"  {d:10s} / {r:9s}: {outcomes[(d, r)]}")
    unreplayed = sum(v for (_, r), v in outcomes.items() if r == "not replayed")
    if unreplayed:
        print(f"  not replayed (the real environment failed): {unreplayed}; "
              f"{next(r.error for r in replays if r.error)}")
    figures = audit.summarize(r.to_row() for r in replays)
    print(f"outcome agreement {figures.get('agreement', 0):.3f}; false-success rate (of the dreamt wins) "
          f"{figures.get('false_success_rate', 0):.3f}")
    claimed = sum(bool(e.model_claimed_wins) for e in episodes)
    if args.reward_from != "model":
        print(f"episodes where the model credited a win: {claimed}; overruled by the state: "
              f"{sum(bool(e.model_claimed_wins) and not e.won for e in episodes)}")
    if consistent is not None:
        print(f"dream wins that the family's reward rule grants on the dream's own last step: "
              f"{consistent[0]} of {consistent[1]}")
    print(f"steps that did nothing: dream {rollout_metrics(episodes)['noop_step_rate']:.3f}, the same actions "
          f"replayed in the real environment {noops_real / max(steps, 1):.3f} of {steps}")
    print(f"next-state agreement per step {agree / max(steps, 1):.3f} (token F1 {sum(f1s) / max(len(f1s), 1):.3f}); "
          f"episodes with a wrong state {divergent / n:.3f}")
    if wrong_lines:
        print("lines that differ, on the steps that disagree: " +
              ", ".join(f"{k} {c}" for k, c in wrong_lines.most_common(8)))


def _differing_keys(dream: str, real: str) -> set[str]:
    """The names of the lines two state texts disagree on: the text before a line's first ":" (ALFWorld's
    "Known contents", ...) or its "[kind]" (WebShop), for every line that only one of the two has."""
    a, b = collections.Counter(dream.splitlines()), collections.Counter(real.splitlines())
    keys = set()
    for line in (a - b) + (b - a):
        line = line.strip()
        keys.add(line.split("]", 1)[0] + "]" if line.startswith("[") else line.split(":", 1)[0][:40])
    return keys


def _self_consistent_wins(fam, episodes: list) -> tuple[int, int] | None:
    """A dream may be right to credit a win that fails on replay (ALFWorld hides where objects are, so the dream
    can put the target elsewhere than the real game did). What it must not do is credit one its own states
    contradict: (credited wins that the family's reward rule, `grounded_outcome`, also grants on the dream's last
    step, credited wins), or None for a family without a rule."""
    if not fam.hooks.grounds_outcomes:
        return None
    rule = fam.hooks.grounded_outcome
    wins = [e for e in episodes if e.won]
    ok = 0
    for e in wins:
        last = [t for t in e.turns if t.stepped]
        outcome = rule(e.task, last[-1].state, last[-1].action or "", last[-1].next_state) if last else None
        ok += outcome is not None and outcome[1] and outcome[0] >= 1.0
    return ok, len(wins)


if __name__ == "__main__":
    main()
