"""Real beside dream, step by step, for `dreamgym view`'s episode page.

Owns: `Comparison` and `StepPair` (per step: the state, the action, each side's next state, reward and done, the
model's reasoning and the examples it retrieved) and the three ways to build one: `recorded` (an episode as stored:
a real one on the real side, a dream one on the dream side), `replay_in_model` (a real episode's actions replayed in
an experience model, free-running from the real initial state as `dreamgym eval-em` does, or teacher-forced from
each real state) and `replay_in_env` (a recorded dream episode's actions replayed in the real environment from the
same task, reset with the seed every dream starts from); `ModelCache`, which loads each experience-model checkpoint
once with the buffer it was trained against.
Must not know: HTTP, HTML, run folders.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dreamgym.types import Trajectory, Transition

ReplayMode = Literal["free", "forced"]
"""free: the model is fed its own states (a dream of these actions); forced: each step starts from the real state."""


@dataclass
class Side:
    next_state: str
    reward: float
    done: bool
    note: str = ""
    """What else to know: the failure state, a step answered without the model, an episode already over."""


@dataclass
class StepPair:
    index: int
    state: str
    """The state the action was taken in (the real one; in a free-running replay the model's own is `dream_state`)."""
    action: str
    real: Side | None = None
    dream: Side | None = None
    dream_state: str = ""
    reasoning: str = ""
    examples: list[Transition] = field(default_factory=list)


@dataclass
class Comparison:
    episode: Trajectory
    steps: list[StepPair]
    dream_label: str = ""
    """Where the dream side comes from ("" when there is none)."""
    real_label: str = ""
    notes: list[str] = field(default_factory=list)


def _side(step: Any) -> Side:
    return Side(step.next_state, float(step.reward), bool(step.terminated or step.truncated))


def recorded(traj: Trajectory) -> Comparison:
    """The episode as stored: its steps on the side its source says."""
    dream = traj.source == "synthetic"
    steps = [StepPair(i, s.state, s.action, real=None if dream else _side(s), dream=_side(s) if dream else None,
                      reasoning=s.reasoning or "") for i, s in enumerate(traj.steps)]
    return Comparison(traj, steps, dream_label="recorded dream" if dream else "",
                      real_label="" if dream else "recorded real episode")


def replay_in_model(traj: Trajectory, model: Any, label: str, mode: ReplayMode = "free") -> Comparison:
    """The real episode `traj` beside the model's answers to its actions (see `ReplayMode`)."""
    from dreamgym.experience import query_for

    cmp = recorded(traj)
    cmp.dream_label = f"{label}, {'free-running' if mode == 'free' else 'teacher-forced'}"
    h = model.config.history if model.config.use_history else 0
    tid = f"view-{traj.id or traj.task.id}"
    if mode == "forced":
        queries = [query_for(traj.task, s.state, s.action, history=traj.history(i, h), trajectory_id=tid,
                             step_index=i) for i, s in enumerate(traj.steps)]
        for pair, pred in zip(cmp.steps, model.predict(queries, seed=0) if queries else []):
            _fill(pair, pred, pair.state)
        return cmp
    state = traj.initial_state or (traj.steps[0].state if traj.steps else "")
    past: list[tuple[str, str]] = []
    for i, pair in enumerate(cmp.steps):
        q = query_for(traj.task, state, pair.action, history=past[-h:] if h else [], trajectory_id=tid, step_index=i)
        pred = model.predict([q], seed=i)[0]
        _fill(pair, pred, state)
        if pred.failed or pred.done:
            for rest in cmp.steps[i + 1:]:
                rest.dream = Side("", 0.0, True, note="the dream had ended")
            if pred.done and i + 1 < len(cmp.steps):
                cmp.notes.append(f"The model ended the episode at step {i + 1}; the real one went on for "
                                 f"{len(cmp.steps) - i - 1} more step(s).")
            break
        past.append((state, pair.action))
        state = pred.next_state
    else:
        if cmp.steps and cmp.steps[-1].dream and not cmp.steps[-1].dream.done:
            cmp.notes.append("The real episode ended; the model had not ended it.")
    return cmp


def _fill(pair: StepPair, pred: Any, state: str) -> None:
    note = f"failure state: {pred.error}" if pred.failed else ("answered without a model call" if pred.attempts == 0
                                                                else "")
    pair.dream = Side(pred.next_state, float(pred.reward), bool(pred.done), note=note)
    pair.dream_state = state
    pair.reasoning = pred.reasoning or ""
    pair.examples = list(pred.examples or [])


def replay_in_env(traj: Trajectory, model: Any = None) -> Comparison:
    """A recorded dream episode beside the real environment's answers to the same actions, the real environment reset
    to the same task with the seed a dream starts from (`audit.REPLAY_SEED`, not the rollout's seed: ALFWorld draws
    its search order from the reset seed, so the rollout's seed would start the replay elsewhere than the dream).
    With `model`, each step also shows the examples that model retrieves for it."""
    from dreamgym.dream.audit import REPLAY_SEED
    from dreamgym.envs import family

    cmp = recorded(traj)
    try:
        env = family(traj.task.env).make_env(traj.task.split if traj.task.split not in ("", "generated") else "train")
        _, info = env.reset(seed=REPLAY_SEED, options={"task": traj.task})
    except Exception as e:  # noqa: BLE001 - e.g. a curriculum variant the real environment has no game for
        cmp.notes.append(f"The real environment cannot replay this episode: {type(e).__name__}: {e}")
        return cmp
    cmp.real_label = "the real environment, same actions"
    start = info.get("abstract_state", "")
    if traj.steps and " ".join(str(start).split()) != " ".join(traj.steps[0].state.split()):
        cmp.notes.append("The dream started from another state than the real environment's initial state.")
    over = False
    try:
        for pair in cmp.steps:
            if over:
                pair.real = Side("", 0.0, True, note="the real episode had ended")
                continue
            _, reward, term, trunc, info = env.step(pair.action)
            pair.real = Side(str(info.get("abstract_state", "")), float(reward), bool(term or trunc))
            over = bool(term or trunc)
    except Exception as e:  # noqa: BLE001 - a real environment failing mid-episode
        cmp.notes.append(f"The real environment failed: {type(e).__name__}: {e}")
    finally:
        env.close()
    if model is not None and cmp.steps:
        from dreamgym.experience import query_for

        qs = [query_for(traj.task, p.state, p.action, trajectory_id=f"view-{traj.id}", step_index=p.index)
              for p in cmp.steps]
        for p, ex in zip(cmp.steps, model.retrieve(qs)):
            p.examples = ex
    return cmp


class ModelCache:
    """Experience models loaded once per checkpoint (on the CPU unless told), with the buffer each was trained
    against for retrieval. Loading is serialised: two requests for one model load it once."""

    def __init__(self, device: str | None = "cpu"):
        self.device = device
        self._models: dict[Path, Any] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> Any:
        with self._lock:
            if path not in self._models:
                from dreamgym.experience import ExperienceModel, checkpoint_buffer, read_checkpoint_meta

                meta = read_checkpoint_meta(path)
                buf = checkpoint_buffer(path) if meta.get("model", {}).get("use_retrieval", True) else None
                self._models[path] = ExperienceModel.load(path, buffer=buf, device=self.device)
            return self._models[path]
