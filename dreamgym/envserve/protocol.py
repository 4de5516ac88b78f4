"""What an environment server and its clients exchange: OpenEnv's typed action, observation and state models for a
`TextEnv`, and the JSON form of a step's `info`.

Owns: `TextAction`, `TextObservation`, `EpisodeState`, `info_to_json` / `info_from_json`, `Provenance`.
Must not know: servers, transports, environments beyond the `TextEnv` contract (`dreamgym.env`).

A served step is the `TextEnv` 5-tuple spread over OpenEnv's observation: `observation.text` is the observation,
`reward` and `done` (terminated or truncated) are OpenEnv's own fields, `observation.terminated` and
`observation.truncated` keep the two apart, `observation.info` is the step's info in JSON (its `task` as a task
record) and `observation.episode` names the episode: its id, task, seed and provenance (which server, family,
real or synthetic, which experience model and buffer), so any record of a step says where it came from.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from dreamgym.types import Task

MAX_ACTION_CHARS = 16_384
"""Longest action accepted: far above any environment's action (a WebShop search query is tens of characters)."""


class TextAction(Action):
    """One action of a text environment: the text the agent wrote."""

    action: str = Field(max_length=MAX_ACTION_CHARS, description="the agent's action, as text")


class TextObservation(Observation):
    """A text environment's answer to reset or step (`done` and `reward` are OpenEnv's own fields)."""

    text: str = Field(default="", description="the observation")
    terminated: bool = Field(default=False, description="the episode ended by the environment's rules")
    truncated: bool = Field(default=False, description="the episode was cut off (step limit, failure state)")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info (dreamgym.env), in JSON")
    episode: dict[str, Any] = Field(default_factory=dict,
                                    description="episode_id, task, seed and provenance of this episode")


class EpisodeState(State):
    """The session's episode: OpenEnv's `episode_id` and `step_count`, and what the episode is."""

    task: dict[str, Any] | None = Field(default=None, description="the task record, None before the first reset")
    seed: int | None = Field(default=None, description="the reset seed")
    terminated: bool = False
    truncated: bool = False
    provenance: dict[str, Any] = Field(default_factory=dict, description="where the episode's steps come from")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a served episode's steps come from; travels with every observation."""

    server: str
    """This server's id (random per process start)."""
    env: str
    """The environment family."""
    synthetic: bool
    """True: the experience model answers (a dream); False: the real environment."""
    split: str
    """The task split episodes draw from."""
    em: str | None = None
    """The experience-model checkpoint (synthetic only)."""
    buffer: str | None = None
    """The replay buffer's folder (synthetic only, when persistent)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Task):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def info_to_json(info: dict[str, Any]) -> dict[str, Any]:
    """A step's info as JSON: the task as its record, numbers as plain numbers, anything else as its repr."""
    return _jsonable(info)


def info_from_json(data: dict[str, Any]) -> dict[str, Any]:
    """The info a client's `TextEnv` returns: `info_to_json`'s form with the task back as a `Task`."""
    info = dict(data)
    if isinstance(info.get("task"), dict):
        info["task"] = Task.from_dict(info["task"])
    return info
