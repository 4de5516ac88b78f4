"""MiniWoB++ in real Chromium: the family contract, the oracle's success, and a browser that crashes or hangs."""

from __future__ import annotations

import sys
import time

import pytest

from dreamgym.commands.collect import EpisodeFailed, run_episode
from dreamgym.envs import check_family, family
from dreamgym.envs.web.axtree import admissible_from_state, parse_state
from dreamgym.envs.web.browser import BrowserConfig, BrowserFailure, BrowserPool, BrowserWorker, chromium_available
from dreamgym.envs.web.explain import noop_state
from dreamgym.types import Transition

pytestmark = pytest.mark.skipif(not chromium_available(), reason="no Chromium at /usr/bin/chromium "
                                "(apt-get install chromium, or set $DREAMGYM_CHROMIUM)")


@pytest.fixture(scope="module")
def pool():
    with BrowserPool(1) as p:
        yield p


def test_check_family_on_real_pages(pool):
    """The family keeps its contract on real pages: 0 disagreements. (At a load average of about 20, 2 of 5 rejected
    steps once disagreed on noop_state: a click whose BrowserGym action raised was flagged invalid although the page
    changed; on a machine not that loaded the check passes.)"""
    report = check_family("miniwob", task_kwargs={"n_seeds": 1}, env_kwargs={"pool": pool, "n_seeds": 1, "max_steps": 3},
                          step_limit=3)
    assert report.ok and report.checked["admissible"] > 0 and report.checked["step_limit"] > 0


def test_oracle_solves_the_tasks_at_the_reported_rate(pool):
    """docs/web.md reports the oracle's success per task (86/90 on 5 test seeds of each task); one seed each
    here must reach at least 15 of the 18 tasks."""
    fam = family("miniwob")
    env = fam.make_env("test", pool=pool, n_seeds=1)
    won = {}
    for i, task in enumerate(fam.tasks("test", n_seeds=1)):
        traj = run_episode(env, fam.POLICIES["oracle"](i), i, task=task)
        won[task.goal["subdomain"]] = traj.won
        assert traj.won == (traj.total_reward == 1.0)
    env.close()
    assert len(won) == 18 and sum(won.values()) >= 15, won
    # the random policy is a real baseline, not the oracle in disguise
    env = fam.make_env("train", pool=pool, n_seeds=1)
    task = next(t for t in fam.tasks("train", n_seeds=1) if t.goal["subdomain"] == "login-user")
    traj = run_episode(env, fam.POLICIES["random"](0), 0, task=task)
    assert not traj.won
    env.close()


def test_the_extended_train_split_plays_each_added_task_and_the_oracle_wins_it(pool):
    """`train:extended` (docs/results/miniwob.md, "Ten times the data") adds tasks on which the oracle won all 20 train
    seeds; in real Chromium at seed 0, through the split a collection passes, each is a train task the oracle wins."""
    from dreamgym.envs.web.miniwob_tasks import EXTRA_TRAIN_TASKS, TEST_ONLY

    fam = family("miniwob")
    env = fam.make_env("train:extended", pool=pool, n_seeds=1)
    tasks = fam.tasks("train:extended", n_seeds=1)
    assert len(tasks) == 23 and not {t.goal["subdomain"] for t in tasks} & set(TEST_ONLY)
    won = {}
    for task in tasks:
        if task.goal["subdomain"] in EXTRA_TRAIN_TASKS:
            traj = run_episode(env, fam.POLICIES["oracle"](0), 0, task=task, policy_name="oracle")
            assert traj.task.split == "train" and traj.task.goal["seed"] == 0
            won[task.goal["subdomain"]] = traj.won
    env.close()
    # All 8 won at every train seed on 2026-12-06; one miss is allowed for a click lost to a loaded machine.
    assert set(won) == set(EXTRA_TRAIN_TASKS) and sum(won.values()) >= 7, won


def test_states_actions_and_explanations_are_grounded(pool):
    fam = family("miniwob")
    env = fam.make_env("train", pool=pool, n_seeds=1)
    task = next(t for t in fam.tasks("train", n_seeds=1) if t.goal["subdomain"] == "enter-text")
    obs, info = env.reset(options={"task": task})
    goal, title, els, error = parse_state(obs)
    assert goal == task.instruction and title == "Enter Text Task" and not error
    box = next(e for e in els if e.role == "textbox")
    value = fam.parse_goal(task.instruction)["values"][0]
    assert f"fill({box.bid!r}, {value!r})" in info["admissible_actions"] == admissible_from_state(obs)
    assert len(obs) < len(info["raw_obs"]) / 3  # the tree is a fraction of the HTML
    # an element the page lacks: the real error line, which noop_state predicts
    obs2, r, term, trunc, info2 = env.step("click('999')")
    assert info2["invalid_action"] and not term and r == 0.0
    assert obs2 == noop_state(obs, "click('999')")
    obs3, r, term, trunc, info3 = env.step(f"fill({box.bid!r}, {value!r})")
    assert f"value={value!r}" in obs3 and not info3["invalid_action"]
    text = fam.explain(Transition(task=task, history=[], state=obs, action=f"fill({box.bid!r}, {value!r})",
                                  next_state=obs3, reward=0.0, done=False))
    assert "textbox" in text and value in text and "continues" in text
    submit = next(e for e in els if e.name == "Submit")
    obs4, r, term, trunc, info4 = env.step(f"click({submit.bid!r})")
    assert term and r == 1.0 and info4["won"]
    env.close()


def test_a_killed_browser_fails_the_episode_with_its_reason_and_restarts(pool):
    fam = family("miniwob")
    env = fam.make_env("train", pool=pool, n_seeds=1)
    task = fam.tasks("train", n_seeds=1)[0]
    env.reset(options={"task": task})
    worker = env.worker
    generation, pid = worker.generation, worker.pid
    assert pid is not None
    worker.kill()  # as a crash would
    with pytest.raises(BrowserFailure, match="crashed|restarted|closed"):
        env.step("click('13')")
    # the collector turns it into a failed episode with its stage and reason, and the run goes on
    with pytest.raises(EpisodeFailed) as failed:
        class KillingOracle(fam.POLICIES["oracle"]):
            def act(self, obs, info):
                worker.kill()
                return super().act(obs, info)
        run_episode(env, KillingOracle(0), 0, task=task)
    assert failed.value.stage == "env" and "BrowserFailure" in failed.value.reason
    traj = run_episode(env, fam.POLICIES["oracle"](0), 0, task=task)
    assert traj.won and worker.generation > generation and worker.pid not in (None, pid)
    env.close()


def test_a_hung_page_is_killed_at_the_time_limit():
    worker = BrowserWorker(name="hang-test")
    try:
        def hang(browser):
            page = browser.new_context().new_page()
            page.evaluate("() => { while (true) {} }")

        # The browser is up before the hang is timed: a call's limit counts its browser's launch too, which on a
        # loaded 2-core machine can take longer than the 2 s the hang is given. The calls around the hang have the
        # default limit for the same reason.
        assert worker.call(lambda b: b.new_context().new_page().evaluate("() => 1")) == 1
        t0 = time.monotonic()
        with pytest.raises(BrowserFailure, match="hung"):
            worker.call(hang, timeout_s=2.0)
        assert time.monotonic() - t0 < 15
        assert worker.call(lambda b: b.new_context().new_page().evaluate("() => 1 + 1")) == 2
        assert worker.restarts == 1
    finally:
        worker.close()
    assert worker.pid is None


def test_a_missing_browser_is_a_config_error():
    from dreamgym.config import ConfigError

    with pytest.raises(ConfigError, match="executable.*DREAMGYM_CHROMIUM"):
        BrowserWorker(BrowserConfig(executable="/nonexistent/chromium"))


_OWNER = """
import sys, time
from dreamgym.envs.web.browser import BrowserWorker
w = BrowserWorker()
w.call(lambda browser: browser.new_context().close())
print(w.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_browser_dies_with_a_process_ended_without_its_exit_handlers(tmp_path):
    """A collect worker ended by `Pool.terminate` (SIGTERM, no atexit) must not leave its Chromium running."""
    import os
    import signal
    import subprocess

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        pid = int(owner.stdout.readline())
        os.kill(pid, 0)  # the browser runs
        owner.send_signal(signal.SIGTERM)
        owner.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
            pytest.fail("the browser outlived the process that started it")
    finally:
        owner.kill()


def test_the_goal_parser_never_names_a_task_for_another_on_any_shipped_task():
    """Every task the package ships, at two held-out seeds: the instruction parses to None or to a set of tasks that
    holds the task it came from (`click-checkboxes-large` is not taken for `click-checkboxes`)."""
    fam = family("miniwob")
    wrong, parsed = [], set()
    for task in fam.tasks("test:all", n_seeds=2):
        goal = fam.parse_goal(task.instruction)
        if goal is not None:
            parsed.add(task.goal["subdomain"])
            if task.goal["subdomain"] not in goal["tasks"]:
                wrong.append((task.goal["subdomain"], task.instruction, goal["tasks"]))
    assert not wrong
    assert {"click-checkboxes-large", "click-checkboxes-transfer", "enter-text-dynamic", "unicode-test"} <= parsed


def test_collect_plays_three_tasks_outside_the_default_set_chosen_on_the_command_line(tmp_path, capsys):
    from dreamgym.cli import main as cli
    from dreamgym.data import load_trajectories
    from dreamgym.envs.web.miniwob_tasks import DEFAULT_TASKS

    chosen = ("click-checkboxes-transfer", "enter-text-dynamic", "unicode-test")
    assert not set(chosen) & set(DEFAULT_TASKS)
    out = tmp_path / "mw.jsonl"
    # test:<tasks> gives each 5 held-out seeds (15 instances); the schedule plays the tasks in turn, so 6 episodes
    # play every one of them twice.
    assert cli(["collect", "--env", "miniwob", "--split", f"test:{','.join(chosen)}", "--policy", "oracle:2,random:1",
                "--episodes", "6", "--no-progress", "--out", str(out)]) == 0
    episodes = load_trajectories(str(out))
    played = {e.task.goal["subdomain"] for e in episodes}
    assert played == set(chosen) and {e.task.split for e in episodes} == {"test"}
    assert {e.policy for e in episodes} == {"oracle", "random"} and len(episodes) >= 5  # a hung page may fail one
    oracle = [e for e in episodes if e.policy == "oracle"]
    assert sum(e.won for e in oracle) >= len(oracle) // 2, [(e.task.id, e.won) for e in oracle]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_short_collection_over_named_tasks_plays_every_one_of_them(seed):
    """`train:<tasks>` gives each task 20 seeds (60 instances here): the schedule plays the pages in turn (the
    family's `task_kind`), so as many episodes as tasks meet each once and twice as many twice, whatever the seed;
    a plain shuffle of the 60 instances drew two of the same page in the first three for most seeds."""
    from collections import Counter

    from dreamgym.commands.collect import schedule

    chosen = ("click-button", "click-link", "focus-text")
    for episodes in (3, 6):
        specs = schedule("miniwob", {"random": 1.0}, episodes, f"train:{','.join(chosen)}", seed)
        kinds = Counter(s.task.goal["subdomain"] for s in specs)
        assert kinds == {k: episodes // 3 for k in chosen}, kinds
        assert len({s.task.id for s in specs}) == episodes  # distinct instances, not one seed replayed


def test_a_soft_scored_task_keeps_its_partial_credit_and_is_won_only_at_full_credit(pool):
    """click-checkboxes-soft scores the share of right choices: four of the five similar words ticked scores 0.667,
    recorded as the reward (it was recorded as 1, a win); the episode is won only at MiniWoB's full reward 1."""
    fam = family("miniwob")
    env = fam.make_env("train:click-checkboxes-soft", pool=pool, n_seeds=1)
    task = fam.tasks("train:click-checkboxes-soft", n_seeds=1)[0]
    obs, _ = env.reset(options={"task": task})
    _, _, els, _ = parse_state(obs)
    boxes = [e.bid for e in els if e.role == "checkbox"]
    submit = next(e for e in els if e.name == "Submit")
    for bid in boxes[1:-1]:  # seed 0: box 0 is the odd word out, the last similar one is left unticked
        env.step(f"click({bid!r})")
    _, reward, term, _, info = env.step(f"click({submit.bid!r})")
    env.close()
    assert term and 0.0 < info["miniwob_raw_reward"] < 1.0
    assert reward == pytest.approx(info["miniwob_raw_reward"]) and not info["won"]


def test_a_split_suffix_sets_the_seeds_per_task_and_keeps_the_default_pages_first():
    """`test@10`: each test task at 10 held-out seeds (its pages are what differs; an episode's own seed does not
    change a page), the 5 of `test` among them; a bad count is refused naming it."""
    from dreamgym.envs.web.miniwob_tasks import TEST_SEED_BASE, split_specs

    five, ten = split_specs("test"), split_specs("test@10")
    assert len(ten) == 2 * len(five) and set(five) < set(ten) and len(set(ten)) == len(ten)
    assert {s for _, s in ten} == set(range(TEST_SEED_BASE, TEST_SEED_BASE + 10))
    assert split_specs("train:extended@2") == [(t, s) for t, _ in split_specs("train:extended")[::20] for s in (0, 1)]
    assert split_specs("test@10", n_seeds=3) == split_specs("test", n_seeds=3)
    for bad in ("test@", "test@0", "test@ten"):
        with pytest.raises(ValueError, match="seeds per task"):
            split_specs(bad)
