"""TextWorldEnv on real `tw-make`-style games (seeds 0 and 1 of the family's pool, and one made with the
`tw-make` command line): the TextEnv contract, policies, abstract state, goals, explain and corpus."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textworld")

from dreamgym.env import check_env  # noqa: E402
from dreamgym.envs import family  # noqa: E402
from dreamgym.envs import textworld_env as T  # noqa: E402
from dreamgym.types import Task, Transition  # noqa: E402

SEEDS = (0, 1)  # the first two games of the train pool (generated on first use, then cached)


@pytest.fixture(scope="module")
def pool():
    return T.tasks("train", n=len(SEEDS))


@pytest.fixture(scope="module")
def env(pool):
    e = T.make_env(tasks=pool)
    yield e
    e.close()


def play(env, task, policy, seed=0, limit=50):
    pol = T.POLICIES[policy](seed)
    obs, info = env.reset(options={"task": task})
    pol.reset(task, obs, info)
    out = [(obs, 0.0, info)]
    for _ in range(limit):
        obs, r, term, trunc, info = env.step(pol.act(obs, info))
        out.append((obs, r, info))
        if term or trunc:
            break
    return out


def test_pool_is_seeded_and_cached(pool):
    assert [t.goal["seed"] for t in pool] == list(SEEDS)
    assert all(Path(t.goal["game_file"]).exists() and t.instruction for t in pool)
    assert [t.instruction for t in T.tasks("train", n=2)] == [t.instruction for t in pool]  # reused, same text
    assert {"make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain"} <= \
        set(dir(family("textworld"))) and "corpus_text" in family("textworld").hooks.defined


def test_check_env(env, pool):
    check_env(env, options={"task": pool[0]})


def test_oracle_and_noisy_win_random_does_not(env, pool):
    for task in pool:
        expert = play(env, task, "oracle")
        assert expert[-1][2]["won"] and expert[-1][1] == 1.0 and sum(s[1] for s in expert) == 1.0
        assert len(expert) - 1 == len(task.goal["walkthrough"])
        noisy = play(env, task, "noisy", seed=3)
        assert noisy[-1][2]["won"]
    rnd = [play(env, t, "random", seed=5, limit=30)[-1][2]["won"] for t in pool]
    assert sum(rnd) <= 1


def test_observations_are_clean_and_state_lists_actions(env, pool):
    obs, info = env.reset(options={"task": pool[0]})
    assert "$$$$" not in obs and "-= " in obs and not obs.rstrip().endswith(">")
    assert "$$$$" in info["raw_obs"]
    state = info["abstract_state"]
    for key in ("Objective:", "Observation:", "Room:", "Inventory:", "Actions:"):
        assert key in state
    assert T.admissible_from_state(state) == sorted(info["admissible_actions"])
    obs, r, term, trunc, info = env.step("dance wildly")
    assert not term and r == 0.0 and obs


def test_any_tw_make_game_runs(tmp_path):
    """The adapter takes any game file, here one made by the `tw-make` command line."""
    exe = shutil.which("tw-make") or str(Path(sys.executable).parent / "tw-make")
    out = tmp_path / "cli_game.z8"
    subprocess.run([exe, "custom", "--world-size", "2", "--nb-objects", "3", "--quest-length", "2", "--seed", "7",
                    "--output", str(out), "--silent"], check=True, capture_output=True, timeout=600)
    e = T.TextWorldEnv(game_files=[str(out)])
    obs, info = e.reset(seed=0)
    assert info["task"].instruction  # the objective, read from the game
    pol = T.POLICIES["oracle"](0)
    for _ in range(20):
        obs, r, term, trunc, info = e.step(pol.act(obs, info))
        if term:
            break
    assert info["won"]
    e.close()


def test_parse_goal_and_explain(env, pool):
    g = T.parse_goal(pool[0].instruction)
    assert g is not None and g["steps"]
    assert T.parse_goal("") is None and T.parse_goal("zzz qqq") is None and T.parse_goal(None) is None
    steps = play(env, pool[0], "oracle")
    plan = pool[0].goal["walkthrough"]
    trs = [Transition(task=pool[0], history=[], state=a[2]["abstract_state"], action=act,
                      next_state=b[2]["abstract_state"], reward=b[1], done=False)
           for a, b, act in zip(steps, steps[1:], plan)]
    texts = [T.explain(tr) for tr in trs]
    assert "reward 1" in texts[-1] and "reward is 0" in texts[0]
    bogus = Transition(task=pool[0], history=[], state=trs[0].state, action="fly", next_state=trs[0].state,
                       reward=0.0, done=False)
    assert "not one of the commands" in T.explain(bogus)


def test_corpus_text():
    lines = T.corpus_text()
    assert len(lines) > 500 and lines == T.corpus_text()
    assert any(line.startswith("-= ") for line in lines) and "go north" in lines


def test_clean_observation():
    raw = "\n\n  $$$$$$$$\\  $$$$$$$$| $$  | $$\n\nYou see a box.\n\n>  -= Kitchen =-0/1"
    assert T.clean_observation(raw) == "You see a box."
    assert T.clean_observation("") == "Nothing happens."


def test_missing_game_file_is_a_clear_error():
    e = T.TextWorldEnv(tasks=[Task(id="x", env="textworld", instruction="", goal={"game_file": "/nope.z8"})])
    with pytest.raises(FileNotFoundError, match="names no existing game file"):
        e.reset(seed=0)


def test_games_are_made_in_parallel_from_an_unguarded_script_that_started_threads(tmp_path):
    """Once another library has started a thread, the games are not made in forked workers (forking threads can
    hang); multiprocessing's spawn then re-ran the user's whole script in every worker unless it was guarded by
    `if __name__ == "__main__":`. The workers are fresh interpreters that import only the package: the script runs
    once, and both games are made."""
    script = tmp_path / "user_script.py"
    runs = tmp_path / "runs.txt"
    script.write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # another library's thread\n"
        f"with open({str(runs)!r}, 'a') as fh:\n"
        "    fh.write('ran\\n')\n"
        "from dreamgym.envs.textworld_env import make_games\n"
        "metas = make_games([7, 8], workers=2)\n"
        "print(sorted(m['seed'] for m in metas))\n")
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "DREAMGYM_CACHE": str(tmp_path / "c"),
                              "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[7, 8]"
    assert runs.read_text() == "ran\n"  # the script ran once: no worker re-ran it
