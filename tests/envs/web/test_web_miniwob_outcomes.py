"""MiniWoB++'s reward rule on abstract states (`grounded_outcome`, `dreamgym.envs.web.miniwob_outcomes`): it agrees
with real recorded steps wherever it decides, decides the wins the page shows (a password's from the episode's fills),
scores partial credit as the page does, and says None where the page shown and the history cannot decide. No browser: states recorded in Chromium
(tests/fixtures/web/miniwob_episodes.jsonl, and a click-link page of runs/mw-big/offline.jsonl written out)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("browsergym")  # the rule parses actions with BrowserGym's own parser, as the environment does

from dreamgym.data import load_trajectories  # noqa: E402
from dreamgym.envs import family  # noqa: E402
from dreamgym.envs.web.axtree import Element, field_value, parse_fill  # noqa: E402
from dreamgym.envs.web.miniwob import grounded_outcome  # noqa: E402
from dreamgym.envs.web.miniwob_outcomes import PAGES, typed_text  # noqa: E402
from dreamgym.envs.web.miniwob_tasks import TRAIN_TASKS  # noqa: E402
from dreamgym.types import Task  # noqa: E402

EPISODES = Path(__file__).resolve().parents[2] / "fixtures" / "web" / "miniwob_episodes.jsonl"
# Tasks whose win the page shown does not tell (see the module's docstring): click-test-2's ONE may be covered by TWO.
WINS_UNSEEN = {"click-test-2"}


def _task(sub: str, instruction: str, seed: int = 0) -> Task:
    return Task(id=f"miniwob-{sub}-{seed}", env="miniwob", instruction=instruction,
                goal={"subdomain": sub, "seed": seed}, split="train")


# miniwob-click-link-10 in real Chromium (the first state of its episodes in runs/mw-big/offline.jsonl): the
# dream's audit found a policy's click('13'), on the link 'quam.', credited as a win; the page ended it with reward 0.
LINK_TASK = _task("click-link", 'Click on the link "interdum".', 10)
LINK_PAGE = """[goal] Click on the link "interdum".
[page] Click Link Task
StaticText 'Lectus. Tellus suspendisse justo'
[13] generic, clickable
  StaticText 'quam.'
StaticText 'Congue malesuada. Fermentum lacus, enim nisl, scelerisque velit. Nunc'
[14] generic, clickable
  StaticText 'sollicitudin'
[15] generic, clickable
  StaticText 'interdum'
StaticText 'malesuada. Dui purus'
[16] generic, clickable
  StaticText 'tortor.'"""
ENDED = LINK_PAGE + "\n[31] generic, clickable\n  StaticText 'START'"  # what the real page shows after any link


@pytest.fixture(scope="module")
def episodes():
    return load_trajectories(EPISODES)


def test_the_family_has_the_rule_for_its_train_tasks():
    assert family("miniwob").hooks.grounds_outcomes
    assert set(PAGES) == set(TRAIN_TASKS)


def test_it_agrees_with_every_recorded_step_it_decides_and_decides_most(episodes):
    decided = 0
    for traj in episodes:
        for i, st in enumerate(traj.steps):
            got = grounded_outcome(traj.task, st.state, st.action, st.next_state, traj.history(i))
            if got is not None:
                decided += 1
                assert got == (st.reward, st.terminated), (traj.task.id, i, st.action)
    assert decided == 34  # of the fixture's 36 steps: all but 2 dialog clicks


def test_it_decides_every_recorded_win_the_page_shows(episodes):
    wins = [(traj, st) for traj in episodes for st in traj.steps if st.terminated and st.reward == 1.0]
    judged = [(traj, st) for traj, st in wins if traj.task.goal["subdomain"] not in WINS_UNSEEN]
    assert len(judged) >= 7
    for traj, st in judged:
        i = traj.steps.index(st)
        assert grounded_outcome(traj.task, st.state, st.action, st.next_state, traj.history(i)) == (1.0, True), \
            traj.task.id


def test_a_click_on_the_wrong_link_ends_the_episode_without_reward_whatever_the_next_state_says():
    for next_state in (ENDED, "", LINK_PAGE + "\n[32] StaticText 'You won!'"):
        assert grounded_outcome(LINK_TASK, LINK_PAGE, "click('13')", next_state) == (0.0, True)
        assert grounded_outcome(LINK_TASK, LINK_PAGE, "click('14')", next_state) == (0.0, True)
        assert grounded_outcome(LINK_TASK, LINK_PAGE, "click('15')", next_state) == (1.0, True)
    # Not a link of this page, a page for another goal, a page that already ended: the state does not decide.
    assert grounded_outcome(LINK_TASK, LINK_PAGE, "click('12')", ENDED) is None
    assert grounded_outcome(LINK_TASK, LINK_PAGE.replace("interdum", "quam."), "click('13')", ENDED) is None
    assert grounded_outcome(LINK_TASK, ENDED, "click('15')", ENDED) is None
    # An action BrowserGym refuses does nothing; a right click is no click the page scores.
    assert grounded_outcome(LINK_TASK, LINK_PAGE, "click 13", LINK_PAGE) == (0.0, False)
    assert grounded_outcome(LINK_TASK, LINK_PAGE, "click('15', button='right')", LINK_PAGE) is None


CHECKBOXES = """[goal] Select e6T3r, ds and click Submit.
[page] Click Checkboxes Task
[17] LabelText '', clickable
  [18] checkbox '2i', clickable, checked='false'
  StaticText '2i'
[20] LabelText '', clickable
  [21] checkbox 'e6T3r', clickable, checked='true'
  StaticText 'e6T3r'
[23] LabelText '', clickable
  [24] checkbox 'zl2p', clickable, checked='false'
  StaticText 'zl2p'
[26] LabelText '', clickable
  [27] checkbox 'ds', clickable, checked='false'
  StaticText 'ds'
[30] button 'Submit', clickable"""


def test_click_checkboxes_is_scored_as_the_page_scores_it_partial_credit_included():
    """The page's score is (boxes as asked - other boxes) / boxes, a negative one 0: the dream's audit replayed
    this Submit (miniwob-click-checkboxes-14) and the real page gave 0.5."""
    task = _task("click-checkboxes", "Select e6T3r, ds and click Submit.", 14)
    assert grounded_outcome(task, CHECKBOXES, "click('30')", "") == (0.5, True)
    all_right = CHECKBOXES.replace("'ds', clickable, checked='false'", "'ds', clickable, checked='true'")
    assert grounded_outcome(task, all_right, "click('30')", "") == (1.0, True)
    all_wrong = CHECKBOXES.replace("checked='false'", "checked='x'").replace("checked='true'", "checked='false'")
    all_wrong = all_wrong.replace("checked='x'", "checked='true'")
    assert grounded_outcome(task, all_wrong, "click('30')", "") == (0.0, True)
    # Checking a box or its label goes on; a box whose state the tree does not print cannot be scored.
    assert grounded_outcome(task, CHECKBOXES, "click('27')", "") == (0.0, False)
    assert grounded_outcome(task, CHECKBOXES, "click('26')", "") == (0.0, False)
    assert grounded_outcome(task, CHECKBOXES.replace(", checked='false'", "", 1), "click('30')", "") is None
    # A page the real one cannot be: a box renamed, its label not (the dream wrote such pages, its audit found).
    assert grounded_outcome(task, CHECKBOXES.replace("checkbox '2i'", "checkbox 'zz'"), "click('30')", "") is None


def test_click_option_reads_the_goal_s_button_only(episodes):
    task, st = _recorded(episodes, "click-option", "click('33')")
    assert grounded_outcome(task, st.state, st.action, "") == (1.0, True) == (st.reward, st.terminated)
    unchecked = st.state.replace("'hv', clickable, focused, checked='true'", "'hv', clickable, checked='false'")
    assert unchecked != st.state and grounded_outcome(task, unchecked, st.action, "") == (0.0, True)
    # Another button renamed (a dreamt page) does not change what the page reads; the goal's renamed does.
    assert grounded_outcome(task, st.state.replace("radio 'DW'", "radio 'Zq'"), st.action, "") == (1.0, True)
    assert grounded_outcome(task, st.state.replace("radio 'hv'", "radio 'Zq'"), st.action, "") is None
    assert grounded_outcome(task, st.state, "click('24')", "") == (0.0, False)


def _recorded(episodes, sub: str, action: str):
    return next((traj.task, st) for traj in episodes for st in traj.steps
                if traj.task.goal["subdomain"] == sub and st.action == action)


def test_none_where_the_page_shown_does_not_decide(episodes):
    # enter-password without its history: the fields show one bullet a character, so only a wrong length decides.
    task, st = _recorded(episodes, "enter-password", "click('21')")
    assert "value='••••'" in st.state and st.reward == 1.0
    assert grounded_outcome(task, st.state, st.action, st.next_state) is None
    short = st.state.replace("value='••••'", "value='•••'", 1)
    assert grounded_outcome(task, short, st.action, st.next_state) == (0.0, True)
    assert grounded_outcome(task, st.state, "fill('17', 'P9Gp')", st.next_state) == (0.0, False)
    # login-user: a username other than the goal's loses whatever the password.
    task, st = _recorded(episodes, "login-user", "click('22')")
    assert grounded_outcome(task, st.state, st.action, st.next_state) is None
    wrong_user = st.state.replace("value='keli'", "value='kelly'")
    assert wrong_user != st.state and grounded_outcome(task, wrong_user, st.action, st.next_state) == (0.0, True)
    # click-dialog: a click on the dialog lands at its centre, which the tree does not place.
    task, st = _recorded(episodes, "click-dialog", "click('32')")
    assert st.state.splitlines()[2].startswith("[32] dialog")
    assert grounded_outcome(task, st.state, st.action, st.next_state) is None
    # click-test-2: TWO may cover ONE (a click on ONE then times out), never the other way round.
    task = _task("click-test-2", "Click button ONE.", 6)
    page = "[goal] Click button ONE.\n[page] Click Test Task\n[13] button 'ONE', clickable\n[14] button 'TWO', clickable"
    assert grounded_outcome(task, page, "click('13')", "") is None
    assert grounded_outcome(task, page, "click('14')", "") == (0.0, True)
    # A task outside the train tasks, even one whose page reads like a train task's.
    unicode_task = _task("unicode-test", 'Click on the "Yes" button.')
    page = '[goal] Click on the "Yes" button.\n[page] Unicode Test Task\n[13] button \'Yes\', clickable'
    assert grounded_outcome(unicode_task, page, "click('13')", "") is None
    assert grounded_outcome(_task("click-button", 'Click on the "Yes" button.'), page, "click('13')", "") == (1.0, True)


def test_a_password_is_read_from_the_episode_s_fills(episodes):
    traj = next(t for t in episodes if t.task.goal["subdomain"] == "enter-password")
    i = next(k for k, st in enumerate(traj.steps) if st.action == "click('21')")
    task, st, history = traj.task, traj.steps[i], traj.history(i)
    fills = [a for _, a in history if a.startswith("fill(")]
    assert len(fills) == 2 and grounded_outcome(task, st.state, st.action, "", history) == (1.0, True)
    # The same bullets after a fill of other characters: the page would fail the form.
    bid, text = parse_fill(fills[1])
    wrong = [(s, a.replace(text, text[::-1].swapcase())) if a == fills[1] else (s, a) for s, a in history]
    assert wrong != history and grounded_outcome(task, st.state, st.action, "", wrong) == (0.0, True)
    # A key press on the field after its fill may have changed it: undecided, as is a fill the page refused.
    pressed = history + [(st.state, f"press('{bid}', 'Backspace')")]
    assert bid not in typed_text(pressed, st.state) and grounded_outcome(task, st.state, st.action, "", pressed) is None
    refused = history[:-1] + [(history[-1][0], fills[1])]
    err = st.state + "\n[error] TimeoutError: the element is not editable"
    assert typed_text(refused, err) == {k: v for k, v in typed_text(history, st.state).items() if k != bid}
    # A history whose text does not match the bullets the page shows (a dreamt page) decides nothing.
    longer = [(s, a.replace(text, text + "x")) if a == fills[1] else (s, a) for s, a in history]
    assert grounded_outcome(task, st.state, st.action, "", longer) is None
    # login-user: the username as the page shows it, the password from the fills.
    traj = next(t for t in episodes if t.task.goal["subdomain"] == "login-user" and t.won)
    i = next(k for k, st in enumerate(traj.steps) if st.action == "click('22')")
    assert grounded_outcome(traj.task, traj.steps[i].state, "click('22')", "", traj.history(i)) == (1.0, True)


def test_focus_and_choose_list_and_tabs(episodes):
    task = _task("focus-text-2", "Focus into the 2nd input textbox.")
    page = ("[goal] Focus into the 2nd input textbox.\n[page] Focus Text Task\n[12] textbox '', clickable\n"
            "[13] textbox '', clickable\n[14] textbox '', clickable")
    assert [grounded_outcome(task, page, f"click('{b}')", "") for b in (12, 13, 14)] == [(0.0, True), (1.0, True),
                                                                                         (0.0, True)]
    assert grounded_outcome(task, page, "fill('13', 'x')", "") is None  # Playwright focuses the field first
    task, st = _recorded(episodes, "choose-list", "click('21')")
    assert grounded_outcome(task, st.state, st.action, "") == (1.0, True)
    other = st.state.replace("value='Camile'", "value='Darelle'")
    assert other != st.state and grounded_outcome(task, other, st.action, "") == (0.0, True)
    task, st = _recorded(episodes, "click-tab", "click('22')")  # the wrong tab: the page ends it with reward 0
    assert grounded_outcome(task, st.state, st.action, "") == (0.0, True) == (st.reward, st.terminated)
    tablist = next(ln for ln in st.state.splitlines() if " tablist " in ln).split("]")[0][1:]
    assert grounded_outcome(task, st.state, f"click('{tablist}')", "") is None


def test_a_field_value_is_read_as_the_tree_prints_it():
    def box(attrs: str) -> Element:
        return Element("15", "textbox", "", attrs, 0)

    assert field_value(box(" value='Tora', clickable, focused")) == "Tora"
    assert field_value(box(""" value="O'Neil", clickable""")) == "O'Neil"  # repr's double quotes
    assert field_value(box(" value='a\\\\b'")) == "a\\b"
    assert field_value(box(", clickable")) == ""
