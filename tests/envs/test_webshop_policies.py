"""WebShop scripted policies measured on the 500 held-out test goals."""

from dreamgym.envs import webshop as ws


def _success(name, tasks, env):
    wins, steps = 0, []
    for i, task in enumerate(tasks):
        pol = ws.POLICIES[name](i)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        for n in range(1, 100):  # noqa: B007 - the step count is read after the loop
            obs, r, term, trunc, info = env.step(pol.act(obs, info))
            if term or trunc:
                break
        wins += info["won"]
        steps.append(n)
    return wins / len(tasks), steps


def test_oracle_and_random_on_the_500_test_goals():
    env = ws.make_env("test")
    tasks = ws.tasks("test")
    assert len(tasks) == 500
    oracle, steps = _success("oracle", tasks, env)
    assert oracle >= 0.95 and max(steps) <= 15
    rand, _ = _success("random", tasks, env)
    assert rand <= 0.05


def test_noisy_policy_is_imperfect_and_human_like():
    env = ws.make_env("test")
    rate, steps = _success("noisy", ws.tasks("test")[:150], env)
    assert 0.3 <= rate <= 0.9
    assert sum(steps) / len(steps) > 6  # detours: more steps than the oracle's ~4-6


def test_policies_are_seeded():
    env = ws.make_env("train")
    task = ws.tasks("train")[11]

    def run(seed):
        pol = ws.POLICIES["noisy"](seed)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        acts = []
        for _ in range(15):
            a = pol.act(obs, info)
            acts.append(a)
            obs, r, term, trunc, info = env.step(a)
            if term or trunc:
                break
        return acts

    assert run(5) == run(5)


def test_shopper_acts_only_on_what_the_pages_show():
    from dreamgym.envs.webshop.pages import parse_abstract

    env = ws.make_env("test")
    tasks = ws.tasks("test")[:120]
    rate, steps = _success("shopper", tasks, env)
    # Imperfect (it cannot read attributes off the results page) but far above random, and short.
    assert 0.3 <= rate <= 0.8 and max(steps) <= 15
    # Its product click is the first listed product within the instruction's price bound, so a policy reading
    # the same page can learn it exactly; the same task gives the same episode (no hidden state, no RNG).
    for task in tasks[:20]:
        goal = ws.parse_goal(task.instruction)
        runs = []
        for seed in (0, 1):
            pol = ws.POLICIES["shopper"](seed)
            obs, info = env.reset(options={"task": task})
            pol.reset(task, obs, info)
            acts = []
            for _ in range(15):
                page = parse_abstract(info["abstract_state"])
                a = pol.act(obs, info)
                if page["page"] == "results" and a.startswith("click[B"):
                    bound = goal.get("price_upper") or float("inf")
                    first = next(x["asin"] for x in page["links"]
                                 if float(x["price"].strip("$").replace(",", "")) <= bound)
                    assert a == f"click[{first}]"
                acts.append(a)
                obs, r, term, trunc, info = env.step(a)
                if term or trunc:
                    break
            runs.append(acts)
        assert runs[0] == runs[1]
