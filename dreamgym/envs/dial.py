"""Dial: a small real text environment for fast tests and the trainers' smoke runs.

Owns: the dial's dynamics, its task pool and splits, its abstract state and its action grammar.
Must not know: models, torch, trainers, the experience model.

The agent must set a dial (0-9) to a target and press submit. Actions: `turn up`, `turn down`, `submit`.
Submitting on the target wins (reward 1.0); submitting elsewhere ends the episode with reward 0.0; the
episode is truncated after `max_steps` steps. Anything else is answered with "Nothing happens." The
optimal policy needs |target - start| + 1 steps, so a random policy rarely wins but an agent that reads
the state can always win: enough structure for RL to show a real gain in seconds.
"""

from __future__ import annotations

import random
import re
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.types import Task, Transition

MAX_STEPS = 12
"""The step limit of the family (`EnvFamily.MAX_STEPS`): `make_env`'s episodes are truncated after as many steps."""

ACTIONS = ("turn up", "turn down", "submit")
DIAL_MIN, DIAL_MAX = 0, 9


def make_tasks(split: str = "train") -> list[Task]:
    """All (start, target) pairs; pairs whose sum is divisible by 5 are held out as the test split."""
    tasks = []
    for start in range(DIAL_MIN, DIAL_MAX + 1):
        for target in range(DIAL_MIN, DIAL_MAX + 1):
            if start == target:
                continue
            s = "test" if (start + target) % 5 == 0 else "train"
            if s == split:
                tasks.append(Task(id=f"dial-{start}-{target}", env="dial",
                                  instruction=f"set the dial to {target} and press submit",
                                  goal={"target": target, "start": start}, split=s))
    return tasks


def abstract_state(value: int) -> str:
    """The compact state the experience model reads and writes: the dial and the buttons."""
    return f"[dial] {value}\n" + "\n".join(f"[button] {a}" for a in ACTIONS)


def parse_state(state: str) -> int | None:
    """Inverse of `abstract_state` (None when the text is not a dial state)."""
    m = re.search(r"\[dial\]\s*(-?\d+)", state)
    return int(m.group(1)) if m else None


def admissible_from_state(state: str) -> list[str]:
    """The actions a state offers: its `[button]` elements."""
    return re.findall(r"^\[button\] (.+)$", state, flags=re.M)


def parse_goal(instruction: str) -> dict[str, Any] | None:
    """Goal parser used to validate generated task variants; None when not a well-formed dial goal."""
    m = re.fullmatch(r"\s*set the dial to (\d+) and press submit\.?\s*", instruction.lower())
    if not m or not DIAL_MIN <= int(m.group(1)) <= DIAL_MAX:
        return None
    return {"target": int(m.group(1))}


def expert_action(value: int, target: int) -> str:
    return "submit" if value == target else ("turn up" if value < target else "turn down")


class DialEnv(TextEnv):
    env_family = "dial"

    def __init__(self, split: str = "train", max_steps: int = MAX_STEPS):
        super().__init__()
        self.tasks = make_tasks(split)
        self.max_steps = max_steps
        self.task: Task = self.tasks[0]
        self.value = 0
        self.t = 0

    def _obs(self, message: str) -> tuple[str, dict[str, Any]]:
        state = abstract_state(self.value)
        obs = f"{message} The dial shows {self.value}."
        return obs, {"task": self.task, "admissible_actions": list(ACTIONS), "raw_obs": obs,
                     "abstract_state": state, "won": False}

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.get("task")
        if task is None:
            task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
        goal = task.goal if task.goal else (parse_goal(task.instruction) or {})
        if "target" not in goal:
            raise ValueError(f"dial task {task.id!r} has no target in its goal")
        self.task = task
        self.value = int(goal.get("start", (int(goal["target"]) + 5) % 10))
        self.target = int(goal["target"])
        self.t = 0
        return self._obs(f"Your task is to: {task.instruction}.")

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        a = " ".join(action.strip().lower().split())
        reward, terminated = 0.0, False
        if a == "turn up" and self.value < DIAL_MAX:
            self.value += 1
            msg = "You turn the dial up."
        elif a == "turn down" and self.value > DIAL_MIN:
            self.value -= 1
            msg = "You turn the dial down."
        elif a in ("turn up", "turn down"):
            msg = "The dial will not turn further."
        elif a == "submit":
            terminated = True
            reward = 1.0 if self.value == self.target else 0.0
            msg = "You press submit. Correct!" if reward else "You press submit. Wrong value."
        else:
            msg = "Nothing happens."
        obs, info = self._obs(msg)
        info["won"] = reward == 1.0
        info["invalid_action"] = msg == "Nothing happens."
        truncated = not terminated and self.t >= self.max_steps
        return obs, reward, terminated, truncated, info


def tasks(split: str = "train") -> list[Task]:
    return make_tasks(split)


def make_env(split: str = "train", **kwargs: Any) -> DialEnv:
    return DialEnv(split=split, **kwargs)


class ExpertPolicy:
    """Always the shortest path: turn toward the target, submit on it."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.target = 0

    def reset(self, task: Task, obs: str, info: dict[str, Any]) -> None:
        self.target = int(task.goal["target"])

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return expert_action(parse_state(info["abstract_state"]) or 0, self.target)


class NoisyPolicy(ExpertPolicy):
    """The expert with a 25% chance of a random action: detours, overshoots and early submits."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self.rng.random() < 0.25:
            return self.rng.choice(ACTIONS)
        return super().act(obs, info)


class RandomPolicy(ExpertPolicy):
    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.rng.choice(info.get("admissible_actions") or list(ACTIONS))


POLICIES = {"oracle": ExpertPolicy, "expert": ExpertPolicy, "noisy": NoisyPolicy, "random": RandomPolicy}
EXPERT_POLICY = "expert"
"""The scripted policy whose episodes are SFT demonstrations (`EnvFamily.EXPERT_POLICY`)."""
EXPLORE_POLICIES = {"noisy": 0.7, "random": 0.3}
"""The exploring scripted policies and their weights, DPO's demonstrations (`EnvFamily.EXPLORE_POLICIES`)."""


def explain(tr: Transition) -> str:
    """Environment-grounded reasoning trace: what the action does to the dial and why the reward is what it is."""
    before, after = parse_state(tr.state), parse_state(tr.next_state)
    target = tr.task.goal.get("target")
    a = " ".join(tr.action.lower().split())
    if a == "submit":
        # The reward comes first, right after the word "reward": a small model copies it from a retrieved example
        # of the same submit (whose outcome is shown as <reward>r</reward>) long before it learns to compare two
        # numbers; the comparison that justifies it follows.
        verdict = "equal" if before == target else "not equal"
        return (f"Submitting ends the episode with reward {tr.reward:g}: the dial shows {before} and the target is "
                f"{target}, {verdict}.")
    if a in ("turn up", "turn down"):
        if before == after:
            return f"The dial is at its limit {before}, so turning {a.split()[1]} changes nothing. Reward 0."
        return (f"Turning {a.split()[1]} moves the dial from {before} to {after}; the target is {target}, the "
                f"episode continues with reward 0.")
    return f"'{tr.action}' is not a dial action, so nothing happens; the dial stays at {before}. Reward 0."
