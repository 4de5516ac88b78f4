"""MiniWoB++'s `ground_state`: the text a fill types (the option a select_option chooses, the box a click checks), written into the experience model's answer as the page shows
it, and what that does to a dream's verdict on a form."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

pytest.importorskip("browsergym")  # the reward rule parses actions with BrowserGym's own parser

from dreamgym.data import load_trajectories  # noqa: E402
from dreamgym.dream.synthetic_env import SyntheticEnv  # noqa: E402
from dreamgym.envs import family  # noqa: E402
from dreamgym.envs.web.axtree import (elements, field_value, parse_fill, parse_select, with_focus,  # noqa: E402
                                      with_typed_value)
from dreamgym.envs.web.miniwob import ground_state  # noqa: E402
from dreamgym.envs.web.miniwob_outcomes import plain_click  # noqa: E402
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


def _checkbox_click(state: str, action: str) -> bool:
    bid = plain_click(action)
    return bid is not None and any(e.bid == bid and e.role in ("checkbox", "radio") for e in elements(state))


def test_the_family_defines_it_and_it_never_changes_a_recorded_real_answer():
    """On every recorded fill and checkbox or radio click of real Chromium episodes the page's own next state comes back
    unchanged, and every other action is left to the model."""
    assert family("miniwob").hooks.grounds_states
    fixed = collections.Counter()
    for traj in load_trajectories(EPISODES):
        for st in traj.steps:
            got = ground_state(traj.task, st.state, st.action, st.next_state)
            kind = "fill" if parse_fill(st.action) else "select" if parse_select(st.action) else \
                "box" if _checkbox_click(st.state, st.action) else "other"
            fixed[kind, got is not None] += 1
            assert got is None or got == st.next_state, (traj.task.id, st.action)
    assert fixed["fill", True] >= 5 and fixed["box", True] >= 2 and fixed["select", True] == 2
    assert fixed["fill", False] == fixed["box", False] == fixed["select", False] == fixed["other", True] == 0


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


BOXES = """[goal] Select nothing and click Submit.
[page] Click Checkboxes Task
LabelText ''
  [14] checkbox 'UNA', clickable, checked='false'
  StaticText 'UNA'
LabelText ''
  [16] checkbox '1b', clickable, checked='true'
  StaticText '1b'
[18] button 'Submit', clickable"""


def test_a_click_toggles_a_checkbox_and_checks_a_radio_whatever_the_model_wrote():
    task = Task(id="miniwob-click-checkboxes-1", env="miniwob", instruction="Select nothing and click Submit.",
                goal={"subdomain": "click-checkboxes", "seed": 1}, split="train")
    # The model left box 14 unchecked after its click and unchecked box 16 unasked: only the clicked box is fixed
    # (and focused: a clicked box has the focus).
    written = BOXES.replace("'1b', clickable, checked='true'", "'1b', clickable, checked='false'")
    fixed = ground_state(task, BOXES, "click('14')", written)
    assert fixed == with_focus(written.replace("'UNA', clickable, checked='false'", "'UNA', clickable, checked='true'"),
                               "14", True)
    assert ground_state(task, BOXES, "click('16')", BOXES) == with_focus(written, "16", True)
    assert ground_state(task, BOXES, "click('16')", with_focus(written, "16", True)) == with_focus(written, "16", True)
    assert ground_state(task, BOXES, "click('14', button='right')", written) is None  # no plain click
    assert ground_state(task, BOXES, "click('18')", written) is None  # a button
    assert ground_state(task, BOXES, "click('14')", written + "\n[error] TimeoutError: click") is None
    disabled = BOXES.replace("[14] checkbox 'UNA', clickable", "[14] checkbox 'UNA', disabled=True")
    assert ground_state(task, disabled, "click('14')", written) is None
    # An answer that leaves the clicked box's state out gets it, where the page prints it.
    dropped = written.replace("'UNA', clickable, checked='false'", "'UNA', clickable")
    assert ground_state(task, BOXES, "click('14')", dropped) == fixed
    # A radio button a click hits is checked, whatever it showed before.
    radios = BOXES.replace("checkbox", "radio")
    unchecked = radios.replace("checked='true'", "checked='false'")
    assert ground_state(task, radios, "click('16')", unchecked) == with_focus(radios, "16", True)
    assert ground_state(task, unchecked, "click('16')", unchecked) == with_focus(radios, "16", True)
    # ... and the page's other radio buttons are unchecked (on 231 recorded radio clicks, none was left checked).
    both = radios.replace("checked='false'", "checked='true'")
    assert ground_state(task, both, "click('16')", both) == with_focus(radios, "16", True)


def test_an_element_the_page_showed_keeps_its_role_and_name_whatever_the_action():
    """A dream's model renamed the radio button the policy had just clicked ('JAzeB8' -> 'hIU', runs/mw-wide-g-s1's
    audit; 280 of 1,785 dreamt steps renamed some element), so the rule scored a right Submit as a loss."""
    task = Task(id="miniwob-click-option-5", env="miniwob", instruction="Select JAzeB8 and click Submit.",
                goal={"subdomain": "click-option", "seed": 5}, split="train")
    page = """[goal] Select JAzeB8 and click Submit.
[page] Click Option Task
[17] LabelText '', clickable
  [18] radio 'JAzeB8', clickable, checked='true'
  StaticText 'JAzeB8'
[20] LabelText '', clickable
  [21] radio 'hGl8r', clickable, checked='false'
  StaticText 'hGl8r'
[24] button 'Submit', clickable"""
    written = page.replace("radio 'JAzeB8'", "radio 'hIU'").replace("[24] button 'Submit'", "[24] link 'Next'") + \
        "\n[42] generic, clickable\n  StaticText 'START'"
    fixed = page + "\n[42] generic, clickable\n  StaticText 'START'"
    assert ground_state(task, page, "click('24')", written) == fixed  # a new element is the model's to write
    assert ground_state(task, page, "click('24')", fixed) is None  # nothing to fix
    # The names first, then what the action fixes: the renamed radio it clicks is found and checked.
    unchecked = page.replace("checked='true'", "checked='false'")
    assert ground_state(task, unchecked, "click('18')", written.replace("checked='true'", "checked='false'")) == \
        fixed.replace("'JAzeB8', clickable,", "'JAzeB8', clickable, focused,")  # and focused


LIST = """[goal] Select Tilly from the list and click Submit.
[page] Choose List Task
[13] combobox '' value='Clara', hasPopup='menu', expanded=False
  MenuListPopup ''
    [14] option 'Clara', selected=True
    [15] option 'Reta', selected=False
    [16] option 'Tilly', selected=False
[22] button 'Submit', clickable"""


def test_a_chosen_option_is_written_as_the_page_shows_it():
    """A dream's model left the list on its old option after select_option('13', 'Tilly') (runs/mw-wide-g-s1's
    audit), so the rule scored the right Submit as a loss: the list's value and its options' flags are written."""
    task = Task(id="miniwob-choose-list-18", env="miniwob", instruction="Select Tilly from the list and click Submit.",
                goal={"subdomain": "choose-list", "seed": 18}, split="train")
    chosen = LIST.replace("value='Clara'", "value='Tilly'").replace("'Clara', selected=True", "'Clara', selected=False") \
        .replace("'Tilly', selected=False", "'Tilly', selected=True")
    assert ground_state(task, LIST, "select_option('13', 'Tilly')", LIST) == chosen
    assert ground_state(task, LIST, "select_option('13', 'Tilly')", chosen) == chosen
    # A list the answer shows without a value or flags gets them, where the page prints them.
    bare = LIST.replace(" value='Clara',", ",").replace(", selected=True", "").replace(", selected=False", "")
    assert ground_state(task, LIST, "select_option('13', 'Tilly')", bare) == bare.replace(
        "combobox '',", "combobox '' value='Tilly',").replace("'Clara'\n", "'Clara', selected=False\n").replace(
        "'Reta'", "'Reta', selected=False").replace("'Tilly'\n", "'Tilly', selected=True\n")
    assert ground_state(task, LIST, "select_option('13', 'Nobody')", LIST) is None  # the page refuses it
    assert ground_state(task, LIST, "select_option('22', 'Tilly')", LIST) is None  # a button is no list
    assert ground_state(task, LIST, "select_option('13', 'Tilly')", LIST.replace("expanded=False", "disabled=True")) is None
    assert ground_state(task, LIST, "select_option('13', ['Tilly', 'Reta'])", LIST) is None  # several: not written
    assert parse_select("select_option('13', 'Tilly')") == ("13", "Tilly")


def test_what_the_action_does_not_fix_is_left_to_the_model():
    # The field back as the page showed it (only a fill changes a field's text) and not focused (the click on Submit
    # took the focus), the rest as the model wrote it.
    cleared = START
    assert ground_state(TASK, START, "click('16')", WRITTEN) == cleared
    assert ground_state(TASK, START, "click('16')", cleared) is None
    assert ground_state(TASK, START, "fill('99', 'Thaddeus')", cleared) is None  # no such field in the answer
    assert ground_state(TASK, START, "fill('16', 'Thaddeus')", cleared) is None  # a button takes no text
    failed = WRITTEN + "\n[error] TimeoutError: fill"
    assert ground_state(TASK, START, "fill('15', 'Thaddeus')", failed) is None  # the fill failed: the model's field
    disabled = WRITTEN.replace("clickable, focused", "disabled=True")
    assert ground_state(TASK, START, "fill('15', 'Thaddeus')", disabled) is None
    assert ground_state(TASK, START, "click('16')", disabled) is None  # a disabled field is the model's to write
    assert parse_fill("fill('15', name)") is None and parse_fill("fill('15')") is None


def test_a_field_keeps_its_text_unless_a_fill_types_into_it():
    """A dream's model wrote a name from its training data into a text field a click had only focused
    ('Bernardine', runs/mw-wide-g-s0's first iteration; 337 of 3,376 dreamt steps changed a field no fill typed
    into), and into the field beside the one a fill typed into; no recorded real step does either."""
    clicked = START.replace("textbox '', clickable", "textbox '' value='Bernardine', clickable, focused\n"
                            "  StaticText 'Bernardine'")
    assert ground_state(TASK, START, "click('15')", clicked) == START.replace("textbox '', clickable",
                                                                             "textbox '', clickable, focused")
    two = PASSWORDS.replace("[20] textbox '', clickable", "[20] textbox '' value='•••', clickable\n"
                            "  StaticText '•••'")
    typed = ground_state(TASK, PASSWORDS, "fill('20', 'P9Gp')", two)
    shown = {e.bid: field_value(e) for e in elements(typed)}
    assert shown["17"] == "•••••" and shown["20"] == "••••"  # the typed field's text is the fill's; the other kept
    retyped = ground_state(TASK, PASSWORDS, "fill('17', 'P9Gp')", PASSWORDS)
    assert {e.bid: field_value(e) for e in elements(retyped) if e.bid} == {"17": "••••", "20": "", "21": ""}


FOCUS_PAGE = """[goal] Select yh and click Submit.
[page] Click Checkboxes Task
[17] LabelText '', clickable
  [18] checkbox 'yh', clickable, checked='false'
  StaticText 'yh'
[20] LabelText '', clickable
  [21] checkbox 'AuT', clickable, focused, checked='true'
  StaticText 'AuT'
[36] button 'Submit', clickable
[40] link 'more', clickable, url='x'"""


def test_the_focus_goes_where_the_action_puts_it():
    """A page has one focused element: a click on a checkbox, radio button or link focuses it and a fill its field,
    and after those and a click on a button nothing else stays focused (the dreams' audited steps matched the page
    exactly in 29 of 107, in 60 with the fields' text and the focus grounded; no recorded real step changes)."""
    task = Task(id="miniwob-click-checkboxes-3", env="miniwob", instruction="Select yh and click Submit.",
                goal={"subdomain": "click-checkboxes", "seed": 3}, split="train")
    clicked = FOCUS_PAGE.replace("'yh', clickable, checked='false'", "'yh', clickable, checked='true'")
    page = clicked.replace("'yh', clickable,", "'yh', clickable, focused,").replace("'AuT', clickable, focused,",
                                                                                 "'AuT', clickable,")
    assert ground_state(task, FOCUS_PAGE, "click('18')", clicked) == page
    assert ground_state(task, FOCUS_PAGE, "click('40')", FOCUS_PAGE) == FOCUS_PAGE.replace(
        "clickable, focused, checked='true'", "clickable, checked='true'").replace("clickable, url", "clickable, focused, url")
    # a button: nothing else focused, its own focus the model's (the page focuses it mostly, not always)
    assert ground_state(task, FOCUS_PAGE, "click('36')", FOCUS_PAGE) == FOCUS_PAGE.replace("clickable, focused, checked='true'",
                                                                           "clickable, checked='true'")
    # a label may focus what it holds: left as written; so is an answer that says the click failed
    assert ground_state(task, FOCUS_PAGE, "click('17')", FOCUS_PAGE) is None
    assert ground_state(task, FOCUS_PAGE, "click('36')", FOCUS_PAGE + "\n[error] TimeoutError: click") is None


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
    # grounded twice: the fill's field, and the same field after Submit (the model wrote its name back; a click
    # leaves a field's text alone)
    assert (reward, done, info["won"], info["grounded"]) == (1.0, True, True, 2)
    reward, done, info = played(False)
    assert (info["won"], info["grounded"]) == (False, 0)


PW_TASK = Task(id="miniwob-enter-password-8", env="miniwob",
               instruction='Enter the password "P9Gp" into both text fields and press submit.',
               goal={"subdomain": "enter-password", "seed": 8}, split="train")
PW_START = """[goal] Enter the password "P9Gp" into both text fields and press submit.
[page] Enter Password Task
[17] textbox '', clickable
[20] textbox '', clickable
[21] button 'Submit', clickable"""


def test_the_dream_reads_a_password_from_the_episode_s_fills():
    """An experience model that credits a win for any submitted form: the page shows bullets, so the rule reads the
    two passwords from the episode's own fills (the history the synthetic environment passes it): typed right,
    the win stands; typed wrong with as many characters, the rule overrules it, where before it left the verdict to
    the model (a false win: half of a grounded dream's missed or false password verdicts)."""
    # The model masks the fields it fills but miscounts the bullets of the one just typed (as the audit found).
    typed_one = PW_START.replace("[17] textbox '', clickable", "[17] textbox '' value='•••••', clickable\n  StaticText '•••••'")
    typed_two = typed_one.replace("•••••", "••••").replace(
        "[20] textbox '', clickable", "[20] textbox '' value='•••', clickable\n  StaticText '•••'")

    def sim(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1] if "\nAction: " in req[-1]["content"] else ""
        if action == "click('21')":
            return format_completion(typed_two, 1.0, True, "Logged in.")
        answer = {"": PW_START, "fill('20'": typed_two}.get(action[:9], typed_one)
        return format_completion(answer, 0.0, False, "Typed." if action else "Start.")

    def played(first: str, second: str) -> tuple[float, dict]:
        model = ExperienceModel(FakeLLM(sim), buffer=ReplayBuffer(None, HashingEmbedder()), env="miniwob",
                                config=ExperienceModelConfig(use_retrieval=False, compact_states=False))
        env = SyntheticEnv(model, tasks=[PW_TASK], initial_state="model", reward_from="state", ground_states=True)
        env.reset(seed=0)
        env.step(f"fill('17', '{first}')")
        obs, *_ = env.step(f"fill('20', '{second}')")
        assert obs.count("value='••••'") == 2  # grounded: the page's bullets, whatever the model wrote
        _, reward, done, _, info = env.step("click('21')")
        return reward, {**info, **env.stats}

    reward, info = played("P9Gp", "P9Gp")
    assert (reward, info["won"], info["wins_overruled"]) == (1.0, True, 0)
    reward, info = played("P9Gp", "p9gP")
    assert (reward, info["won"], info["model_won"], info["wins_overruled"]) == (0.0, False, True, 1)
