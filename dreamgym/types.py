"""Plain data types shared by every part of DreamGym: Task, Step, Trajectory, Transition.

Owns: the fields, their JSON form (`to_dict` / `from_dict`) and nothing else.
Must not know: environments, models, storage formats, torch.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Literal

Source = Literal["real", "synthetic"]


def _jsonable(value: Any) -> Any:
    """Best-effort conversion of info payloads to JSON-safe values (dataclasses become dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays (`.item()` fails on arrays)
        return _jsonable(value.tolist())
    return str(value)


def _typed(d: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """`d[name]` (`default` when absent or null, if the field has one), refused with a TypeError naming the field
    when it is not a `kind`: a record with a number for an action or "no" for a flag would otherwise load, and fail
    (or mean something else) only deep inside training."""
    value = d.get(name)
    if value is None and default is not None:
        return default
    if kind is bool and isinstance(value, int) and value in (0, 1):  # 0/1 from tools that write flags as numbers
        return bool(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TypeError(f"field {name!r} must be of type {names}, got {type(value).__name__}")
    return value


@dataclass
class Task:
    """One thing the agent is asked to do.

    `goal` is the structured form the environment family understands (WebShop: attributes, options,
    price bound; ALFWorld: task type and objects). `parent_id`/`iteration` record curriculum lineage.
    """

    id: str
    env: str
    instruction: str
    goal: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    parent_id: str | None = None
    iteration: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        missing = [k for k in ("id", "env", "instruction") if k not in d]
        if missing:  # a silent default would turn a broken record into a task with id {}
            raise KeyError(f"task record lacks required field(s) {', '.join(missing)}")
        for name in ("id", "env", "instruction"):
            _typed(d, name, str)
        return cls(**{f.name: d.get(f.name, f.default if f.default is not dataclasses.MISSING else {})
                      for f in dataclasses.fields(cls)})


@dataclass
class Step:
    """One environment step: the state the agent saw, what it did, and what came back."""

    state: str
    action: str
    reward: float
    terminated: bool
    truncated: bool
    next_state: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    reasoning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        for name in ("state", "action"):
            _typed(d, name, str)
        for name in ("terminated", "truncated"):
            _typed(d, name, bool)
        _typed(d, "reward", (int, float))
        return cls(state=d["state"], action=d["action"], reward=float(d["reward"]),
                   terminated=bool(d["terminated"]), truncated=bool(d["truncated"]),
                   next_state=d.get("next_state", ""), info=dict(d.get("info") or {}),
                   reasoning=d.get("reasoning"))


@dataclass
class Trajectory:
    """A whole episode with provenance: where it came from (`source`), seed and policy version."""

    task: Task
    steps: list[Step]
    source: Source = "real"
    seed: int | None = None
    policy: str = ""
    policy_version: str = ""
    initial_state: str = ""
    won: bool = False
    start_time: float = field(default_factory=time.time)
    wall_time_s: float = 0.0
    id: str = ""

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        d = _jsonable(self)
        d["total_reward"] = self.total_reward
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        if d.get("source", "real") not in ("real", "synthetic"):
            raise ValueError(f"trajectory source must be 'real' or 'synthetic', got {d.get('source')!r}")
        _typed(d, "won", bool, False)
        if not isinstance(d["steps"], list):
            raise TypeError(f"field 'steps' must be a list, got {type(d['steps']).__name__}")
        return cls(task=Task.from_dict(d["task"]), steps=[Step.from_dict(s) for s in d["steps"]],
                   source=d.get("source", "real"), seed=d.get("seed"), policy=d.get("policy", ""),
                   policy_version=str(d.get("policy_version", "")), initial_state=d.get("initial_state", ""),
                   won=bool(d.get("won", False)), start_time=float(d.get("start_time", 0.0)),
                   wall_time_s=float(d.get("wall_time_s", 0.0)), id=d.get("id", ""))

    def history(self, i: int, window: int | None = None) -> list[tuple[str, str]]:
        """The (state, action) pairs of the steps before step `i`, oldest first: the last `window` of them, or all
        (None). A family's reward rule reads the whole of it (`grounded_outcome`); the experience model a window."""
        return [(p.state, p.action) for p in self.steps[(0 if window is None else max(0, i - window)):i]]

    def transitions(self, history: int = 4) -> list[Transition]:
        """Split into experience-model transitions, each carrying the last `history` (state, action) pairs."""
        out: list[Transition] = []
        for i, s in enumerate(self.steps):
            window = self.history(i, history)
            out.append(Transition(task=self.task, history=window, state=s.state, action=s.action,
                                  next_state=s.next_state, reward=s.reward,
                                  done=bool(s.terminated or s.truncated), reasoning=s.reasoning,
                                  source=self.source, seed=self.seed, policy_version=self.policy_version,
                                  trajectory_id=self.id, step_index=i))
        return out


@dataclass
class Transition:
    """The unit the experience model learns and the replay buffer stores: (s_t, a_t) -> (s_{t+1}, r_{t+1})."""

    task: Task
    history: list[tuple[str, str]]
    state: str
    action: str
    next_state: str
    reward: float
    done: bool
    reasoning: str | None = None
    source: Source = "real"
    seed: int | None = None
    policy_version: str = ""
    trajectory_id: str = ""
    step_index: int = 0
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        d = _jsonable(self)
        d["history"] = [list(h) for h in self.history]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Transition:
        return cls(task=Task.from_dict(d["task"]), history=[(h[0], h[1]) for h in d.get("history", [])],
                   state=d["state"], action=d["action"], next_state=d["next_state"],
                   reward=float(d["reward"]), done=bool(d["done"]), reasoning=d.get("reasoning"),
                   source=d.get("source", "real"), seed=d.get("seed"),
                   policy_version=str(d.get("policy_version", "")),
                   trajectory_id=d.get("trajectory_id", ""), step_index=int(d.get("step_index", 0)),
                   time=float(d.get("time", 0.0)))
