"""Supervised fine-tuning of the agent on demonstration trajectories (the oracle/expert data).

Owns: `SFTConfig`, turning a `Trajectory` into per-turn (prompt ids, target ids) examples in exactly the
format the policy is prompted with during rollouts (`dreamgym.agent.build_messages` + `format_response`;
`demonstration_examples` for a whole file, which the online update's SFT anchor reads too),
and `SFTTrainer` — token-level cross-entropy on the assistant tokens only, one optimiser step per batch of turns
(the fit loop, shuffled and resumable mid-epoch, is `dreamgym.trainers.offline`'s, shared with DPO), optionally
stopped by a measured criterion (`replay_success`), and, when that criterion is never met, ending with the weights
of the check that met it most nearly (`keep_best`).
Must not know: concrete environments (a family's `admissible_from_state` may be passed in as a function),
presets, how the trajectories were collected.

State: the weights, the optimiser and the fit loop's epoch and batch position (`dreamgym.trainers.offline`);
`stop_at` is checked again after a resume (the step and value it stopped at are not kept); the best check's step,
value and weights are kept (the weights not under FSDP, where each rank holds a shard: there a resumed fit tracks the
best from the resume on).
Not in the paper: the stop at a replay criterion and the best check kept (docs/decisions.md, "Quickstart SFT stops
at a measured criterion").

Example for step i of a trajectory: the prompt is `build_messages(task, [(s_j, a_j) for j < i], s_i,
admissible(s_i))` rendered by the backend's chat template with the generation prompt; the target is
`<think>{thought}</think><action>{a_i}</action>` followed by the tokenizer's eos token, where the thought is
`step.info["agent_thought"]` when the data has one (the policy's own reasoning) and empty otherwise —
`Step.reasoning` is the experience model's explanation of the transition and is never used as the agent's
thought (it describes the outcome, which the agent cannot know).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dreamgym.agent import AgentConfig, build_messages, format_response
from dreamgym.config import ranged
from dreamgym.utils import fsdp
from dreamgym.utils.metric_names import EVAL
from dreamgym.utils.metrics import MetricsLogger
from dreamgym.trainers.common import TrainerConfig, set_lr, supervised_step
from dreamgym.trainers.offline import FitTrainer
from dreamgym.types import Trajectory

AdmissibleFn = Callable[[str], list[str]]


@dataclass
class SFTConfig:
    epochs: int = ranged(3, ge=1)
    """Passes over the examples."""
    batch_size: int = ranged(32, ge=1)
    """Examples (turns) per optimiser step."""
    only_won: bool = True
    """Use only successful trajectories."""
    max_seq_tokens: int = ranged(2048, ge=1)
    """Examples longer than this (prompt + target) are skipped and counted."""
    log_every: int = ranged(10, ge=1)
    """Log metrics every this many optimiser steps."""
    max_steps: int = ranged(0, ge=0)
    """Stop after this many optimiser steps in all, mid-epoch if need be (0: run every epoch)."""
    stop_at: float = ranged(0.0, ge=0, le=1)
    """Stop once `replay_success` on the training demonstrations reaches this, checked every `check_every` steps
    (0: never; `epochs` and `max_steps` still cap the run)."""
    check_every: int = ranged(20, ge=1)
    """Optimiser steps between two checks of `stop_at`."""
    keep_best: bool = True
    """With `stop_at` never reached by the end of the fit: end with the weights of the check with the highest
    `replay_success` when it beats the last weights'."""


@dataclass
class Example:
    prompt_ids: list[int]
    target_ids: list[int]


def turn_examples(traj: Trajectory, backend: Any, agent: AgentConfig,
                  admissible_fn: AdmissibleFn | None = None) -> list[Example]:
    """One (prompt, target) example per step of `traj`, in the rollout prompt format (see module docstring)."""
    tok = backend.tokenizer
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    out = []
    history: list[tuple[str, str]] = []
    for step in traj.steps:
        admissible = step.info.get("admissible_actions") if isinstance(step.info, dict) else None
        if admissible is None and admissible_fn is not None:
            admissible = admissible_fn(step.state)
        msgs = build_messages(traj.task, history, step.state, admissible, agent)
        thought = step.info.get("agent_thought", "") if isinstance(step.info, dict) else ""
        target = format_response(step.action, thought or "")
        out.append(Example(backend.prompt_ids(msgs), list(tok(target, add_special_tokens=False)["input_ids"]) + eos))
        history.append((step.state, step.action))
    return out


def demonstration_examples(trajectories: Sequence[Trajectory], backend: Any, agent: AgentConfig,
                           admissible_fn: AdmissibleFn | None = None, *, only_won: bool = True,
                           max_seq_tokens: int = 2048) -> tuple[list[Example], dict[str, float]]:
    """`turn_examples` of every (won, with `only_won`) trajectory with steps, those longer than `max_seq_tokens` left
    out; plus counts of what was used and skipped. SFT's data and the online update's SFT anchor
    (`dreamgym.trainers.anchor`) alike."""
    used = [t for t in trajectories if t.steps and (t.won or not only_won)]
    exs: list[Example] = []
    for t in used:
        exs += turn_examples(t, backend, agent, admissible_fn)
    kept = [e for e in exs if len(e.prompt_ids) + len(e.target_ids) <= max_seq_tokens]
    return kept, {"trajectories_used": float(len(used)), "examples": float(len(kept)),
                  "examples_too_long": float(len(exs) - len(kept))}


class SFTTrainer(FitTrainer[Example]):
    algo = "sft"

    def __init__(self, backend: Any, config: SFTConfig, common: TrainerConfig, *,
                 logger: MetricsLogger | None = None, admissible_fn: AdmissibleFn | None = None):
        super().__init__(backend, common, logger=logger)
        self.config: SFTConfig = config
        self.admissible_fn = admissible_fn
        self.stopped_at: dict[str, float] = {}  # {"step", "replay_success"} when `stop_at` ended the run
        self._demos: list[Trajectory] = []  # the demonstrations `stop_at` is measured on
        self.best: dict[str, float] = {}  # {"step", "replay_success"} of the best check so far (`keep_best`)
        self._last_check: tuple[int, float] = (-1, 0.0)  # (step, replay_success) of the latest check
        self._best_weights: list[torch.Tensor] | None = None  # a CPU copy of self.params at that check
        self.kept_best: dict[str, float] = {}  # best + "last_replay_success" when the fit ended on the best weights
        self._build_optimizer()

    def examples(self, trajectories: Sequence[Trajectory]) -> tuple[list[Example], dict[str, float]]:
        """All training examples, plus counts of what was used and skipped."""
        return demonstration_examples(trajectories, self.backend, self.common.agent, self.admissible_fn,
                                      only_won=self.config.only_won, max_seq_tokens=self.config.max_seq_tokens)

    def replay_success(self, trajectories: Sequence[Trajectory]) -> float:
        """The mean over `trajectories` of the probability that the policy, sampling at temperature 1 without
        history of its own, writes every demonstrated reply of the trajectory exactly: the product of its turns'
        reply probabilities (the eos after a reply is left out: rollouts stop at `</action>`). No environment step
        is taken. A lower bound on the sampled policy's success on those tasks (a detour can still win), and a
        measure of the decisions it was shown, so it moves with what the policy does rather than with how many
        steps it took to get there."""
        eos = self.backend.tokenizer.eos_token_id
        per_traj: list[list[tuple[tuple[int, ...], tuple[int, ...]]]] = []
        for t in trajectories:
            exs = turn_examples(t, self.backend, self.common.agent, self.admissible_fn)
            per_traj.append([(tuple(e.prompt_ids), tuple(e.target_ids[:-1] if e.target_ids[-1:] == [eos]
                                                         else e.target_ids)) for e in exs])
        # With a short history many turns share one prompt: each distinct (prompt, reply) is scored once.
        keys = list(dict.fromkeys(k for turns in per_traj for k in turns))
        if not keys:
            return 0.0
        logps = self.learner_logprobs([list(k[0]) for k in keys], [list(k[1]) for k in keys])
        logp = {k: sum(lp) for k, lp in zip(keys, logps)}
        return sum(math.exp(sum(logp[k] for k in turns)) for turns in per_traj) / len(per_traj)

    # -- the fit loop's parts (dreamgym.trainers.offline)
    def _items(self, trajectories: Sequence[Trajectory]) -> tuple[list[Example], dict[str, float]]:
        self._demos = [t for t in trajectories if t.steps and (t.won or not self.config.only_won)]
        return self.examples(trajectories)

    def _batch_size(self) -> int:
        return self.config.batch_size

    def _step(self, items: list[Example], idx: list[int]) -> dict[str, float]:
        return self.train_step([items[i] for i in idx])

    def _max_steps(self) -> int:
        return self.config.max_steps

    def _stop_after(self) -> dict[str, float] | None:
        """`stop_at`: every `check_every` steps, `replay_success` on the demonstrations (logged as
        `eval/replay_success`); the fit ends once it reaches `stop_at` (the step and value are kept in `stopped_at`)."""
        if not self.config.stop_at or self.global_step % self.config.check_every:
            return None
        replay = self.replay_success(self._demos)
        self._last_check = (self.global_step, replay)
        if self.logger is not None:
            self.logger.log(self.global_step, {"replay_success": replay}, prefix=EVAL)
        if self.config.keep_best and replay > self.best.get("replay_success", -1.0):
            self.best = {"step": float(self.global_step), "replay_success": replay}
            self._best_weights = [p.detach().to("cpu", copy=True) for p in self.params]
        if replay < self.config.stop_at:
            return None
        self.stopped_at = {"step": float(self.global_step), "replay_success": replay}
        return {"replay_success": replay}

    def _ended(self, out: dict[str, float]) -> dict[str, float]:
        """`keep_best`: a fit that ran to its end without reaching `stop_at` ends on the best check's weights if
        they replay the demonstrations more often than the last ones (a constant learning rate keeps moving a fit
        past its best; recorded in `kept_best` and in the figures returned)."""
        if self._best_weights is None:
            return out
        step, last = self._last_check
        if step != self.global_step:  # the last step was no check
            last = self.replay_success(self._demos)
        if self.best["replay_success"] <= last:
            return out
        with torch.no_grad():
            for p, w in zip(self.params, self._best_weights):
                p.copy_(w.to(p.device))
        self.kept_best = {**self.best, "last_replay_success": last}
        if self.logger is not None:
            self.logger.log(self.global_step, {"replay_success": self.best["replay_success"]}, prefix=EVAL)
        return {**out, "kept_best_step": self.best["step"], "replay_success": self.best["replay_success"]}

    # -- checkpoints: the best check travels with the fit's position
    def _extra_state(self) -> dict[str, Any]:
        sharded = fsdp.is_sharded(self.model)
        return {**super()._extra_state(), "best": self.best,
                "best_weights": None if sharded else self._best_weights}

    def _load_extra_state(self, extra: dict[str, Any], run: dict[str, Any]) -> None:
        super()._load_extra_state(extra, run)
        if extra.get("best_weights") is not None:
            self.best = dict(extra.get("best", {}))
            self._best_weights = list(extra["best_weights"])

    def train_step(self, batch: Sequence[Example]) -> dict[str, float]:
        """One optimiser step on `batch`: token-level mean cross-entropy over the target tokens."""
        self.model.train()
        lr = set_lr(self._opt, self.common.optim, self.global_step)
        st = supervised_step(self.model, self._opt, self.params, self.common.optim,
                             [(e.prompt_ids, e.target_ids) for e in batch], self.pad_id, self.device, entropy=True)
        self.global_step += 1
        self.model.eval()
        return {"loss": st["loss"], "entropy": st["entropy"], "grad_norm": st["grad_norm"], "lr": lr,
                "tokens_per_s": st["tokens_per_s"]}

