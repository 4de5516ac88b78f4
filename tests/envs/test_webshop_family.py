"""The WebShop family surface: admissible_from_state, explain, corpus_text."""

import re

from dreamgym.envs import family
from dreamgym.envs import webshop as ws
from dreamgym.types import Trajectory, Step


def test_family_surface():
    fam = family("webshop")
    for name in ("make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain"):
        assert hasattr(fam, name), name
    assert "corpus_text" in fam.hooks.defined
    assert {"oracle", "noisy", "random"} <= set(fam.POLICIES)


def test_admissible_from_state_reads_every_element_kind():
    state = "\n".join([
        "[page] item B0ABCDEFGH",
        "[notice] 'x' is not clickable on this page.",
        "[button] Back to Search", "[button] < Prev",
        "[option] size: large", "[option] color: navy (selected)",
        "[text] Some Title", "[text] Price: $10.00",
        "[button] Description", "[button] Buy Now",
        "garbage line without a tag",
    ])
    assert ws.admissible_from_state(state) == ["click[Back to Search]", "click[< Prev]", "click[large]",
                                               "click[navy]", "click[Description]", "click[Buy Now]"]
    assert ws.admissible_from_state("[page] search\n[searchbox] search") == ["search[<query>]"]
    results = '[page] results for "x", page 1 of 1 (1 total)\n[button] Back to Search\n[link] B01 | T… | $1.00'
    assert ws.admissible_from_state(results) == ["click[Back to Search]", "click[B01]"]
    assert ws.admissible_from_state("") == [] and ws.admissible_from_state("[page] done\n[text] Thanks") == []


def _episode(policy, task, seed=0):
    env = ws.make_env("train", obs_mode="abstract")
    pol = ws.POLICIES[policy](seed)
    obs, info = env.reset(options={"task": task})
    pol.reset(task, obs, info)
    steps = []
    for _ in range(15):
        a = pol.act(obs, info)
        nobs, r, term, trunc, info = env.step(a)
        steps.append(Step(state=obs, action=a, reward=r, terminated=term, truncated=trunc, next_state=nobs))
        obs = nobs
        if term or trunc:
            break
    return Trajectory(task=task, steps=steps)


def _sentences(text):
    return len([s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s])


def test_explain_is_grounded_and_short():
    task = ws.tasks("train")[3]
    traj = _episode("oracle", task)
    traces = [ws.explain(tr) for tr in traj.transitions()]
    assert all(t and _sentences(t) <= 3 for t in traces)
    q = traj.steps[0].action[len("search["):-1]
    assert traces[0].startswith(f'Searching for "{q[:40]}') and "reward is 0" in traces[0]
    assert task.goal["asin"] in traces[1] or "opens its item page" in traces[1]
    assert "score is" in traces[-1] and "won" in traces[-1] and "= 1" in traces[-1]
    # an invalid action is explained as such
    tr = traj.transitions()[1]
    env = ws.make_env("train", obs_mode="abstract")
    obs, info = env.reset(options={"task": task})
    nobs, *_ = env.step("click[Nope]")
    tr.state, tr.action, tr.next_state, tr.reward = obs, "click[Nope]", nobs, 0.0
    assert "cannot be carried out" in ws.explain(tr)


def test_explain_partial_purchase_and_truncation():
    task = ws.tasks("train")[5]
    env = ws.make_env("train", obs_mode="abstract", max_steps=3)
    obs, info = env.reset(options={"task": task})
    o1, *_ = env.step("search[" + task.goal["product_type"] + "]")
    link = ws.parse_abstract(o1)["links"][0]["asin"]
    o2, *_ = env.step(f"click[{link}]")
    o3, r, term, trunc, info = env.step("click[Buy Now]")
    traj = Trajectory(task=task, steps=[
        Step(obs, "search[x]", 0.0, False, False, o1), Step(o1, f"click[{link}]", 0.0, False, False, o2),
        Step(o2, "click[Buy Now]", r, term, trunc, o3)])
    last = ws.explain(traj.transitions()[-1])
    assert "options 0/" in last and f"reward is {r:g}" in last
    env2 = ws.make_env("train", obs_mode="abstract", max_steps=1)
    s0, _ = env2.reset(options={"task": task})
    s1, r, term, trunc, _ = env2.step("search[shoes]")
    traj2 = Trajectory(task=task, steps=[Step(s0, "search[shoes]", r, term, trunc, s1)])
    assert trunc and "step limit" in ws.explain(traj2.transitions()[0])


def test_corpus_text_is_deterministic_and_representative():
    a = ws.corpus_text()
    b = ws.corpus_text()
    assert a == b and len(a) > 2000
    joined = "\n".join(a)
    for marker in ("[page] results for", "[link] B0", "[option] ", "search[", "click[Buy Now]", "[SEP]", "reward"):
        assert marker in joined, marker
    test_instructions = {t.instruction for t in ws.tasks("test")}
    assert not test_instructions & set(a)


def test_grounded_outcome_reproduces_the_real_reward_from_abstract_states():
    """The family's reward rule on abstract states (what a dream's reward is grounded in) gives every real
    step's reward and end, purchases of every quality included; a product the catalog lacks buys nothing and
    an option the product does not offer is not credited."""
    purchases, rewards = 0, set()
    for split in ("train", "test"):
        env = ws.make_env(split)
        for policy in ("oracle", "noisy", "random"):
            for i in range(8):
                task = env.tasks[i * 11]
                pol = ws.POLICIES[policy](i)
                obs, info = env.reset(options={"task": task})
                pol.reset(task, obs, info)
                before = info["abstract_state"]
                for _ in range(15):
                    action = pol.act(obs, info)
                    obs, r, term, trunc, info = env.step(action)
                    assert ws.grounded_outcome(task, before, action, info["abstract_state"]) == (r, term)
                    purchases, before = purchases + term, info["abstract_state"]
                    if term:
                        rewards.add(round(r, 3))
                    if term or trunc:
                        break
    assert purchases >= 20 and len(rewards) >= 4
    task = ws.tasks("train")[3]
    won = _episode("oracle", task).steps[-1]
    assert won.reward == 1.0 and won.action.lower() == "click[buy now]"
    assert ws.grounded_outcome(task, won.state, won.action, "") == (1.0, True)
    made_up = re.sub(r"\[page\] item \S+", "[page] item B0NOTREAL0", won.state)
    assert ws.grounded_outcome(task, made_up, won.action, "") == (0.0, True)
    goal_option = next(iter(task.goal["goal_options"].items()))
    unselected = won.state.replace(f"{goal_option[0]}: {goal_option[1]} (selected)", f"{goal_option[0]}: {goal_option[1]}")
    partial = ws.grounded_outcome(task, unselected, won.action, "")[0]
    invented = ws.grounded_outcome(task, unselected + f"\n[option] {goal_option[0]}: polka dots (selected)", won.action, "")
    assert partial < 1.0 and invented == (partial, True)
    assert ws.grounded_outcome(task, won.state, "click[Description]", "") == (0.0, False)
