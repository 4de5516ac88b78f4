"""Shared helpers for the experience-model tests (not a test module).

- `dial_sim`: a scripted FakeLLM answer function that plays the dial's rules from the prompt, so the synthetic
  environment and the fidelity code can be tested against a known-correct "model";
- `dial_trajectories`: real dial trajectories from the family's scripted policies;
- `DIAL_TASK` and `dial_query`: a dial task (target 5) and a query on it;
- `trained_dial_model`: a tiny experience model trained with retrieval on real dial data, shipped with the tests
  (`model_fixtures`).
"""

from __future__ import annotations

import re
from pathlib import Path

from dreamgym.commands.collect import run_episode
from dreamgym.envs import dial
from dreamgym.experience.format import RESET_ACTION, format_completion, query_for
from dreamgym.types import Task, Transition

DIAL_TASK = Task(id="dial-3-5", env="dial", instruction="set the dial to 5 and press submit",
                 goal={"target": 5, "start": 3})


def dial_query(v: int, action: str, history=None, tid: str = "q") -> Transition:
    """A query on `DIAL_TASK` from the dial at `v`."""
    return query_for(DIAL_TASK, dial.abstract_state(v), action, history=history, trajectory_id=tid)


def dial_sim(req: list[dict[str, str]]) -> str:
    """Answer an experience-model request with the dial's true dynamics (read from the prompt)."""
    user = req[-1]["content"]
    body, action = user.rsplit("\nAction: ", 1)
    state = body.rsplit("State:\n", 1)[1]
    target = int(re.search(r"set the dial to (\d+)", user).group(1))
    if action == RESET_ACTION:
        return format_completion(dial.abstract_state((target + 5) % 10), 0.0, False, "The episode starts.")
    v = dial.parse_state(state)
    if v is None:
        return format_completion(state, 0.0, False, "Not a dial state.")
    a = " ".join(action.lower().split())
    if a == "turn up":
        v = min(dial.DIAL_MAX, v + 1)
    elif a == "turn down":
        v = max(dial.DIAL_MIN, v - 1)
    elif a == "submit":
        return format_completion(dial.abstract_state(v), float(v == target), True, "Submit ends it.")
    return format_completion(dial.abstract_state(v), 0.0, False, "The dial moves.")


def dial_trajectories(n: int, split: str = "train", seed: int = 0,
                      mix: tuple[str, ...] = ("oracle", "noisy", "noisy", "random")):
    env = dial.make_env(split)
    tasks = dial.tasks(split)
    out = []
    for i in range(n):
        name = mix[i % len(mix)]
        traj = run_episode(env, dial.POLICIES[name](seed=seed * 100_000 + i), seed=seed * 100_000 + i,
                           task=tasks[(i * 7 + seed) % len(tasks)], policy_name=name,
                           traj_id=f"dial-{split}-{seed}-{i}")
        out.append(traj)
    return out


def trained_dial_model() -> Path:
    """The dial experience-model checkpoint the tests load: shipped in tests/fixtures/models/dial-em (see
    `model_fixtures`), unpacked once into the DreamGym cache."""
    from model_fixtures import em_checkpoint

    return em_checkpoint()


FAMILY_SPLITS = {"dial": ("test", {}, {}), "webshop": ("test", {}, {}), "alfworld": ("train", {"n": 2}, {"n": 2}),
                 "textworld": ("train", {"n": 2}, {"n": 2}), "miniwob": ("test", {"n_seeds": 1}, {"n_seeds": 1})}
"""Per family: the split a few real episodes are played on and the `make_env` / `tasks` arguments that keep it
small (ALFWorld's and TextWorld's games, generated on first use and cached; one MiniWoB++ seed per task)."""


def family_steps(env_name: str, n_steps: int, seed: int = 0) -> list[Transition]:
    """At least `n_steps` real steps (reset pseudo-steps left out) of `env_name`, played by its noisy and random
    scripted policies on a few tasks, as experience-model transitions with history: held-out queries for a model
    that never trained on them. MiniWoB++ runs in its own Chromium, closed on return."""
    from dreamgym.envs import family
    from dreamgym.experience import em_transitions

    fam = family(env_name)
    split, env_kw, task_kw = FAMILY_SPLITS[env_name]
    env = fam.make_env(split, **env_kw)
    tasks = fam.tasks(split, **task_kw)
    steps: list[Transition] = []
    try:
        for i in range(20):
            if len(steps) >= n_steps:
                break
            name = ("noisy", "random")[i % 2]
            traj = run_episode(env, fam.POLICIES[name](seed + i), seed + i, task=tasks[(seed + i * 7) % len(tasks)],
                               policy_name=name, traj_id=f"{env_name}-{seed}-{i}")
            steps += [t for t in em_transitions([traj], history=3) if t.action != RESET_ACTION]
    finally:
        env.close()
    return steps[:n_steps]
