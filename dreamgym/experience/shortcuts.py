"""Environment shortcuts of the experience model: outcomes given without a model call, and answers rejected
because they contradict the action.

Owns: the `OutcomeResolver` seam that `ExperienceModel` composes, and `FamilyShortcuts`, its implementation from
the family hooks under the config switches `copy_hidden_outcomes` (`hidden_outcome_key`: copy a real transition
of the same hidden world, with the incremental table of the buffer's real transitions by key),
`derive_determined_outcomes` (`determined_outcome`: the state alone fixes the answer) and `reject_contradictions`
(`outcome_contradiction`). Copied and derived answers are written as observations and folded into the state by
the family's `model_observation` / `state_after`, so a family without both hooks gets no shortcut.
Must not know: models, generation, prompts, torch, training, any concrete environment (families are reached
only through `dreamgym.experience.hooks`).

The seam, as `ExperienceModel.predict` uses it:

- `resolve(queries, config, buffer) -> {query index: Prediction}` runs before generation; the queries it answers
  are not sent to the model, and their predictions have `attempts=0` and `text=""`.
- `contradiction(query, next_state, config) -> str` runs on every parsed answer (`next_state` completed):
  a non-empty reason makes the answer malformed, so it is counted (`contradicted`) and re-generated.

Both take the model's current config and buffer at each call, so a caller that swaps `model.config` (the
inference ablations of `dreamgym eval-em`) switches the shortcuts with it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.format import Prediction
from dreamgym.experience.hooks import family_hooks
from dreamgym.types import Transition

if TYPE_CHECKING:
    from dreamgym.replay.buffer import ReplayBuffer

log = logging.getLogger(__name__)


class OutcomeResolver(Protocol):
    """What the experience model asks of environment shortcuts (see the module docstring)."""

    def resolve(self, queries: Sequence[Transition], config: ExperienceModelConfig,
                buffer: ReplayBuffer | None) -> dict[int, Prediction]:
        """Predictions, by index into `queries`, for the queries answered without the model."""
        ...

    def contradiction(self, query: Transition, next_state: str, config: ExperienceModelConfig) -> str:
        """Why `next_state` cannot answer `query` ("contradicts the action: ..."), or "" when it can."""
        ...


def _hidden_key(tr: Transition) -> tuple[str, str] | None:
    key = family_hooks(tr.task.env).hidden_outcome_key(tr.task, tr.state, tr.action) if tr.state.strip() else None
    return (tr.task.env, key) if key else None


def _determined(q: Transition) -> str | None:
    hooks = family_hooks(q.task.env)
    return hooks.determined_outcome(q.task, q.state, q.action) if q.state.strip() else None


class FamilyShortcuts:
    """The `OutcomeResolver` of the environment families' hooks, switched by the experience model's config.

    `env` filters the buffer's real transitions the hidden-outcome table reads (the model's `env`); `stats` is
    the counter it reports into (the model's own): `hidden_copied`, `determined`, and `retrieval_errors` when the
    buffer cannot be read."""

    def __init__(self, env: str | None, stats: Counter[str]):
        self.env = env
        self.stats = stats
        # (env, the family's key) -> the first real transition recorded under it, and how many of the buffer's
        # real transitions (in insertion order) the table has read.
        self._hidden: dict[tuple[str, str], Transition] = {}
        self._hidden_read = 0

    def _hidden_table(self, buffer: ReplayBuffer) -> dict[tuple[str, str], Transition]:
        """The real transitions of the buffer by hidden-outcome key, read incrementally (the buffer only appends;
        a smaller buffer than last time means it was rebuilt, and the table is too)."""
        try:
            real = buffer.transitions(env=self.env, real_only=True)
        except Exception as e:  # noqa: BLE001 - the copy is an optimisation of fidelity; the model still answers
            self.stats["retrieval_errors"] += 1
            log.warning("experience model: reading the buffer failed (%s: %s)", type(e).__name__, e)
            return {}
        if len(real) < self._hidden_read:
            self._hidden, self._hidden_read = {}, 0
        for tr in real[self._hidden_read:]:
            key = _hidden_key(tr)
            if key is not None:
                self._hidden.setdefault(key, tr)
        self._hidden_read = len(real)
        return self._hidden

    def resolve(self, queries: Sequence[Transition], config: ExperienceModelConfig,
                buffer: ReplayBuffer | None) -> dict[int, Prediction]:
        """Predictions, by query index, that a real transition (`copy_hidden_outcomes`) or the state itself
        (`derive_determined_outcomes`) fixes."""
        copy_from = buffer if config.copy_hidden_outcomes else None
        if copy_from is None and not config.derive_determined_outcomes:
            return {}
        from dreamgym.experience.reasoning import EnvTeacher

        table = self._hidden_table(copy_from) if copy_from is not None else {}
        out: dict[int, Prediction] = {}
        for i, q in enumerate(queries):
            hooks = family_hooks(q.task.env)
            if not hooks.writes_observations:
                continue
            observe, after = hooks.model_observation, hooks.state_after
            key = _hidden_key(q) if copy_from is not None else None
            hit = table.get(key) if key is not None else None
            derived = _determined(q) if hit is None and config.derive_determined_outcomes else None
            if hit is not None:
                tr = dataclasses.replace(q, next_state=after(q.state, observe(hit.next_state)), reward=hit.reward,
                                         done=hit.done)
                self.stats["hidden_copied"] += 1
            elif derived is not None:
                # Reward and end are not the state's to say here: the synthetic env grounds them (reward_from).
                tr = dataclasses.replace(q, next_state=after(q.state, derived), reward=0.0, done=False)
                self.stats["determined"] += 1
            else:
                continue
            # The trace is re-derived for this state by the teacher the model was trained on (the recorded one
            # speaks of the other episode's goal conditions); a family without one gives an empty trace.
            reasoning = EnvTeacher().explain([tr])[0] if config.use_reasoning else ""
            out[i] = Prediction(tr.next_state, float(tr.reward), bool(tr.done), reasoning, attempts=0, text="",
                                examples=[hit] if hit is not None else [])
        return out

    def contradiction(self, query: Transition, next_state: str, config: ExperienceModelConfig) -> str:
        """Why `next_state` cannot answer `query` (the family's `outcome_contradiction`, with
        `reject_contradictions`), or ""."""
        reason = (family_hooks(query.task.env).outcome_contradiction(query.task, query.state, query.action, next_state)
                  if config.reject_contradictions else "")
        return f"contradicts the action: {reason}" if reason else ""
