"""What one rollout is: the settings episodes are played under (`RolloutConfig`), what was played (`Turn`,
`Episode`, the end reasons) and how a batch of episodes is summarised (`rollout_metrics`).

Owns: those types, the record the rollout engine (`dreamgym.rl.rollout`) writes, the trainers learn from and the
evaluation counts. Plain data: it plays nothing.
Must not know: environments, models, trainers, the engine itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dreamgym.agent import parse_thought
from dreamgym.config import ranged
from dreamgym.types import Step, Task, Trajectory

# End reasons. The first group are outcomes of the policy's own behaviour (trained on); the rest are failures
# of the environment, the budget or the context window (never trained on, always counted).
POLICY_ENDS = ("terminated", "truncated", "max_turns", "invalid_action")
FAILURE_ENDS = ("reset_error", "env_error", "step_timeout", "episode_timeout", "budget", "generation_error",
                "prompt_too_long")


@dataclass
class RolloutConfig:
    max_episode_steps: int | None = ranged(None, ge=1)
    """Episode step limit, real or dreamt (None: the family's `MAX_STEPS`, which it can only lower)."""
    max_new_tokens: int = ranged(64, ge=1)
    """Tokens the policy may generate per turn."""
    max_prompt_tokens: int = ranged(1536, ge=1)
    """Longest prompt; older history turns are dropped to fit."""
    temperature: float = ranged(1.0, ge=0)
    """Sampling temperature of the policy during rollouts (0 = greedy)."""
    top_p: float = ranged(1.0, gt=0, le=1)
    """Nucleus sampling mass during rollouts."""
    step_timeout_s: float = ranged(60.0, gt=0)
    """A single environment step (or reset) that takes longer ends its episode ("step_timeout")."""
    episode_timeout_s: float = ranged(1800.0, gt=0)
    """An episode whose environment has spent longer than this in reset and steps (not waiting for the policy or
    other episodes) ends with "episode_timeout"."""
    env_workers: int = ranged(32, ge=1)
    """Threads stepping real environments concurrently."""
    on_invalid_action: Literal["end", "pass"] = "end"
    """Reply without a parseable action: end the episode with reward 0, or pass the raw text to the env."""
    ground_actions: float = ranged(0.0, ge=0, le=1)
    """Map an action the environment does not list onto the most similar admissible one when their string
    similarity (0..1) is at least this; 0 turns grounding off."""



@dataclass
class Turn:
    """One policy turn: the exact tokens sampled and what the environment answered."""

    state: str
    """The (abstract) state the policy was shown."""
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """Sampling log-probabilities of `completion_ids` (temperature-1 model log-probs)."""
    text: str
    action: str | None
    """The action sent to the environment: the parsed one, or its grounded form (None: the reply had none)."""
    generated_action: str | None = None
    """The action as the reply wrote it, when grounding replaced it (None otherwise)."""
    finish_reason: str = "stop"
    history_shown: int = 0
    """How many history turns the prompt actually held (fewer than H when the prompt had to be cut)."""
    admissible_actions: list[str] | None = None
    observation: str = ""
    next_state: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    stepped: bool = False
    """Whether the environment was stepped with this turn's action."""


@dataclass
class Episode:
    task: Task
    seed: int
    group: int
    """Episodes of the same task slot (same task, same seed) share a group id: the GRPO group."""
    member: int
    source: Literal["real", "synthetic"] = "real"
    policy_version: str = ""
    initial_observation: str = ""
    initial_state: str = ""
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    end_reason: str = ""
    error: str | None = None
    invalid_actions: int = 0
    grounded_actions: int = 0
    """Turns whose action was replaced by the most similar admissible one (`RolloutConfig.ground_actions`)."""
    noop_steps: int = 0
    """Steps the environment reported as doing nothing (`info["invalid_action"]`: "Nothing happens.", or the
    synthetic env's no-op for a command its state does not admit, which costs no model call)."""
    model_claimed_wins: int = 0
    """Synthetic steps where the experience model itself credited a win (`info["model_won"]`, reported when the
    synthetic env grounds success in the state, `reward_from="state"`); a claim that did not end the episode
    was overruled by the state."""
    wall_time_s: float = 0.0
    env_time_s: float = 0.0
    """Seconds its environment spent in reset and steps (a batched step's time is shared among its episodes)."""
    _start: float = field(default=0.0, repr=False)

    @property
    def done(self) -> bool:
        return self.end_reason != ""

    @property
    def reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def trainable(self) -> bool:
        """True when the episode ended by the policy's own behaviour and has at least one turn."""
        return self.end_reason in POLICY_ENDS and len(self.turns) > 0

    @property
    def history(self) -> list[tuple[str, str]]:
        return [(t.state, t.action if t.action is not None else t.text) for t in self.turns]

    def to_trajectory(self, policy: str = "agent") -> Trajectory:
        """The episode as a `dreamgym.types.Trajectory` (only turns that reached the environment become steps).

        Step.state/next_state are abstract states; Step.info keeps the observation, the raw reply, the agent's
        thought (`agent_thought`), the admissible actions and, on the last step, the end reason.
        """
        steps = []
        stepped = [t for t in self.turns if t.stepped]
        for i, t in enumerate(stepped):
            info: dict[str, Any] = {"observation": t.observation, "reply": t.text,
                                    "agent_thought": parse_thought(t.text), "admissible_actions": t.admissible_actions}
            if t.generated_action is not None:
                info["generated_action"] = t.generated_action
            if i == len(stepped) - 1:
                info.update(end_reason=self.end_reason, won=self.won)
            steps.append(Step(state=t.state, action=t.action if t.action is not None else t.text.strip(),
                              reward=t.reward, terminated=t.terminated, truncated=t.truncated,
                              next_state=t.next_state, info=info))
        return Trajectory(task=self.task, steps=steps, source=self.source, seed=self.seed, policy=policy,
                          policy_version=self.policy_version, initial_state=self.initial_state, won=self.won,
                          start_time=time.time() - self.wall_time_s, wall_time_s=self.wall_time_s,
                          id=f"{self.policy_version or policy}:{self.task.id}:s{self.seed}:g{self.group}m{self.member}")



def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Scalars describing a batch of episodes. Success/reward/length are over the trainable episodes (those
    the policy is responsible for); failures are counted separately."""
    ok = [e for e in episodes if e.trainable]
    n_turns = sum(len(e.turns) for e in episodes)
    n_stepped = sum(t.stepped for e in episodes for t in e.turns)
    out: dict[str, float] = {
        "episodes": float(len(episodes)),
        "episodes_trainable": float(len(ok)),
        "episodes_failed": float(len(episodes) - len(ok)),
        "success_rate": sum(e.won for e in ok) / len(ok) if ok else 0.0,
        "mean_reward": sum(e.reward for e in ok) / len(ok) if ok else 0.0,
        "mean_turns": sum(len(e.turns) for e in ok) / len(ok) if ok else 0.0,
        "invalid_action_rate": sum(e.invalid_actions for e in episodes) / n_turns if n_turns else 0.0,
        "grounded_action_rate": sum(e.grounded_actions for e in episodes) / n_turns if n_turns else 0.0,
        "noop_step_rate": sum(e.noop_steps for e in episodes) / n_stepped if n_stepped else 0.0,
        # Dream episodes where the model credited a win the state did not support (0 outside reward_from="state").
        "overruled_win_rate": sum(bool(e.model_claimed_wins) and not e.won for e in ok) / len(ok) if ok else 0.0,
        "turns": float(n_turns),
    }
    for reason in POLICY_ENDS + FAILURE_ENDS:
        n = sum(e.end_reason == reason for e in episodes)
        if n:
            out[f"end_{reason}"] = float(n)
    return out
