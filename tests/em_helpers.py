"""Shared helpers for the experience-model tests (not a test module).

- `dial_sim`: a scripted FakeLLM answer function that plays the dial's rules from the prompt, so the synthetic
  environment and the fidelity code can be tested against a known-correct "model";
- `dial_trajectories`: real dial trajectories from the family's scripted policies;
- `DIAL_TASK` and `dial_query`: a dial task (target 5) and a query on it;
- `trained_dial_model`: a tiny experience model trained on real dial data, built once and cached on disk
  (keyed by the settings and the experience model's FORMAT_VERSION), so training is paid for at most once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
from pathlib import Path

from dreamgym.collect import run_episode
from dreamgym.envs import dial
from dreamgym.experience.format import FORMAT_VERSION, RESET_ACTION, format_completion, query_for
from dreamgym.paths import cache_dir
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


# The quickstart's settings: two retrieved examples, no history window, reasoning traces, batches of 8. The tiny
# model writes the format after ~100 steps but copies the dial's value only after ~1000 (an abrupt drop of the
# loss), so anything shorter cannot test dynamics, rewards or the use of examples.
TRAIN_SETTINGS = {"episodes": 300, "max_steps": 1600, "batch_size": 8, "k": 2, "history": 0,
                  "use_reasoning": True, "embedder": "hashing", "lr": 1e-3, "warmup_steps": 50}


def trained_dial_model() -> Path:
    """A checkpoint of the tiny preset trained with retrieval on real dial data (cached under the test-artifacts
    cache; about 7 minutes to build once on two free cores)."""
    # "stack" names the training code's generation: a model cached by an older stack is not this one's.
    spec = {**TRAIN_SETTINGS, "format_version": FORMAT_VERSION, "stack": "trainers.common"}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    root = cache_dir("test-artifacts")
    out = root / f"em-dial-{key}"
    with open(root / f"em-dial-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes build it once
        if (out / "train_summary.json").is_file():
            return out
        from dreamgym.data import write_jsonl
        from dreamgym.experience.config import ExperienceModelConfig
        from dreamgym.experience.train import TrainEMConfig, train

        s = TRAIN_SETTINGS
        trajs = dial_trajectories(s["episodes"])
        data = root / f"em-dial-{key}.jsonl"
        write_jsonl(data, trajs)
        cfg = TrainEMConfig(env="dial", data=str(data), preset="tiny", out=str(out), resume=False,
                            model=ExperienceModelConfig(k=s["k"], history=s["history"], embedder=s["embedder"],
                                                        use_reasoning=s["use_reasoning"]),
                            max_steps=s["max_steps"], batch_size=s["batch_size"], lr=s["lr"],
                            warmup_steps=s["warmup_steps"], log_every=50, save_every=0)
        train(cfg, trajectories=trajs)
    return out
