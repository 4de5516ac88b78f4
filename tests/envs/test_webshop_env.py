"""WebShopEnv: the TextEnv contract in every observation mode, the page flow, and bad input."""

import random

import gymnasium
import pytest

import dreamgym.envs  # noqa: F401 - registers the environments
from dreamgym.env import EPISODE_OVER_NOTICE, check_env
from dreamgym.envs import webshop as ws
from dreamgym.envs.webshop.pages import html_to_abstract, html_to_text


@pytest.fixture(scope="module")
def env():
    e = ws.make_env("train")
    yield e
    e.close()


@pytest.mark.parametrize("mode", ["text", "html", "abstract"])
def test_check_env_all_modes(mode):
    check_env(ws.make_env("train", obs_mode=mode))
    check_env(ws.make_env("test", obs_mode=mode), seed=3)


def test_registered_with_gymnasium():
    e = gymnasium.make("dreamgym/WebShop-v0", obs_mode="abstract")
    obs, info = e.reset(seed=1)
    assert obs == info["abstract_state"] == "[page] search\n[searchbox] search"
    assert info["admissible_actions"] == ["search[<query>]"]


def _oracle_episode(env, task):
    pol = ws.POLICIES["oracle"](0)
    obs, info = env.reset(options={"task": task})
    pol.reset(task, obs, info)
    trace = [(None, obs, info)]
    while True:
        a = pol.act(obs, info)
        obs, r, term, trunc, info = env.step(a)
        trace.append((a, obs, info))
        if term or trunc:
            return trace, r, term, trunc


def test_page_flow_and_purchase(env):
    task = ws.tasks("train")[7]
    trace, r, term, trunc = _oracle_episode(env, task)
    pages = [info["page"] for _, _, info in trace]
    assert pages[0] == "search" and pages[1] == "results" and "item" in pages and pages[-1] == "done"
    last = trace[-1][2]
    assert term and not trunc and r == 1.0 and last["won"]
    assert (last["r_type"], last["r_attr"], last["r_option"], last["r_price"]) == (1.0, 1.0, 1.0, 1.0)
    assert last["admissible_actions"] == []
    # every action the oracle took was offered by the page it was on
    for (a, _, _), (_, _, before) in zip(trace[1:], trace[:-1]):
        assert a in before["admissible_actions"] or a.startswith("search[")


def test_observations_are_the_published_mappings_of_the_html():
    rng = random.Random(0)
    for mode in ("text", "html", "abstract"):
        e = ws.make_env("train", obs_mode=mode)
        for ep in range(6):
            obs, info = e.reset(seed=ep)
            for _ in range(12):
                html = info["raw_obs"]
                assert info["abstract_state"] == html_to_abstract(html)
                assert info["admissible_actions"] == ws.admissible_from_state(info["abstract_state"])
                assert obs == {"text": html_to_text(html), "html": html, "abstract": info["abstract_state"]}[mode]
                acts = info["admissible_actions"]
                if not acts:
                    break
                a = rng.choice(acts)
                if a == "search[<query>]":
                    a = f"search[{' '.join(info['task'].instruction.split()[:5])}]"
                obs, r, term, trunc, info = e.step(a)
                assert info["valid_action"], (a, info["notice"])  # every admissible action is accepted
                if term or trunc:
                    break


def test_text_mode_looks_like_webshop_simple_mode(env):
    obs, info = env.reset(seed=5)
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] ") and obs.endswith(" [SEP] Search")
    obs, *_ = env.step("search[machine wash shirt]")
    assert " [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B0" in obs


def test_results_are_paginated_ten_per_page_up_to_fifty(env):
    env.reset(seed=2)
    _, _, _, _, info = env.step("search[machine wash shirt]")
    seen = []
    for page in range(1, 6):
        parsed = ws.parse_abstract(info["abstract_state"])
        assert parsed["page_no"] == page and len(parsed["links"]) == 10 and parsed["total"] == 50
        seen += [link["asin"] for link in parsed["links"]]
        if page < 5:
            _, _, _, _, info = env.step("click[Next >]")
    assert "Next >" not in ws.parse_abstract(info["abstract_state"])["buttons"] and len(set(seen)) == 50
    _, _, _, _, info = env.step("click[< Prev]")
    assert ws.parse_abstract(info["abstract_state"])["page_no"] == 4


def test_actions_are_case_and_whitespace_tolerant(env):
    env.reset(seed=4)
    _, _, _, _, info = env.step("  SEARCH [ men's   t-shirt ]  ")
    assert info["page"] == "results"
    asin = ws.parse_abstract(info["abstract_state"])["links"][0]["asin"]
    _, _, _, _, info = env.step(f"click[  {asin.lower()} ]")
    assert info["page"] == "item" and info["asin"] == asin
    opt = ws.parse_abstract(info["abstract_state"])["options"][0]
    _, _, _, _, info = env.step(f"Click[{opt['name'].upper()}:   {opt['value'].upper()}]")
    assert info["selected_options"] == {opt["name"]: opt["value"]}
    assert f"[option] {opt['name']}: {opt['value']} (selected)" in info["abstract_state"]
    _, _, _, _, info = env.step("click[description]")
    assert info["page"] == "description"
    _, _, _, _, info = env.step("click[< prev]")
    assert info["page"] == "item" and info["selected_options"] == {opt["name"]: opt["value"]}
    _, _, _, _, info = env.step("click[back to search]")
    assert info["page"] == "search" and info["selected_options"] == {}


def _without_notice(state):
    return "\n".join(line for line in state.splitlines() if not line.startswith("[notice]"))


@pytest.mark.parametrize("action", ["", "click[", "search[abc", "click[foo]]", "]]][[[", "buy now", "click[]",
                                    "click[Nonexistent Button]", "search[]", "search[   ]", "click[Buy Now]",
                                    "ünïcødé ☃", "click[B0XXXXXXXX]", None, 12345])
def test_invalid_actions_keep_the_page_and_add_a_notice(env, action):
    env.reset(seed=8)
    _, _, _, _, before = env.step("search[protein bars]")
    obs, r, term, trunc, info = env.step(action)
    assert r == 0.0 and not term and not trunc and not info["valid_action"]
    assert info["notice"] and f"[notice] {info['notice']}"[:60] in info["abstract_state"]
    assert _without_notice(info["abstract_state"]) == before["abstract_state"]
    # the next valid action works and clears the notice
    _, _, _, _, info = env.step("click[Next >]")
    assert info["valid_action"] and "[notice]" not in info["abstract_state"]


def test_search_only_on_the_search_page(env):
    env.reset(seed=9)
    env.step("search[coffee]")
    _, _, _, _, info = env.step("search[tea]")
    assert info["page"] == "results" and "Back to Search" in info["notice"]


@pytest.mark.parametrize("query", ["x" * 10_000, "shirt " * 2000, "☃ ünïcødé 日本語 🛒", "[[[]]]", "<script>alert(1)</script>",
                                   "&amp; &lt;b&gt;", "shirt\x00\x01\t\nmachine wash"])
def test_odd_queries_are_answered_with_a_results_page(env, query):
    env.reset(seed=10)
    obs, r, term, trunc, info = env.step(f"search[{query}]")
    assert info["page"] == "results" and r == 0.0 and not term
    parsed = ws.parse_abstract(info["abstract_state"])
    assert parsed["total"] <= 50 and len(info["abstract_state"]) < 2000
    assert "<script>" not in info["raw_obs"].split("</head>")[1].replace("&lt;script&gt;", "")  # escaped
    _, _, _, _, info = env.step("click[Back to Search]")
    assert info["page"] == "search"


def test_control_characters_only_is_an_empty_query(env):
    env.reset(seed=10)
    _, _, _, _, info = env.step("search[\x00\x01\t\n]")
    assert info["page"] == "search" and "Empty search query" in info["notice"]


def test_no_results_page_offers_only_back_to_search(env):
    env.reset(seed=11)
    _, _, _, _, info = env.step("search[qwxzv]")
    assert info["admissible_actions"] == ["click[Back to Search]"]
    assert '(0 total)' in info["abstract_state"]


def test_step_limit_truncates_and_steps_after_the_end_are_refused():
    e = ws.make_env("train", max_steps=15)
    obs, info = e.reset(seed=1)
    for i in range(15):
        obs, r, term, trunc, info = e.step("click[nothing]")
        assert trunc == (i == 14) and not term
    obs2, r, term, trunc, info2 = e.step("search[shirt]")
    assert trunc and r == 0.0 and info2["episode_over"] and EPISODE_OVER_NOTICE in obs2
    # after a purchase too
    task = ws.tasks("train")[0]
    trace, r, term, trunc = _oracle_episode(e, task)
    assert term
    obs3, r3, term3, _, info3 = e.step("click[Buy Now]")
    assert r3 == 0.0 and term3 and info3["episode_over"]
    obs, info = e.reset(seed=2)
    assert info["page"] == "search"


def test_reset_is_seeded_and_task_option_is_used():
    e = ws.make_env("test")
    a = e.reset(seed=42)[1]["task"].id
    b = e.reset(seed=42)[1]["task"].id
    assert a == b
    task = ws.tasks("test")[3]
    obs, info = e.reset(options={"task": task})
    assert info["task"].id == task.id and task.instruction in obs


def test_abstract_results_page_is_compact(env):
    env.reset(seed=3)
    _, _, _, _, info = env.step("search[long lasting lipstick]")
    state = info["abstract_state"]
    assert len(state.splitlines()) == 13 and len(state) < 700
    assert len(info["raw_obs"]) > 3 * len(state)
