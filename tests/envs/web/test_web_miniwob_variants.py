"""MiniWoB++'s page-grounded task variants (`task_variants`, `show_goal`): each asks the page for something it
shows, the family's reward rule judges it by the goal it shows, and the oracle solves it on the page as it stands."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("browsergym")  # the reward rule parses actions with BrowserGym's own parser

from dreamgym.data import load_trajectories  # noqa: E402
from dreamgym.envs import family  # noqa: E402
from dreamgym.envs.web.browser import BrowserPool, chromium_available  # noqa: E402
from dreamgym.envs.web.axtree import parse_state  # noqa: E402
from dreamgym.envs.web.miniwob import grounded_episode  # noqa: E402
from dreamgym.envs.web.miniwob_policies import OraclePolicy  # noqa: E402
from dreamgym.envs.web.miniwob_variants import WRITERS, with_goal  # noqa: E402
from dreamgym.types import Task  # noqa: E402

EPISODES = Path(__file__).resolve().parents[2] / "fixtures" / "web" / "miniwob_episodes.jsonl"
MINIWOB = family("miniwob")
# Real initial pages (train seeds, Chromium 150) of tasks the recorded episodes lack.
PAGES = {
    ("click-link", 2, 'Click on the link "Vel".'): """[goal] Click on the link "Vel".
[page] Click Link Task
StaticText 'Nisl tortor orci lectus gravida quis nec.'
[13] generic, clickable
  StaticText 'Egestas'
StaticText 'ultrices tellus blandit'
[14] generic, clickable
  StaticText 'posuere.'
[16] generic, clickable
  StaticText 'Vel'""",
    ("click-dialog-2", 0, 'Click the button in the dialog box labeled "x".'): """[goal] Click the button in the dialog box labeled "x".
[page] Click Dialog Task
[32] dialog '', clickable, modal=False, describedby='dialog'
  [33] generic, clickable
    [35] button 'Close', clickable
  [39] paragraph ''
    StaticText 'Felis mi integer ornare.'
  [42] button 'Cancel', clickable, focused
  [43] button 'OK', clickable""",
    ("click-button", 4, 'Click on the "Okay" button.'): """[goal] Click on the "Okay" button.
[page] Click Button Task
StaticText 'ipsum interdum vestibulum'
[13] button 'No', clickable
[15] textbox '', clickable
StaticText 'aenean arcu eget'
[18] button 'Okay', clickable
StaticText 'morbi quis ullamcorper'""",
    ("focus-text-2", 0, "Focus into the 3rd input textbox."): """[goal] Focus into the 3rd input textbox.
[page] Focus Text Task
[12] textbox '', clickable
[13] textbox '', clickable
[14] textbox '', clickable""",
}


def _starts() -> list[tuple[Task, str]]:
    out = [(t.task, t.initial_state) for t in load_trajectories(EPISODES)]
    out += [(Task(id=f"miniwob-{sub}-{seed}", env="miniwob", instruction=goal,
                  goal={"subdomain": sub, "seed": seed}, split="train"), state)
            for (sub, seed, goal), state in PAGES.items()]
    return out


def _variant(parent: Task, instruction: str) -> Task:
    goal = dict(parent.goal)
    goal.update(MINIWOB.parse_goal(instruction) or {})
    return Task(id=f"{parent.id}~g1.0", env="miniwob", instruction=instruction, goal=goal, split="generated",
                parent_id=parent.id, iteration=1)


def _play(task: Task, start: str, actions: list[str] | None = None) -> tuple[float, bool] | None:
    """The family's verdict on an episode of `task` from `start`: the oracle's actions (or `actions`), each next
    state the page as the family grounds it, until the reward rule ends it."""
    return grounded_episode(task, start, actions)[1]


def test_every_variant_is_a_page_question_the_oracle_wins_and_the_rule_judges_by_its_goal():
    """On each recorded real page of a task with a writer, the variants name something else the page shows, the
    page shows the variant's goal, the oracle wins it, and the parent's own winning actions lose it where the
    page scores them (a click ending the episode on the parent's element)."""
    seen, lost = set(), 0
    for parent, start in _starts():
        sub = parent.goal["subdomain"]
        variants = MINIWOB.hooks.task_variants(parent, start, 6, random.Random(0))
        if sub not in WRITERS:
            assert variants == [], sub
            continue
        if not variants:  # a page with nothing else to ask (one button)
            assert sub == "click-button" and len(WRITERS[sub]([], parse_state(start)[2], random.Random(0))) == 1
            continue
        assert parent.instruction not in variants, sub
        assert len(set(variants)) == len(variants)
        assert _play(parent, start) == (1.0, True), sub  # the oracle wins the page's own question
        for text in variants:
            task = _variant(parent, text)
            page = MINIWOB.hooks.show_goal(task, start)
            assert parse_state(page)[0] == text and page.splitlines()[1:] == start.splitlines()[1:]
            assert _play(task, page) == (1.0, True), (sub, text)
            if sub in ("click-link", "click-button", "click-tab", "click-dialog-2", "choose-list", "click-option"):
                oracle = OraclePolicy(0)
                oracle.reset(parent, start, {"abstract_state": start})
                own = [oracle.act(start, {"abstract_state": start})]
                if sub in ("choose-list", "click-option"):  # the parent's option, then Submit
                    after = MINIWOB.hooks.ground_state(parent, start, own[0], start) or start
                    own.append(oracle.act(after, {"abstract_state": after}))
                verdict = _play(task, page, own)
                assert verdict == (0.0, True), (sub, text, own)
                lost += 1
        seen.add(sub)
    assert lost >= 10
    assert {"click-link", "click-checkboxes", "choose-list", "click-option", "click-tab", "enter-text",
            "enter-password", "login-user", "focus-text-2", "click-dialog-2", "click-button"} <= seen


def test_checkbox_variants_never_ask_the_pages_own_set_and_typed_texts_keep_its_shape():
    parent, start = next((t.task, t.initial_state) for t in load_trajectories(EPISODES)
                         if t.task.goal["subdomain"] == "click-checkboxes")
    own = MINIWOB.parse_goal(parent.instruction)["values"][0]
    for text in MINIWOB.hooks.task_variants(parent, start, 50, random.Random(1)):
        picked = MINIWOB.parse_goal(text)["values"][0]
        assert set(picked.split(", ")) != set(own.split(", "))
    parent, start = next((t.task, t.initial_state) for t in load_trajectories(EPISODES)
                         if t.task.goal["subdomain"] == "login-user")
    user, password = MINIWOB.parse_goal(parent.instruction)["values"]
    for text in MINIWOB.hooks.task_variants(parent, start, 8, random.Random(2)):
        u, p = MINIWOB.parse_goal(text)["values"]
        assert (len(u), len(p)) == (len(user), len(password)) and (u, p) != (user, password)
        assert [c.isdigit() for c in p] == [c.isdigit() for c in password]


def test_pages_without_a_writer_or_an_unread_goal_get_none():
    task = Task(id="miniwob-click-test-0", env="miniwob", instruction="Click the button.",
                goal={"subdomain": "click-test", "seed": 0}, split="train")
    start = "[goal] Click the button.\n[page] Click Test Task\n[13] button 'Click Me!', clickable"
    assert MINIWOB.hooks.task_variants(task, start, 4, random.Random(0)) == []
    odd = Task(id="x", env="miniwob", instruction="Do something else.", goal={"subdomain": "click-button"})
    assert MINIWOB.hooks.task_variants(odd, start, 4, random.Random(0)) == []
    assert with_goal("[page] P\n[1] button 'A'", "Click on the \"A\" button.").splitlines()[0] == \
        '[goal] Click on the "A" button.'


@pytest.mark.skipif(not chromium_available(), reason="no Chromium at /usr/bin/chromium (apt-get install chromium)")
def test_a_dreamt_variant_starts_on_its_parents_real_page_showing_its_goal_and_is_scored_by_it():
    """In a dream, a variant of a real click-option page starts on that page (Chromium's) with its own goal line;
    choosing the option it names and submitting wins, the parent's option loses (an experience model that only
    repeats the start page: the grounding checks the clicked radio button, the family's rule scores the form)."""
    from dreamgym.dream.synthetic_env import SyntheticEnv
    from dreamgym.experience import ExperienceModel, ExperienceModelConfig
    from dreamgym.experience.format import format_completion
    from dreamgym.llm.fake import FakeLLM
    from dreamgym.replay.buffer import ReplayBuffer
    from dreamgym.replay.embed import HashingEmbedder

    parent = next(t for t in MINIWOB.tasks("train") if t.goal["subdomain"] == "click-option")
    with BrowserPool(1) as pool:
        real = MINIWOB.make_env("train", pool=pool)
        try:
            _, info = real.reset(options={"task": parent})
        finally:
            real.close()
    start = info["abstract_state"]
    variant = _variant(parent, MINIWOB.hooks.task_variants(parent, start, 1, random.Random(0))[0])
    page = MINIWOB.hooks.show_goal(variant, start)
    radios = {e.name: e.bid for e in parse_state(start)[2] if e.role == "radio"}
    submit = next(e.bid for e in parse_state(start)[2] if e.role == "button" and e.name == "Submit")
    asked, own = (MINIWOB.parse_goal(t.instruction)["values"][0] for t in (variant, parent))

    def played(option: str) -> tuple[float, bool]:
        model = ExperienceModel(FakeLLM(lambda req: format_completion(page, 0.0, False, "Clicked.")),
                                buffer=ReplayBuffer(None, HashingEmbedder()), env="miniwob",
                                config=ExperienceModelConfig(use_retrieval=False, compact_states=False))
        env = SyntheticEnv(model, tasks=[variant], initial_state="real", reward_from="state", ground_states=True)
        try:
            _, info = env.reset(options={"task": variant})
            assert info["abstract_state"] == page
            env.step(f"click('{radios[option]}')")
            _, reward, done, _, _ = env.step(f"click('{submit}')")
        finally:
            env.close()
        return reward, done

    assert played(asked) == (1.0, True)
    assert played(own) == (0.0, True)
