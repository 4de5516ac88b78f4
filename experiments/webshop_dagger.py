"""One round of DAgger on WebShop: the policy's own pages, labelled with its SFT teacher's action.

`experiments/webshop_outcomes.py` found that a third of the SFT start's test episodes are stuck on pages its
demonstrations never show (an option the product does not offer, answered "not clickable"; a page reached by a
wrong click), and that its teacher, the `shopper` policy, decides from the instruction and the page alone, so it
has an answer on any page. This plays the policy greedily on train goals, keeps every distinct page it reached,
and writes one trajectory per episode whose steps are (page, the shopper's action there), for SFT with
`sft.only_won=false` beside the teacher's own winning demonstrations (Ross et al., 2011: the data-aggregation step
of DAgger, one round). Provenance: `source="real"`, `policy="shopper-relabel"`, `won=False` (the steps are labels,
not an episode anyone played).

    python experiments/webshop_dagger.py --policy runs/ws-sft20/final --tasks 1000 --out runs/ws/dagger1.jsonl \
        agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 \
        rollout.max_episode_steps=15
"""

from __future__ import annotations

import argparse

from webshop_outcomes import teacher_pages, webshop_policy  # run as a script, so experiments/ is on sys.path

from dreamgym.data import write_jsonl
from dreamgym.envs.webshop.pages import norm_label
from dreamgym.envs.webshop.policies import ShopperPolicy
from dreamgym.rl.rollout import run_rollouts
from dreamgym.types import Step, Trajectory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="policy checkpoint or model directory")
    ap.add_argument("--tasks", type=int, default=1000, help="the first N train goals")
    ap.add_argument("--skip-tasks", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSONL of relabelled trajectories")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="TrainConfig overrides for the policy's prompt and rollout")
    args = ap.parse_args()
    fam, cfg, backend = webshop_policy(args.policy, args.overrides, args.threads)
    tasks = fam.tasks("train")[args.skip_tasks: args.skip_tasks + args.tasks]
    episodes = run_rollouts(backend, lambda: fam.make_env("train"), tasks, config=cfg.rollout, agent=cfg.agent,
                            seed=0, policy_version="dagger-1")
    teacher = ShopperPolicy()
    out, pages, disagree = [], 0, 0
    for ep in episodes:
        steps = []
        for t, label in teacher_pages(ep, teacher):  # a loop's repeated page adds nothing its first visit did not
            disagree += norm_label(label) != norm_label(t.action or "")
            steps.append(Step(state=t.state, action=label, reward=0.0, terminated=False, truncated=False,
                              info={"policy_action": t.action}))
        if steps:
            pages += len(steps)
            out.append(Trajectory(task=ep.task, steps=steps, source="real", seed=ep.seed, policy="shopper-relabel",
                                  policy_version="dagger-1", initial_state=ep.initial_state, won=False))
    n = write_jsonl(args.out, out)
    print(f"{n} trajectories, {pages} distinct pages, the policy's action differed from the teacher's on "
          f"{disagree}; policy won {sum(e.won for e in episodes)} of {len(episodes)}")


if __name__ == "__main__":
    main()
