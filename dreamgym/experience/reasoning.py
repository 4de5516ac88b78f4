"""Reasoning traces for experience-model training: teachers that explain transitions, and `annotate`.

Owns: the `Teacher` interface (a batch of transitions in, one explanation per transition out), the
environment-grounded teacher (`EnvTeacher`, which asks the environment family's own `explain`), the LLM teacher
(`LLMTeacher`, any backend of the LLM seam, with the prompt documented below), and `annotate` /
`annotate_trajectories`, which attach the traces to transitions or trajectory steps.
Must not know: torch, trainers, the replay buffer, how the experience model formats its prompts.

A reasoning trace explains why action a_t in state s_t leads to s_{t+1} and reward r_{t+1} (docs/concepts.md).
The paper uses a strong teacher LLM; on these machines the environment-grounded teacher is the default because
it is exact and free, and the LLM teacher is there for environments whose family cannot explain itself.

Bad input is never fatal: a teacher that fails on one transition yields an empty trace for it (counted in
`teacher.stats["failed"]`); the transition keeps its data and trains without a trace.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Protocol, runtime_checkable

from dreamgym.envs import family
from dreamgym.llm.base import LLM, ChatRequest, SamplingParams
from dreamgym.types import Trajectory, Transition


@runtime_checkable
class Teacher(Protocol):
    """Writes one reasoning trace per transition (an empty string where it could not)."""

    stats: Counter

    def explain(self, transitions: list[Transition]) -> list[str]:
        ...


class EnvTeacher:
    """Environment-grounded teacher: `family(transition.task.env).explain(transition)`.

    `env` forces one family for all transitions (useful when tasks carry a different `env` label)."""

    def __init__(self, env: str | None = None):
        self.env = env
        self.stats: Counter = Counter()

    def explain(self, transitions: list[Transition]) -> list[str]:
        out = []
        for tr in transitions:
            try:
                text = family(self.env or tr.task.env).explain(tr)
                text = " ".join(str(text).split())
            except Exception:  # noqa: BLE001 - one bad transition must not stop the annotation run
                text = ""
            self.stats["explained" if text else "failed"] += 1
            out.append(text)
        return out


LLM_TEACHER_SYSTEM = (
    "You explain the dynamics of a text environment. Given a task, the current state, the action taken, the "
    "resulting next state, the reward and whether the episode ended, explain in one to three sentences why "
    "this action in this state leads to this next state and this reward: name what changed, which goal "
    "conditions hold now, and why the reward has its value. Answer with the explanation only."
)
"""System message of the LLM teacher. The user message is built by `llm_teacher_request`."""


def llm_teacher_request(tr: Transition, max_state_chars: int = 1500) -> ChatRequest:
    """The documented LLM-teacher prompt for one transition:

    system: LLM_TEACHER_SYSTEM
    user:   Task: <instruction>
            State:
            <s_t>
            Action: <a_t>
            Next state:
            <s_t+1>
            Reward: <r>   Episode ended: yes|no
            Why does the action lead to this next state and reward?
    """
    clip = lambda s: s if len(s) <= max_state_chars else s[:max_state_chars] + " …"  # noqa: E731
    user = (f"Task: {tr.task.instruction}\nState:\n{clip(tr.state)}\nAction: {tr.action}\n"
            f"Next state:\n{clip(tr.next_state)}\nReward: {tr.reward:g}   Episode ended: "
            f"{'yes' if tr.done else 'no'}\nWhy does the action lead to this next state and reward?")
    return [{"role": "system", "content": LLM_TEACHER_SYSTEM}, {"role": "user", "content": user}]


_TAGS = re.compile(r"</?think>", re.I)


class LLMTeacher:
    """LLM teacher over any backend of the LLM seam; one `generate` call per `batch_size` transitions.

    The answer is cleaned (think tags removed, whitespace collapsed, cut at `max_chars`); an empty answer or a
    backend error gives an empty trace, counted in `stats["failed"]`."""

    def __init__(self, llm: LLM, params: SamplingParams | None = None, batch_size: int = 32,
                 max_chars: int = 600):
        self.llm = llm
        self.params = params or SamplingParams(temperature=0.0, max_tokens=160)
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.stats: Counter = Counter()

    def explain(self, transitions: list[Transition]) -> list[str]:
        out: list[str] = []
        for i in range(0, len(transitions), self.batch_size):
            chunk = transitions[i:i + self.batch_size]
            try:
                comps = self.llm.generate([llm_teacher_request(t) for t in chunk], self.params)
                texts = [c.text for c in comps]
            except Exception:  # noqa: BLE001 - a dead backend costs the traces of this chunk, not the run
                texts = [""] * len(chunk)
            for text in texts:
                text = " ".join(_TAGS.sub(" ", text or "").split())[: self.max_chars]
                self.stats["explained" if text else "failed"] += 1
                out.append(text)
        return out


def annotate(transitions: list[Transition], teacher: Teacher, overwrite: bool = False) -> list[Transition]:
    """Copies of `transitions` with `reasoning` filled by `teacher` (kept as is where already set, unless
    `overwrite`). An empty trace leaves `reasoning` None."""
    todo = [i for i, t in enumerate(transitions) if overwrite or not t.reasoning]
    texts = teacher.explain([transitions[i] for i in todo]) if todo else []
    out = list(transitions)
    for i, text in zip(todo, texts):
        out[i] = dataclasses.replace(transitions[i], reasoning=text or None)
    return out


def annotate_trajectories(trajectories: list[Trajectory], teacher: Teacher,
                          overwrite: bool = False) -> list[Trajectory]:
    """Fill `Step.reasoning` of every step (in place, and returned) so traces are stored with the data."""
    flat = [(traj, i, tr) for traj in trajectories for i, tr in enumerate(traj.transitions(history=0))]
    todo = [(traj, i, tr) for traj, i, tr in flat if overwrite or not traj.steps[i].reasoning]
    texts = teacher.explain([tr for _, _, tr in todo]) if todo else []
    for (traj, i, _), text in zip(todo, texts):
        traj.steps[i].reasoning = text or None
    return trajectories
