"""The synthetic environment: a `TextEnv` whose dynamics are the reasoning experience model.

Owns: episodes inside the experience model (task choice, initial state, step limit, admissibility of actions,
the failure state as an episode end), batched stepping of many synthetic episodes with one model call
(`SyntheticBatcher`, shared by the rollout engine's `step_batch` and environment servers), and writing every
synthetic transition into the replay buffer.
Must not know: torch or any model library (the experience model is used through `predict`), trainers, any
concrete environment (families are reached through `dreamgym.envs.family`: `tasks`, `make_env`,
`admissible_from_state`, the step limit `MAX_STEPS`, and the hooks `canonical_state`, `noop_state` and
`grounded_outcome`).

Behaviour (trainers cannot tell it from a real environment, see `dreamgym.env`):
- `reset(seed=, options={"task": Task})`: the task comes from `options` or from the pool by seed. The initial
  abstract state is the real environment's (family `make_env` + `reset` with that task, cached per task) when
  `initial_state` is "real" or "auto" and that works, else the model's answer to `[reset]`. A curriculum variant
  starts on its parent's real page, showing its own goal (family `show_goal`).
- An episode is truncated after `max_steps` steps: the family's step limit (`EnvFamily.step_limit`, that of its
  real environment) unless the caller sets one; a run's lower limit (`rollout.max_episode_steps`) is the rollout
  engine's to apply, as for a real environment.
- Observations are abstract states (`info["abstract_state"]` equals the state; `raw_obs` equals the obs). A
  family with `canonical_state` has the model's states rewritten through it (derived lines recomputed).
- An action that the state does not offer (by the family's `admissible_from_state`) is answered, without a
  model call, with the state the real environment shows after a no-op (family `noop_state`; without it, the
  same state and a notice) (`invalid_action="noop"`), or sent to the model (`invalid_action="model"`, the
  paper's failure feedback, only as good as the model's training).
- A malformed model output that survives the retries ends the episode as a truncation with reward 0 and
  `info["em_failure"] = True` (the experience model's failure state); `info["won"]` is reward 1 at termination.
- Reward and termination come from the model's `<reward>` and `done` (`reward_from="model"`, the paper's
  design), or from the family's own reward rule applied to the states the model wrote (`grounded_outcome`;
  `reward_from="state"`, "auto" uses it when the family has one): e.g. an ALFWorld episode wins and ends exactly
  when the written state meets the goal, a WebShop purchase scores the catalog product the item page shows.
  Why: the model credited ALFWorld wins that its own final state contradicted (docs/log/05-alfworld-first-dream.md).
  `info["model_won"]` keeps the model's own verdict, so the disagreement stays measurable.
- Before the reward rule reads it, each answer gets the parts of the next state its action alone fixes written in
  by the family's `ground_state` (`ground_states`, on by default; MiniWoB++: the text a fill types, the option a
  select_option chooses, the box or radio button a click checks, and what no action changes: the names of the
  elements the page showed, the text of the fields the action does not fill), counted in
  `stats["states_grounded"]`; both steps are `dreamgym.envs.family.dream_answer`, which `dreamgym eval-em
  --grounded` scores too. Why: a tiny model wrote other names and bullet counts in
  the typed text's place, so the rule scored correct forms as wrong and the dream taught the policy to stop typing
  (docs/results/miniwob.md).
- Determinism: greedy decoding by default. With sampling and `shared_noise` (the default), each query's sampling
  seed is derived from its episode id (task, reset seed) and the action, so the members of a GRPO group, which
  share the reset seed, meet the same sampling noise when they take the same action: common random numbers, the
  dream's counterpart of the real group sharing one game. Why: where the state hides something (what an ALFWorld
  receptacle holds), independent noise gives each member its own sampled world, and the group-relative advantage
  then ranks luck rather than actions. `shared_noise=False` seeds each call from the episodes' ids and step counts
  instead (the members' noise is independent). Each episode's transitions carry an id derived from (task, seed),
  and retrieval excludes the query's own id, so replaying a seed does not retrieve its own earlier steps.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.envs import family
from dreamgym.envs.family import dream_answer, is_admissible
from dreamgym.utils.seeds import text_seed
from dreamgym.types import Task, Transition

REAL_START_SEED = 0
"""The real environment's reset seed for a dream's initial state (one per task, whatever the rollout's seed): a
replay of a dream in the real environment (the audit, the viewer) resets with it to start where the dream did."""

StepResult = tuple[str, float, bool, bool, dict[str, Any]]
"""What `TextEnv.step` returns: (obs, reward, terminated, truncated, info)."""


def _norm(a: str) -> str:
    return " ".join(a.strip().lower().split())


def noise_seed(episode_id: str, action: str) -> int:
    """The sampling seed of a synthetic step under shared noise: a function of the episode id (task and reset
    seed, shared by a GRPO group) and the normalised action only, so it does not depend on the step count,
    the history or what else is in the batch."""
    return text_seed(episode_id, _norm(action))


class SyntheticEnv(TextEnv):
    """`SyntheticEnv(model, buffer=None, tasks=None, env=None, ...)`; `buffer` defaults to `model.buffer`.

    Set `batched_step`: the rollout engine calls `SyntheticEnv.step_batch(envs, actions)` once per turn and the
    episodes' `batcher` (a `SyntheticBatcher`, by default the one this module shares) predicts all live episodes
    sharing a model in one `model.predict` call."""

    batched_step = True
    is_synthetic = True

    def __init__(self, model: Any, buffer: Any = None, tasks: list[Task] | None = None, *, env: str | None = None,
                 split: str = "train", max_steps: int | None = None, initial_state: str = "auto",
                 add_to_buffer: bool = True, invalid_action: str = "noop", policy_version: str = "",
                 reward_from: str = "model", shared_noise: bool = True, batcher: SyntheticBatcher | None = None,
                 ground_states: bool = True):
        super().__init__()
        if initial_state not in ("auto", "real", "model"):
            raise ValueError(f"initial_state must be 'auto', 'real' or 'model', got {initial_state!r}")
        if invalid_action not in ("noop", "model"):
            raise ValueError(f"invalid_action must be 'noop' or 'model', got {invalid_action!r}")
        if reward_from not in ("model", "state", "auto"):
            raise ValueError(f"reward_from must be 'model', 'state' or 'auto', got {reward_from!r}")
        self.model = model
        self.buffer = buffer if buffer is not None else getattr(model, "buffer", None)
        name = env or getattr(model, "env", None) or (tasks[0].env if tasks else None)
        if not name:
            raise ValueError("SyntheticEnv needs the environment family (env=...) or a model/tasks that name it")
        self.env_family = name
        self.family = family(name)
        self.hooks = self.family.hooks
        # The family's reward rule decides reward and end ("auto": where the family has one).
        self.grounded = reward_from != "model" and self.hooks.grounds_outcomes
        if reward_from == "state" and not self.grounded:
            raise ValueError(f"reward_from='state': the {name} family has no grounded_outcome")
        if self.grounded:
            # A rule that cannot take the episode's history would fail on every step, and each failure leaves the
            # step to the model (the guard below is for states the rule cannot read): say so once, here.
            try:
                inspect.signature(self.hooks.grounded_outcome).bind(None, "", "", "", [])
            except TypeError as e:
                raise TypeError(f"the {name} family's grounded_outcome must take (task, state, action, next_state, "
                                f"history): {e}") from None
        # The family writes into each answer what the action alone fixes (MiniWoB++: the typed text, the chosen
        # option, the clicked box) and what it leaves as it was (element names, the other fields' text).
        self.ground_states = ground_states and self.hooks.grounds_states
        self.split = split
        self.tasks = list(tasks) if tasks is not None else list(self.family.tasks(split))
        if not self.tasks:
            raise ValueError(f"SyntheticEnv: no tasks for {name}/{split}")
        self.initial_state_mode = initial_state
        self.add_to_buffer = add_to_buffer
        self.invalid_action = invalid_action
        self.policy_version = policy_version
        self.shared_noise = shared_noise
        self.batcher = batcher if batcher is not None else DEFAULT_BATCHER
        self.max_steps = self.family.step_limit() if max_steps is None else max_steps
        self._real_envs: dict[str, Any] = {}
        self._init_cache: dict[tuple[str, str], str] = {}
        self.task: Task = self.tasks[0]
        self.state = ""
        self.t = 0
        self.history: list[tuple[str, str]] = []
        self.episode_id = ""
        self.seed_value: int | None = None
        self._init_failed = False
        self.stats = {"resets": 0, "steps": 0, "model_steps": 0, "invalid_actions": 0, "em_failures": 0,
                      "real_initial_states": 0, "model_initial_states": 0, "wins_overruled": 0, "wins_granted": 0,
                      "states_grounded": 0}

    # ------------------------------------------------------------------------------------------ reset

    def _real_env(self, split: str) -> Any:
        if split not in self._real_envs:
            try:
                self._real_envs[split] = self.family.make_env(split)
            except Exception:  # noqa: BLE001 - no real env: the model writes initial states instead
                self._real_envs[split] = None
        return self._real_envs[split]

    def _real_initial_state(self, task: Task) -> str | None:
        # A curriculum variant's split is "generated", which no real environment has: it starts in the synthetic
        # env's own split, where its goal fields (e.g. ALFWorld's game) were drawn.
        real = self._real_env(self.split if task.split in ("", "generated") else task.split)
        if real is None:
            return None
        try:
            _, info = real.reset(seed=REAL_START_SEED, options={"task": task})
            state = info.get("abstract_state")
            if not isinstance(state, str) or not state.strip():
                return None
            return self.hooks.show_goal(task, state) if task.split == "generated" else state
        except Exception:  # noqa: BLE001 - e.g. a curriculum variant the real env has no game for
            return None

    def _initial_state(self, task: Task, seed: int | None) -> tuple[str, bool]:
        key = (task.id, task.instruction)
        if key in self._init_cache:
            return self._init_cache[key], True
        state = None
        if self.initial_state_mode in ("auto", "real"):
            state = self._real_initial_state(task)
            if state is not None:
                self.stats["real_initial_states"] += 1
        if state is None and self.initial_state_mode in ("auto", "model"):
            pred = self.model.initial_states([task], seed=seed, trajectory_ids=[self.episode_id])[0]
            self.stats["model_initial_states"] += 1
            if pred.failed:
                return pred.next_state, False
            state = self._canonical(pred.next_state)
        if state is None:
            return "[failure] No initial state: the real environment could not reset to this task.", False
        self._init_cache[key] = state
        return state, True

    def _canonical(self, state: str) -> str:
        """The model's state in the family's canonical layout (families that define `canonical_state`; others
        unchanged). Why: derived lines (ALFWorld's "Unexplored") must match what the real environment writes even
        when the model was trained before they existed or miscopies them."""
        try:
            return self.hooks.canonical_state(state)
        except Exception:  # noqa: BLE001 - a state the parser cannot read stays as the model wrote it
            return state

    def _info(self, **extra: Any) -> dict[str, Any]:
        adm = None if self._init_failed else list(self.family.admissible_from_state(self.state))
        return {"task": self.task, "admissible_actions": adm, "abstract_state": self.state, "won": False,
                "synthetic": True, "step": self.t, **extra}

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.get("task")
        if task is None:
            task = self.tasks[self.np_random.integers(len(self.tasks))] if seed is None else \
                self.tasks[seed % len(self.tasks)]
        self.task = task
        self.seed_value = seed
        # Stable per (task, seed): retrieval excludes it, so a replayed seed never sees its own old steps.
        self.episode_id = (f"syn-{task.id}-s{seed}" if seed is not None else f"syn-{task.id}-{uuid.uuid4().hex[:10]}")
        self.t = 0
        self.history = []
        self.state, ok = self._initial_state(task, seed)
        self._init_failed = not ok
        self.stats["resets"] += 1
        return self.state, self._info(em_failure=not ok)

    # ------------------------------------------------------------------------------------------- step

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.batcher.step([self], [action])[0]

    def _advance(self) -> None:
        self.t += 1
        self.stats["steps"] += 1

    def _noop(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.stats["invalid_actions"] += 1
        self.history.append((self.state, action))
        self._advance()
        shown = self.hooks.noop_state(self.state, action)
        if shown is None:  # the family cannot say what the real one shows: the state stays, the notice is in obs
            obs = f"{self.state}\n[notice] Nothing happens: {action.strip()!r} is not an available action."
        else:
            # The state the real environment would show. Keeping the old one instead gave the policy a prompt the
            # real game never shows, the same one it had just failed on (docs/log/16-noop-state.md).
            self.state = obs = shown
        return obs, 0.0, False, self.t >= self.max_steps, self._info(invalid_action=True, raw_obs=obs)

    def _failure_end(self, reason: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._advance()
        self.stats["em_failures"] += 1
        return self.state, 0.0, False, True, self._info(em_failure=True, em_error=reason)

    @classmethod
    def _step_batch(cls, envs: list[TextEnv],
                    actions: list[str]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
        synth: list[SyntheticEnv] = []
        for e in envs:
            assert isinstance(e, SyntheticEnv)
            synth.append(e)
        results: list[Any] = [None] * len(synth)
        by_batcher: dict[int, list[int]] = {}
        for i, e in enumerate(synth):
            by_batcher.setdefault(id(e.batcher), []).append(i)
        for idx in by_batcher.values():
            outs = synth[idx[0]].batcher.step([synth[i] for i in idx], [actions[i] for i in idx])
            for i, out in zip(idx, outs):
                results[i] = out
        return results

    # The batcher's seam: one episode's side of a batched step, in the order `SyntheticBatcher.step` calls them.
    def answer_without_model(self, action: str) -> StepResult | None:
        """This step's answer when it needs no model call (the episode has no initial state, or the action is
        not admissible under `invalid_action="noop"`), else None."""
        if self._init_failed:
            return self._failure_end("no initial state")
        if self.invalid_action == "noop" and not is_admissible(action, self.family.admissible_from_state(self.state)):
            return self._noop(action)
        return None

    def query(self, action: str) -> Transition:
        """The experience-model query for `action` in the current state (history cut to the model's window)."""
        h = int(getattr(getattr(self.model, "config", None), "history", 4))
        return Transition(task=self.task, history=list(self.history[-h:]) if h else [], state=self.state,
                          action=action, next_state="", reward=0.0, done=False, source="synthetic",
                          seed=self.seed_value, trajectory_id=self.episode_id, step_index=self.t)

    def apply(self, query: Transition, pred: Any) -> tuple[StepResult, Transition | None]:
        """Advance the episode by the model's prediction for `query`; returns the step's answer and the completed
        transition to add to the buffer (None when nothing is to be added)."""
        if pred.failed:
            return self._failure_end(pred.error), None
        self.stats["model_steps"] += 1
        before = self.state
        self.history.append((self.state, query.action))
        # The family's hooks over the answer: its canonical layout, what the action alone fixes written in, then
        # reward and end from its rule where it decides (the episode's steps before this one: `history` already
        # holds (before, action)).
        answer = dream_answer(self.hooks, self.task, before, query.action, pred.next_state, float(pred.reward),
                              bool(pred.done), self.history[:-1], ground_states=self.ground_states,
                              rule=self.grounded)
        self.state = answer.next_state
        self.stats["states_grounded"] += answer.state_grounded
        reward, terminated = answer.reward, answer.done
        # The model's own win verdict, where a rule could overrule it (None without one).
        model_won = bool(pred.done) and float(pred.reward) >= 1.0 if self.grounded else None
        if answer.rule is not None:
            won = terminated and reward >= 1.0
            self.stats["wins_overruled"] += bool(model_won) and not won
            self.stats["wins_granted"] += won and not model_won
        # The buffer keeps the state the policy was shown, so synthetic and real transitions read alike.
        query.next_state, query.reward, query.done, query.reasoning = self.state, reward, terminated, pred.reasoning
        self._advance()
        truncated = not terminated and self.t >= self.max_steps
        won = terminated and reward >= 1.0
        extra = {} if model_won is None else {"model_won": model_won}
        result = (self.state, reward, terminated, truncated,
                  self._info(won=won, reasoning=pred.reasoning, em_failure=False, **extra))
        if not (self.add_to_buffer and self.buffer is not None):
            return result, None
        query.policy_version = self.policy_version
        return result, query

    def close(self) -> None:
        for real in self._real_envs.values():
            if real is not None:
                try:
                    real.close()
                except Exception:  # noqa: BLE001
                    pass
        self._real_envs = {}
        super().close()



class SyntheticBatcher:
    """Steps many synthetic episodes with one `model.predict` call per (experience model, noise mode).

    The one place a synthetic step meets the model and the buffer: episodes say what they need (`query`), the
    batcher makes the call and hands each episode its prediction (`apply`), then adds the batch's transitions to
    each buffer once. `SyntheticEnv.step_batch` (the rollout engine's path) and an environment server's gathering
    of concurrent sessions both end here, so a step comes out the same whichever way it was batched. Where the
    model runs is the model's business: the batcher only calls `predict`.

    A step whose transition reached the buffer carries `info["buffered"] = True` (False when the add failed); the
    buffer's `add` returns after its write is durable, so a caller that saw `buffered` knows the transition
    survives a crash of this process. Counters (`stats`) say how large the model batches were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # counters only: callers serialise model and buffer use themselves
        self.stats = {"steps": 0, "model_calls": 0, "model_rows": 0, "largest_batch": 0, "buffer_errors": 0}

    def step(self, envs: Sequence[SyntheticEnv], actions: Sequence[str]) -> list[StepResult]:
        """One step of each episode (none of them over), in order: `apply`'s answers and `answer_without_model`'s."""
        results: list[StepResult | None] = [None] * len(envs)
        by_model: dict[tuple[int, bool], list[int]] = {}
        for i, (e, a) in enumerate(zip(envs, actions)):
            out = e.answer_without_model(a)
            if out is not None:
                results[i] = out
            else:
                by_model.setdefault((id(e.model), e.shared_noise), []).append(i)
        for idx in by_model.values():
            batch = [envs[i] for i in idx]
            model = batch[0].model
            queries = [e.query(actions[i]) for e, i in zip(batch, idx)]
            if batch[0].shared_noise:
                preds = model.predict(queries, seeds=[noise_seed(q.trajectory_id, q.action) for q in queries])
            else:
                # Same episodes (seeds, step counts) -> same sampling seed -> same observations.
                key = "|".join(f"{q.trajectory_id}:{q.step_index}" for q in queries)
                preds = model.predict(queries, seed=text_seed(key))
            new: dict[int, tuple[Any, list[Transition], list[dict[str, Any]]]] = {}
            for e, q, p, i in zip(batch, queries, preds, idx):
                results[i], tr = e.apply(q, p)
                if tr is not None:
                    entry = new.setdefault(id(e.buffer), (e.buffer, [], []))
                    entry[1].append(tr)
                    entry[2].append(results[i][4])  # type: ignore[index]
            for buf, trs, infos in new.values():
                try:
                    buf.add(trs)
                    ok = True
                except Exception:  # noqa: BLE001 - losing buffer growth must not end the rollout
                    ok = False
                    for e in batch:
                        e.stats["buffer_errors"] = e.stats.get("buffer_errors", 0) + 1
                for info in infos:
                    info["buffered"] = ok
                if not ok:
                    with self._lock:
                        self.stats["buffer_errors"] += 1
            with self._lock:
                self.stats["model_calls"] += 1
                self.stats["model_rows"] += len(queries)
                self.stats["largest_batch"] = max(self.stats["largest_batch"], len(queries))
        with self._lock:
            self.stats["steps"] += len(envs)
        return results  # type: ignore[return-value]


DEFAULT_BATCHER = SyntheticBatcher()
"""The batcher of every `SyntheticEnv` not given its own."""
