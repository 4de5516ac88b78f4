"""MiniWoB++'s `ground_state`: the text a fill types, written into the experience model's answer as the page shows
it, and what that does to a dream's verdict on a form."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("browsergym")  # the reward rule parses actions with BrowserGym's own parser

from dreamgym.data import load_trajectories  # noqa: E402
from dreamgym.dream.synthetic_env import SyntheticEnv  # noqa: E402
from dreamgym.envs import family  # noqa: E402
from dreamgym.envs.web.axtree import parse_fill, with_typed_value  # noqa: E402
from dreamgym.envs.web.miniwob import ground_state  # noqa: E402
from dreamgym.experience import ExperienceModel, ExperienceModelConfig  # noqa: E402
from dreamgym.experience.format import format_completion  # noqa: E402
from dreamgym.llm.fake import FakeLLM  # noqa: E402
from dreamgym.replay.buffer import ReplayBuffer  # noqa: E402
from dreamgym.replay.embed import HashingEmbedder  # noqa: E402
from dreamgym.types import Task  # noqa: E402

EPISODES = Path(__file__).resolve().parents[2] / "fixtures" / "web" / "miniwob_episodes.jsonl"
TASK = Task(id="miniwob-enter-text-3", env="miniwob", instruction='Enter "Thaddeus" into the text field and press Submit.',
            goal={"subdomain": "enter-text", "seed": 3}, split="train")
START = """[goal] Enter "Thaddeus" into the text field and press Submit.
[page] Enter Text Task
[15] textbox '', clickable
[16] button 'Submit', clickable"""
# What a dream's experience model wrote after fill('15', 'Thaddeus') (its audit, runs/mw-fit-long-s0): a name from
# its training data in the typed text's place; the page shows value='Thaddeus' and StaticText 'Thaddeus'.
WRITTEN = """[goal] Enter "Thaddeus" into the text field and press Submit.
[page] Enter Text Task
[15] textbox '' value='C', clickable, focused
  StaticText 'Bernie'
[16] button 'Submit', clickable"""
PASSWORDS = """[goal] Enter the password "P9Gp" into both text fields and press submit.
[page] Enter Password Task
[17] textbox '' value='•••••', clickable, focused
  StaticText '•••••'
[20] textbox '', clickable
[21] button 'Submit', clickable"""


def test_the_family_defines_it_and_it_never_changes_a_recorded_real_answer():
    """On every recorded fill of real Chromium episodes the page's own next state comes back unchanged (or the
    hook leaves it to the model), and most fills are decided."""
    assert family("miniwob").hooks.grounds_states
    fills = decided = 0
    for traj in load_trajectories(EPISODES):
        for st in traj.steps:
            if parse_fill(st.action) is None:
                assert ground_state(traj.task, st.state, st.action, st.next_state) is None
                continue
            fills += 1
            got = ground_state(traj.task, st.state, st.action, st.next_state)
            if got is not None:
                decided += 1
                assert got == st.next_state, (traj.task.id, st.action)
    assert fills >= 5 and decided == fills


def test_a_wrong_typed_text_is_written_as_the_page_shows_it():
    fixed = ground_state(TASK, START, "fill('15', 'Thaddeus')", WRITTEN)
    assert fixed == WRITTEN.replace("value='C'", "value='Thaddeus'").replace("'Bernie'", "'Thaddeus'")
    # A masked field keeps its bullets, one per typed character; the other field is untouched.
    fixed = ground_state(TASK, "", "fill('17', 'P9Gp')", PASSWORDS)
    assert "[17] textbox '' value='••••', clickable, focused\n  StaticText '••••'\n[20] textbox '', clickable" in fixed
    # A field without a value yet gets one and its text line; an emptied field loses both.
    assert with_typed_value(START, "15", "it's") == START.replace(
        "[15] textbox '', clickable", "[15] textbox '' value=\"it's\", clickable\n  StaticText \"it's\"")
    assert with_typed_value(WRITTEN, "15", "") == START.replace("clickable\n[16]", "clickable, focused\n[16]")


def test_what_the_action_does_not_fix_is_left_to_the_model():
    assert ground_state(TASK, START, "click('16')", WRITTEN) is None
    assert ground_state(TASK, START, "fill('99', 'Thaddeus')", WRITTEN) is None  # no such field in the answer
    assert ground_state(TASK, START, "fill('16', 'Thaddeus')", WRITTEN) is None  # a button takes no text
    assert ground_state(TASK, START, "fill('15', 'Thaddeus')", WRITTEN + "\n[error] TimeoutError: fill") is None
    disabled = WRITTEN.replace("clickable, focused", "disabled=True")
    assert ground_state(TASK, START, "fill('15', 'Thaddeus')", disabled) is None
    assert parse_fill("fill('15', name)") is None and parse_fill("fill('15')") is None


def test_the_dream_scores_the_form_the_page_would_show():
    """An experience model that types the wrong name and credits nothing: grounded, the form the reward rule reads
    holds the typed text and Submit wins, as on the page; with `ground_states=False` the rule reads the model's
    name and the same correct episode loses, the dream's lesson that typing the goal's text fails."""
    def sim(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1] if "\nAction: " in req[-1]["content"] else ""
        if action.startswith("fill"):
            return format_completion(WRITTEN, 0.0, False, "Typed.")
        if action == "click('16')":
            return format_completion(WRITTEN.replace(", focused", ""), 0.0, True, "Submitted.")
        return format_completion(START, 0.0, False, "Start.")

    def played(ground: bool) -> tuple[float, bool, dict]:
        model = ExperienceModel(FakeLLM(sim), buffer=ReplayBuffer(None, HashingEmbedder()), env="miniwob",
                                config=ExperienceModelConfig(use_retrieval=False, compact_states=False))
        env = SyntheticEnv(model, tasks=[TASK], initial_state="model", reward_from="state", ground_states=ground)
        env.reset(seed=0)
        obs, *_ = env.step("fill('15', 'Thaddeus')")
        assert ("value='Thaddeus'" in obs) is ground
        _, reward, done, _, info = env.step("click('16')")
        return reward, done, {**info, "grounded": env.stats["states_grounded"]}

    reward, done, info = played(True)
    assert (reward, done, info["won"], info["grounded"]) == (1.0, True, True, 1)
    reward, done, info = played(False)
    assert (info["won"], info["grounded"]) == (False, 0)
