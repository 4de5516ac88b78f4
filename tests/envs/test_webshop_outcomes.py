"""WebShop's outcome hooks against the real environment: a hidden-outcome key always names one next page, a
determined outcome is the page the environment draws, and the experience model uses both without a call."""

from __future__ import annotations

import collections

import pytest

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.envs import webshop as ws
from dreamgym.envs.webshop import outcomes as O
from dreamgym.experience import ExperienceModel, ExperienceModelConfig
from dreamgym.experience.format import format_completion
from dreamgym.llm.fake import FakeLLM
from dreamgym.types import Transition

PLAYS = (("oracle", 0), ("noisy", 0), ("noisy", 5), ("shopper", 0), ("random", 0), ("random", 3))


@pytest.fixture(scope="module")
def steps():
    """Every real step of the plays above on 12 training tasks: (task, state, action, next state)."""
    env = ws.make_env("train", obs_mode="abstract")
    out = []
    for i, task in enumerate(env.tasks[:12]):
        for policy, offset in PLAYS:
            pol = ws.POLICIES[policy](i + offset)
            obs, info = env.reset(options={"task": task})
            pol.reset(task, obs, info)
            for _ in range(env.max_steps):
                state, action = info["abstract_state"], pol.act(obs, info)
                obs, _, term, trunc, info = env.step(action)
                out.append((task, state, action, info["abstract_state"]))
                if term or trunc:
                    break
    env.close()
    return out


def test_a_key_names_one_next_page_across_episodes_and_tasks(steps):
    pages: dict[str, set[str]] = collections.defaultdict(set)
    reached: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    for task, state, action, after in steps:
        key = O.hidden_outcome_key(task, state, action)
        if key is not None:
            pages[key].add(after)
            reached[key] += 1
            kinds[key.split("|")[1]] += 1
    assert all(len(p) == 1 for p in pages.values()), [k for k, p in pages.items() if len(p) > 1][:3]
    shared = sum(n > 1 for n in reached.values())
    print(f"{len(steps)} steps, {sum(reached.values())} keyed, {len(pages)} keys, {shared} reached more than once, "
          f"kinds {dict(kinds)}")
    assert {"search", "item", "Next >"} <= set(kinds) and shared >= 20
    assert any(k in kinds for k in ("description", "features", "reviews"))
    # Keys name the catalog, not the task: two tasks' searches of the same words share one.
    a, b = ws.tasks("train")[:2]
    assert O.hidden_outcome_key(a, O.SEARCH_PAGE, "search[red  shoes]") == \
        O.hidden_outcome_key(b, O.SEARCH_PAGE, "Search[red shoes]") == "synthetic|search|red shoes"


def test_a_determined_outcome_is_the_page_the_environment_draws(steps):
    counts: collections.Counter = collections.Counter()
    for task, state, action, after in steps:
        said = O.determined_outcome(task, state, action)
        if said is not None:
            assert said == after, (state, action, said, after)
            assert O.hidden_outcome_key(task, state, action) is None  # the two never answer the same step
            counts["back" if said == O.SEARCH_PAGE else "option"] += 1
    print(dict(counts))
    assert counts["back"] >= 5 and counts["option"] >= 20, counts


def test_steps_the_page_does_not_fix_are_left_to_the_model(steps):
    left = collections.Counter()
    for task, state, action, _after in steps:
        if O.hidden_outcome_key(task, state, action) is None and O.determined_outcome(task, state, action) is None:
            page = ws.parse_abstract(state)["page"]
            left[f"{page}:{action if action in ('click[< Prev]', 'click[Buy Now]') else 'other'}"] += 1
    print(dict(left))
    # < Prev from an item page returns to a results page the item page does not name.
    assert left["item:click[< Prev]"] >= 1 and left["item:click[Buy Now]"] >= 1


def test_the_experience_model_copies_and_derives_webshop_pages_without_a_call(steps):
    task, state, action, after = next(s for s in steps if s[2].startswith("search["))
    item = next(s for s in steps if ws.parse_abstract(s[1])["page"] == "item"
                and O.determined_outcome(s[0], s[1], s[2]) is not None)
    buf = ReplayBuffer(None, HashingEmbedder())
    buf.add([Transition(task=task, history=[], state=state, action=action, next_state=after, reward=0.0,
                        done=False, source="real", trajectory_id="real-0")])
    llm = FakeLLM([format_completion(O.SEARCH_PAGE, 0.0, False, "a guess")])
    cfg = ExperienceModelConfig(use_retrieval=False, copy_hidden_outcomes=True, derive_determined_outcomes=True)
    model = ExperienceModel(llm, buffer=buf, config=cfg, env="webshop")
    other = ws.tasks("train")[20]  # another task, the same catalog: the same results page
    q = [Transition(task=other, history=[], state=state, action=action, next_state="", reward=0.0, done=False),
         Transition(task=item[0], history=[], state=item[1], action=item[2], next_state="", reward=0.0, done=False)]
    copied, derived = model.predict(q)
    assert copied.next_state == after and derived.next_state == item[3] and llm.calls == []
    assert model.stats["hidden_copied"] == 1 and model.stats["determined"] == 1


def test_a_refused_action_gets_the_page_the_shop_shows():
    # The shop answers an action a page does not offer with the same page and a notice (scripted policies never
    # try one, so every other step here is a bad action); the synthetic shop rebuilds that page from the state.
    bad = ("click[Buy Now]", "search[blue]", "hello", "click[nothing here]", "search[   ]", "click[< Prev]")
    env = ws.make_env("train", obs_mode="abstract")
    refused = passed = 0
    for i, task in enumerate(env.tasks[:6]):
        pol = ws.POLICIES["random"](i)
        obs, info = env.reset(options={"task": task})
        pol.reset(task, obs, info)
        for t in range(16):
            state = info["abstract_state"]
            action = bad[(i + t) % len(bad)] if t % 2 else pol.act(obs, info)
            obs, _, term, trunc, info = env.step(action)
            if info["invalid_action"]:
                refused += 1
                assert O.noop_state(state, action) == info["abstract_state"], (state, action)
            else:
                passed += 1
                assert "[notice]" not in info["abstract_state"]
            if term or trunc:
                break
    env.close()
    assert refused >= 20 and passed >= 10
