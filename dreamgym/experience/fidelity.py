"""Fidelity of the experience model on held-out real trajectories, and the `dreamgym eval-em` command.

Owns: the fidelity metrics (teacher-forced next-state token F1 and exact match, reward accuracy, done
accuracy; free-running false-success and self-contradiction rates; the contradictions are
`dreamgym.experience.consistency`'s), the fidelity gate, and the report (table + JSON).
Must not know: torch, trainers, how the experience model is trained, any family's state format.

Metrics (the paper's theory, arXiv:2511.03773: reward accuracy and domain-consistent transitions are what matter):
- teacher-forced: each held-out transition is predicted from its real state, real history and action;
  `state_f1` is the bag-of-whitespace-tokens F1 of predicted vs real next state (SQuAD style), `state_em` exact match
  after whitespace normalisation, `reward_acc`/`done_acc` exact agreement (reward after the model's own reward mapping,
  done = the real `terminated`), `failure_rate` the share of failure states and `format_validity` its complement
  (answers parsed without the failure state), `reward1_recall` and `reward1_precision` of the predicted reward 1 against
  the real one, and the collapse detector `distinct_next_states`: distinct predicted next states per distinct (state,
  action) scored, beside the same ratio of the real next states (`distinct_next_states_real`); a model that writes one
  sentence for every action has a high F1 on similar states but a ratio near 1 / number of steps. `copy_state_f1` and
  `copy_state_em` score the current state itself as the prediction: the floor a model must beat, since F1 credits the
  lines a step leaves unchanged (on MiniWoB++ copying scores F1 0.91, exact match 0.15). `[reset]` transitions are left
  out (they measure initial-state generation, reported as `init_f1`). `reward1_by_task` gives reward-1 precision and
  recall per task (the family's `task_kind` of the held-out transitions' task: MiniWoB++'s page, else the task id) with
  their counts (true positives, predicted and actual positives), for the tasks with any (`reward1_by_task`): where the
  model credits wins the real environment does not give, or misses the ones it does; the terminal shows the worst few
  (`worst_reward1_tasks`). `by_action` splits F1 / exact match / reward accuracy by the action's verb (`action_kind`:
  `search`, `click`, `go`, `take`, ...), because one average hides which transitions the model cannot predict (on
  WebShop: results pages after a search, which depend on a search engine the model never sees).
- free-running: each held-out episode is replayed from its real initial state with its real actions, feeding
  the model its own predicted states and history, until the model says done or the actions run out.
  `false_success` = share of really failed episodes in which the model declared success (reward 1);
  `outcome_acc` = share of episodes whose predicted success equals the real one; `contradiction_rate` =
  share of episodes with at least one self-contradiction, `contradictions_per_step` per predicted step.
- failure states counted over every prediction of an evaluation (`predictions`, `failures`, `failure_rate_all`,
  teacher-forced steps, initial states and free-running steps together: what the model's own counters count), and
  `backend_failures`, those whose last attempt was a backend error; `eval-em` stops with exit code 1 when they are
  most predictions (a server it cannot use, not a model to judge).
- the fidelity gate (`gate`): the held-out figures `dreamgym train-em` reports and the reasons a model is not fit to
  dream in (`dreamgym.experience.train.HeldOutConfig` holds the thresholds).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dreamgym import checks, provenance
from dreamgym.config import CommandParser, ConfigError, at_least, fail
from dreamgym.experience import (
    RESET_ACTION,
    ExperienceModel,
    Prediction,
    em_transitions,
    query_for,
    read_checkpoint_meta,
)
from dreamgym.experience.checkpoint import usable_checkpoint
from dreamgym.experience.consistency import checkers_for
from dreamgym.experience.train import HeldOutConfig
from dreamgym.utils.filecheck import output_path
from dreamgym.utils.paths import atomic_write_text
from dreamgym.types import Trajectory, Transition

# ---------------------------------------------------------------------------------------------- text metrics


def _tokens(s: str) -> list[str]:
    return s.split()


def token_f1(pred: str, gold: str) -> float:
    p, g = _tokens(pred), _tokens(gold)
    if not p and not g:
        return 1.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


def exact_match(pred: str, gold: str) -> bool:
    return _tokens(pred) == _tokens(gold)


# -------------------------------------------------------------------------------------------------- eval


def _batched(model: ExperienceModel, queries: list[Transition], batch_size: int) -> list[Prediction]:
    out: list[Prediction] = []
    for i in range(0, len(queries), batch_size):
        out += model.predict(queries[i:i + batch_size], seed=i)
    return out


def action_kind(action: str) -> str:
    """The verb of an action: the text before the first `[` or `(` when no space comes before it (`search[...]` ->
    `search`, the web family's `click('13')` -> `click`), else its first word (`go to desk 1` -> `go`)."""
    a = action.strip()
    head = (a.split(maxsplit=1) or [""])[0]
    cut = min((i for i in (head.find("["), head.find("(")) if i > 0), default=-1)
    if cut > 0:
        head = head[:cut]
    return head.strip().lower() or "(empty)"


def outcome_figures(preds: list[Prediction], steps: list[Transition]) -> dict[str, float | None]:
    """Reward-1 recall and precision and done accuracy of `preds` against the real `steps` (None: nothing to
    measure, no real or no predicted reward 1, no step)."""
    pos = [(p, t) for p, t in zip(preds, steps) if t.reward >= 1.0]
    said = [(p, t) for p, t in zip(preds, steps) if p.reward >= 1.0]
    return {"reward1_recall": sum(p.reward >= 1.0 for p, _ in pos) / len(pos) if pos else None,
            "reward1_precision": sum(t.reward >= 1.0 for _, t in said) / len(said) if said else None,
            "done_acc": sum(p.done == t.done for p, t in zip(preds, steps)) / len(steps) if steps else None}


def teacher_forced(model: ExperienceModel, transitions: list[Transition], batch_size: int = 32,
                   left_to_model: Callable[[Transition], bool] | None = None,
                   take: Callable[[Transition, Prediction], Prediction] | None = None) -> dict[str, Any]:
    """One-step predictions from real inputs (see the module docstring). With `left_to_model` (a step whose reward
    and end the dream takes from the model, not from the family's rule) also `outcome_figures` over those steps
    alone, under "model_outcomes" (with their count, "model_outcome_steps"). With `take` every answer is scored as
    it turns it (`dream_taker`: the answer the dream steps by)."""
    steps = [t for t in transitions if t.action != RESET_ACTION]
    resets = [t for t in transitions if t.action == RESET_ACTION]
    preds = _batched(model, steps, batch_size)
    if take is not None:
        preds = [take(t, p) for t, p in zip(steps, preds)]
    # One score per step, aggregated over all steps and per action verb.
    f1 = [token_f1(p.next_state, t.next_state) for p, t in zip(preds, steps)]
    em = [exact_match(p.next_state, t.next_state) for p, t in zip(preds, steps)]
    rew = [abs(p.reward - t.reward) < 1e-6 for p, t in zip(preds, steps)]
    n = max(1, len(steps))
    failures = sum(p.failed for p in preds)
    res: dict[str, Any] = {
        "n": len(steps),
        "state_f1": sum(f1) / n,
        "state_em": sum(em) / n,
        "reward_acc": sum(rew) / n,
        "done_acc": sum(p.done == t.done for p, t in zip(preds, steps)) / n,
        "failure_rate": failures / n,
        "failures": failures,
        "format_validity": 1.0 - failures / n if steps else None,
        "copy_state_f1": sum(token_f1(t.state, t.next_state) for t in steps) / n,
        "copy_state_em": sum(exact_match(t.state, t.next_state) for t in steps) / n,
    }
    kinds: dict[str, list[int]] = {}
    for i, t in enumerate(steps):
        kinds.setdefault(action_kind(t.action), []).append(i)
    res["by_action"] = {k: {"n": len(ix), "state_f1": sum(f1[i] for i in ix) / len(ix),
                            "state_em": sum(em[i] for i in ix) / len(ix),
                            "reward_acc": sum(rew[i] for i in ix) / len(ix)}
                        for k, ix in sorted(kinds.items(), key=lambda kv: -len(kv[1]))}
    res.update({k: v for k, v in outcome_figures(preds, steps).items() if k != "done_acc"})
    if left_to_model is not None:
        mine = [(p, t) for p, t in zip(preds, steps) if left_to_model(t)]
        res["model_outcome_steps"] = len(mine)
        res["model_outcomes"] = outcome_figures([p for p, _ in mine], [t for _, t in mine])
    res["reward1_by_task"] = reward1_by_task(steps, preds)
    res.update(distinct_next_states(steps, preds))
    res["init_n"], res["init_failures"] = len(resets), 0
    if resets:
        rp = _batched(model, resets, batch_size)
        res["init_f1"] = sum(token_f1(p.next_state, t.next_state) for p, t in zip(rp, resets)) / len(resets)
        res["init_failures"] = sum(p.failed for p in rp)
    return res


def reward1_by_task(steps: list[Transition], preds: list[Prediction]) -> dict[str, dict[str, Any]]:
    """Reward-1 precision and recall per task kind (the family's `task_kind`: MiniWoB++'s page, whose instances differ
    only in the seed; elsewhere the task's id), with the counts they come from: `n` steps, `tp` steps both the model and
    the real environment gave reward 1, `predicted` the model did, `actual` the environment did; `precision` tp /
    predicted and `recall` tp / actual (None without a denominator). Only the tasks with a predicted or actual reward 1
    (the others add nothing to either figure), ordered worst first: most false wins (predicted - tp), then most missed
    ones (actual - tp), then by id."""
    from dreamgym.envs import family

    rows: dict[str, dict[str, Any]] = {}
    for p, t in zip(preds, steps):
        kind = family(t.task.env).hooks.task_kind(t.task)
        r = rows.setdefault(kind, {"n": 0, "tp": 0, "predicted": 0, "actual": 0})
        said, real = p.reward >= 1.0, t.reward >= 1.0
        r["n"] += 1
        r["tp"] += said and real
        r["predicted"] += said
        r["actual"] += real
    for r in rows.values():
        r["precision"] = r["tp"] / r["predicted"] if r["predicted"] else None
        r["recall"] = r["tp"] / r["actual"] if r["actual"] else None
    kept = [(k, r) for k, r in rows.items() if r["predicted"] or r["actual"]]
    kept.sort(key=lambda kv: (-(kv[1]["predicted"] - kv[1]["tp"]), -(kv[1]["actual"] - kv[1]["tp"]), kv[0]))
    return dict(kept)


WORST_TASKS = 5
"""Tasks the terminal's reward-1 table shows (the report's JSON holds them all)."""


def worst_reward1_tasks(by_task: dict[str, dict[str, Any]], n: int = WORST_TASKS) -> list[str]:
    """The terminal's table of `reward1_by_task` (already worst first): its first `n` tasks that have a false or a
    missed win, one line each, under a heading that says how many of how many; [] when no task has either."""
    bad = [(k, r) for k, r in by_task.items() if r["tp"] < max(r["predicted"], r["actual"])]
    if not bad:
        return []

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    width = max(len("task"), *(len(k) for k, _ in bad[:n]))
    lines = [f"reward 1 by task, worst {min(n, len(bad))} of {len(bad)} with a false or missed win "
             f"({len(by_task)} with any):",
             f"  {'task':<{width}} {'steps':>5} {'tp':>4} {'pred':>4} {'real':>4} {'prec':>5} {'recall':>6}"]
    lines += [f"  {k:<{width}} {r['n']:>5} {r['tp']:>4} {r['predicted']:>4} {r['actual']:>4} "
              f"{pct(r['precision']):>5} {pct(r['recall']):>6}" for k, r in bad[:n]]
    return lines


def distinct_next_states(steps: list[Transition], preds: list[Prediction]) -> dict[str, float | None]:
    """The collapse detector: distinct next states per distinct (state, action), predicted and real (states
    compared after whitespace normalisation; failure states left out of the predicted ones)."""
    pairs = {(" ".join(t.state.split()), " ".join(t.action.split())) for t in steps}
    if not pairs:
        return {"distinct_next_states": None, "distinct_next_states_real": None}
    predicted = {" ".join(p.next_state.split()) for p in preds if not p.failed}
    real = {" ".join(t.next_state.split()) for t in steps}
    return {"distinct_next_states": len(predicted) / len(pairs), "distinct_next_states_real": len(real) / len(pairs)}


@dataclasses.dataclass
class _Replay:
    """One episode being replayed inside the model by `free_running`."""
    traj: Trajectory
    id: str
    state: str
    past: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    t: int = 0
    live: bool = True
    success: bool = False
    contradictions: list[str] = dataclasses.field(default_factory=list)
    failed: bool = False


def dream_taker(env: str) -> Callable[[Transition, Prediction, list[tuple[str, str]]], Prediction]:
    """The answer a dream steps by, from the model's `Prediction` for a real step and the episode's earlier (state,
    action) pairs: `dreamgym.envs.family.dream_answer` with the family's `ground_state` and reward rule, as a
    dream with its defaults (`dream.ground_states`, `dream.reward_from=auto`) takes them. A failure state stays one.
    Why: the model's raw answers are not what the policy learns from where the family grounds them, so their
    figures alone under- or over-state the dream's fidelity (MiniWoB++: the rule decides most rewards)."""
    from dreamgym.envs.family import dream_answer
    from dreamgym.experience.hooks import family_hooks

    hooks = family_hooks(env)

    def take(t: Transition, p: Prediction, history: list[tuple[str, str]]) -> Prediction:
        if p.failed:
            return p
        a = dream_answer(hooks, t.task, t.state, t.action, p.next_state, p.reward, p.done, history,
                         ground_states=hooks.grounds_states, rule=hooks.grounds_outcomes)
        return dataclasses.replace(p, next_state=a.next_state, reward=a.reward, done=a.done)

    return take


def free_running(model: ExperienceModel, trajectories: list[Trajectory], env: str,
                 batch_size: int = 32, grounded: bool = False) -> dict[str, Any]:
    """Whole-episode replays inside the model, all episodes stepped together (see the module docstring); with
    `grounded`, each answer as the dream takes it (`dream_taker`, the episode's whole history)."""
    take = dream_taker(env) if grounded else None
    checks = checkers_for(env)
    h = model.config.history
    eps = [_Replay(traj=traj, id=f"eval-{traj.id or n}", state=traj.initial_state or traj.steps[0].state)
           for n, traj in enumerate(trajectories) if traj.steps]
    steps_predicted = 0
    while True:
        live = [e for e in eps if e.live]
        if not live:
            break
        for i in range(0, len(live), batch_size):
            chunk = live[i:i + batch_size]
            qs = [query_for(e.traj.task, e.state, e.traj.steps[e.t].action,
                            history=e.past[-h:] if h else [], trajectory_id=e.id, step_index=e.t)
                  for e in chunk]
            preds = model.predict(qs, seed=steps_predicted)
            if take is not None:
                preds = [take(q, p, e.past) for e, q, p in zip(chunk, qs, preds)]
            for e, q, p in zip(chunk, qs, preds):
                steps_predicted += 1
                if p.failed:
                    e.failed, e.live = True, False
                    continue
                for c in checks:
                    e.contradictions += c(e.past, e.state, q.action, p.next_state)
                e.past.append((e.state, q.action))
                e.state = p.next_state
                e.t += 1
                if p.reward >= 1.0:
                    e.success = True
                if p.done or e.t >= len(e.traj.steps):
                    e.live = False
    failed_real = [e for e in eps if not e.traj.won]
    n = max(1, len(eps))
    return {
        "episodes": len(eps),
        "false_success": (sum(e.success for e in failed_real) / len(failed_real)) if failed_real else None,
        "outcome_acc": sum(e.success == bool(e.traj.won) for e in eps) / n,
        "contradiction_rate": sum(bool(e.contradictions) for e in eps) / n,
        "contradictions_per_step": sum(len(e.contradictions) for e in eps) / max(1, steps_predicted),
        "episode_failure_rate": sum(e.failed for e in eps) / n,
        "fr_predictions": steps_predicted,
        "fr_failures": sum(e.failed for e in eps),  # a failure state ends its replay: one per failed episode
        "examples": [c for e in eps for c in e.contradictions][:10],
    }


def evaluate(model: ExperienceModel, trajectories: list[Trajectory], env: str, *, max_transitions: int = 0,
             max_episodes: int = 0, batch_size: int = 32, grounded: bool = False) -> dict[str, Any]:
    """Both parts of the fidelity report for one model (with its current config switches); with `grounded`, of
    its answers as the dream takes them (`dream_taker`)."""
    cfg = model.config
    take = None
    if grounded:
        # The rule reads the whole episode, as in a dream; a transition's own history is cut to the model's window.
        longest = max((len(traj.steps) for traj in trajectories), default=0)
        whole = {(tr.trajectory_id, tr.step_index): tr.history
                 for tr in em_transitions(trajectories, history=longest, initial_states=False)}
        taker = dream_taker(env)

        def take(t: Transition, p: Prediction) -> Prediction:
            return taker(t, p, list(whole.get((t.trajectory_id, t.step_index), t.history)))
    trs = em_transitions(trajectories, history=cfg.history, binary_reward=cfg.binary_reward)
    steps = [t for t in trs if t.action != RESET_ACTION]
    resets = [t for t in trs if t.action == RESET_ACTION]
    if max_transitions:  # the cap counts real steps; initial states get a quarter of it on top
        steps, resets = steps[:max_transitions], resets[:max(1, max_transitions // 4)]
    trs = steps + resets
    t0 = time.perf_counter()
    backend_before = model.stats["backend_failures"]
    tf = teacher_forced(model, trs, batch_size, take=take)
    t1 = time.perf_counter()
    fr = free_running(model, trajectories[:max_episodes] if max_episodes else trajectories, env, batch_size,
                      grounded=grounded)
    predictions = tf["n"] + tf["init_n"] + fr["fr_predictions"]
    failures = tf["failures"] + tf["init_failures"] + fr["fr_failures"]
    return {**tf, **fr, "predictions": predictions, "failures": failures,
            "failure_rate_all": failures / predictions if predictions else None,
            "backend_failures": model.stats["backend_failures"] - backend_before,
            "tf_time_s": t1 - t0, "fr_time_s": time.perf_counter() - t1,
            "switches": {"retrieval": cfg.use_retrieval, "reasoning": cfg.use_reasoning, "history": cfg.use_history}}


COLUMNS = [("state_f1", "F1"), ("state_em", "EM"), ("reward_acc", "rew acc"), ("done_acc", "done acc"),
           ("failure_rate_all", "fail"), ("false_success", "false succ"), ("outcome_acc", "outcome"),
           ("contradiction_rate", "contra")]
"""The table's columns: (report key, heading). `fail` is over every prediction of the evaluation, as the failure
count under each table and the model's own counters in the JSON (`model_stats`)."""


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    width = max([len(k) for k in rows] + [5])
    head = f"{'model':<{width}} " + " ".join(f"{c:>10}" for _, c in COLUMNS)
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        vals = [r.get(k) for k, _ in COLUMNS]
        lines.append(f"{name:<{width}} " + " ".join(f"{v:>10.3f}" if isinstance(v, float) else f"{'-':>10}"
                                                  for v in vals))
    for name, r in rows.items():  # where `fail` comes from: every part of the evaluation predicts
        if "predictions" in r:
            lines.append(f"{name}: failure states {r['failures']} of {r['predictions']} predictions (teacher-forced "
                         f"steps {r['failures'] - r['init_failures'] - r['fr_failures']}/{r['n']}, initial states "
                         f"{r['init_failures']}/{r['init_n']}, free-running steps {r['fr_failures']}/"
                         f"{r['fr_predictions']})")
    for name, r in rows.items():  # what F1 and EM are worth: the same steps, the current state copied
        if r.get("copy_state_f1") is not None:
            lines.append(f"{name}: copying the current state scores F1 {r['copy_state_f1']:.3f}, EM "
                         f"{r['copy_state_em']:.3f} on the same steps (the floor to beat)")
    for name, r in rows.items():  # where the average F1 comes from: one line per action verb
        parts = [f"{k} {v['state_f1']:.3f} (n={v['n']})" for k, v in (r.get("by_action") or {}).items()]
        if parts:
            lines.append(f"{name}: F1 by action: " + ", ".join(parts))
    for name, r in rows.items():  # where reward-1 precision and recall are lost: the worst tasks
        worst = worst_reward1_tasks(r.get("reward1_by_task") or {})
        if worst:
            lines.append(f"{name}: {worst[0]}")
            lines += worst[1:]
    return "\n".join(lines)


def _label(meta: dict[str, Any], path: str) -> str:
    m = meta.get("model", {})
    off = [s for s in ("retrieval", "reasoning", "history") if not m.get(f"use_{s}", True)]
    return ("no " + "+".join(off) if off else "full") + f" ({Path(path).name})"


def main(argv: list[str] | None = None) -> int:
    """`dreamgym eval-em --env dial --model DIR [--model DIR2 ...] --data heldout.jsonl [--train-data …]`"""
    p = CommandParser(prog="dreamgym eval-em", description=(
        "Fidelity of experience models on held-out real trajectories. Each --model is a checkpoint of "
        "`dreamgym train-em` (ablation checkpoints are labelled by their switches); --inference-ablations "
        "adds rows with retrieval or history switched off at inference for each model."))
    p.add_argument("--env", required=True, help="environment family")
    p.add_argument("--model", action="append", required=True, help="experience-model checkpoint (repeatable)")
    p.add_argument("--data", required=True, help="held-out real trajectories (JSONL/Parquet)")
    p.add_argument("--train-data", help="trajectories for the retrieval buffer (default: each model's training data)")
    p.add_argument("--out", help="JSON report path (default: <first model>/fidelity.json)")
    p.add_argument("--max-transitions", type=at_least(0), default=500, help="teacher-forced transitions (0: all)")
    p.add_argument("--max-episodes", type=at_least(0), default=100, help="free-running episodes (0: all)")
    p.add_argument("--batch-size", type=at_least(1), default=32)
    p.add_argument("--inference-ablations", action="store_true",
                   help="also evaluate each model with retrieval / history switched off at inference")
    p.add_argument("--grounded", action="store_true",
                   help="also score each model's answers as a dream takes them: the family's ground_state written "
                        "in, reward and end from its reward rule where it decides (rows marked +grounded)")
    p.add_argument("--device", default=None)
    p.add_argument("--url", default=None, help="generate on servers serving the (one) --model exported by "
                                                "`dreamgym export-em`: " + checks.SERVER_URLS)
    p.add_argument("--timeout-s", type=at_least(1), default=120,
                   help="with --url: seconds a server may take to answer one generation request (one that takes "
                        "longer is not sent again; its predictions fail, naming this option)")
    a = p.parse_args(argv)

    import random

    from dreamgym.data import load_trajectories
    from dreamgym.experience.data import buffer_spec, checkpoint_buffer

    try:
        # Every input is checked before any model or data loads.
        checks.env_family(a.env)

        def of_family(path: str) -> None:  # every record read, each of --env's family
            provenance.check_trajectories(path, a.env)

        def em_of_family(path: str) -> None:
            usable_checkpoint(path)
            provenance.require(provenance.of_em_checkpoint(path), family=a.env)

        inputs: list[tuple[str, Callable[[str], None], str]] = [("--model", em_of_family, m) for m in a.model]
        inputs.append(("--data", of_family, a.data))
        if a.train_data:
            inputs.append(("--train-data", of_family, a.train_data))
        if a.out:
            inputs.append(("--out", lambda path: output_path(path, "file"), a.out))
        if a.url:
            inputs.append(("--url", checks.server_urls, a.url))
            if len(a.model) > 1:
                raise ConfigError("--url", "the servers serve one model; give one --model with it")
        for option, check, value in inputs:
            try:
                check(value)
            except (OSError, ValueError) as e:
                raise ConfigError(option, str(e)) from None
        held = load_trajectories(a.data)
    except (OSError, ValueError) as e:
        return fail("eval-em", e)
    random.Random(0).shuffle(held)  # a capped evaluation should see every policy, not the first in the file
    rows: dict[str, dict[str, Any]] = {}
    buffers: dict[tuple[Any, ...], Any] = {}
    for path in a.model:
        meta = read_checkpoint_meta(path)
        buf = None
        if meta["model"].get("use_retrieval", True) or a.inference_ablations:
            src = a.train_data or meta.get("train", {}).get("data")
            if not src or not Path(src).exists():
                return fail("eval-em", f"{path} needs retrieval data; pass --train-data")
            key = buffer_spec(meta, src)  # models whose seed buffers would be identical share one
            try:
                if key not in buffers:
                    buffers[key] = checkpoint_buffer(path, src)
            except (OSError, ValueError) as e:  # DataError names the file and line of unreadable retrieval data
                return fail("eval-em", e)
            buf = buffers[key]
        try:  # a server that cannot serve the model (another model, no completions) is refused here, in one line
            model = ExperienceModel.load(path, buffer=buf, device=a.device, batch_size=a.batch_size, url=a.url,
                                   timeout_s=a.timeout_s, timeout_field="--timeout-s")
        except ConfigError as e:
            return fail("eval-em", e)
        loose = unconstrained_servers(model)
        # A server without structured output decodes the answers unconstrained (parsed leniently): more failure states
        # and lower F1 than the same weights in process (26% failure states and F1 0.692 against 0% and 0.770 on a
        # chat-only server), so its rows are labelled and said not to compare.
        mark = " [unconstrained]" if loose else ""
        variants = [(_label(meta, path) + mark, model.config, False)]
        if a.inference_ablations:
            if model.config.use_retrieval:
                variants.append((_label(meta, path) + mark + " -retrieval@inf",
                                 dataclasses.replace(model.config, use_retrieval=False), False))
            if model.config.use_history:
                variants.append((_label(meta, path) + mark + " -history@inf",
                                 dataclasses.replace(model.config, use_history=False), False))
        if a.grounded:
            variants += [(label + " +grounded", cfg, True) for label, cfg, _ in variants]
        base_cfg = model.config
        for label, cfg, grounded in variants:
            model.config = cfg
            model.stats.clear()
            r = evaluate(model, held, a.env, max_transitions=a.max_transitions, max_episodes=a.max_episodes,
                         batch_size=a.batch_size, grounded=grounded)
            r["grounded"] = grounded
            r["model_stats"] = dict(model.stats)
            r["decoding"] = decoding(model, loose)
            r["train_summary"] = _train_summary(path)
            if unusable_backend(r):  # a report of failure states would judge a model by a backend it never used
                # A timeout's own message names --timeout-s; otherwise the likely cause is where it generates.
                hint = "" if model.stats["timeouts"] else \
                    f"; {'check that --url serves this checkpoint' if a.url else 'check --device'}"
                print(f"dreamgym eval-em: {r['backend_failures']} of {r['predictions']} predictions of {label} were "
                      f"backend errors ({model.last_backend_error or 'no message'}){hint}", file=sys.stderr)
                return 1
            rows[label] = r
            print(f"{label}: " + ", ".join(f"{k}={v:.3f}" for k, v in r.items() if isinstance(v, float)),
                  flush=True)
        model.config = base_cfg
    print()
    print(format_table(rows))
    out = Path(a.out or Path(a.model[0]) / "fidelity.json")
    atomic_write_text(out, json.dumps({"env": a.env, "data": a.data, "rows": rows}, indent=1, default=str))
    print(f"\nreport: {out}")
    unconstrained = [label for label, r in rows.items() if r["decoding"].startswith("unconstrained")]
    if unconstrained:  # last, where it is seen
        print(f"dreamgym eval-em: warning: {', '.join(unconstrained)}: the server has no structured output, so the "
              f"answers were decoded unconstrained; these figures do not compare with an in-process evaluation or a "
              f"server that has it (vLLM, dreamgym serve-model)", file=sys.stderr)
    return 0


def unconstrained_servers(model: ExperienceModel) -> list[str]:
    """The servers a model configured for structured decoding generates on without it (their start-up probe found
    no structured output, so the constraint is not sent); [] in process or with `structured_output=false`."""
    caps = getattr(model.llm, "capabilities", None) or {}
    return [url for url, c in caps.items() if not c.structured] if model.config.structured_output else []


def decoding(model: ExperienceModel, loose: list[str]) -> str:
    """How the answers of an evaluation were decoded, for its report row."""
    if not model.config.structured_output:
        return "free (structured_output=false)"
    if loose:
        return f"unconstrained (no structured output on {', '.join(loose)})"
    return "constrained (structured output)"


# ------------------------------------------------------------------------------------------- fidelity gate

GATED = (("format_validity", "format validity"), ("state_f1", "next-state F1"),
         ("state_em", "next-state exact match"), ("reward1_recall", "reward-1 recall"),
         ("reward1_precision", "reward-1 precision"), ("done_acc", "done accuracy"),
         ("distinct_share", "distinct next states (share of the real world's)"))
"""(figure, what a warning calls it); its threshold is `HeldOutConfig`'s `min_<figure>`."""


OUTCOME_FIGURES = ("reward1_recall", "reward1_precision", "done_acc")
"""The gated figures of a step's reward and end: judged only where the dream takes those from the model."""


def outcomes_from_model(env: str | None, reward_from: str) -> bool:
    """Whether a dream (`dream.reward_from`) takes a step's reward and end from the experience model: 'model', or
    'auto' for a family without its own reward rule (`grounded_outcome`); 'state' never does."""
    if reward_from == "model" or not env:  # no family named: nothing but the model can give them
        return True
    if reward_from == "state":
        return False
    from dreamgym.envs import family

    return not family(env).hooks.grounds_outcomes


def _left_to_model(env: str) -> Callable[[Transition], bool]:
    """Whether the dream takes a real step's reward and end from the model: the family's rule (`grounded_outcome`)
    does not decide it, or cannot read it (the synthetic environment then keeps the model's answer too)."""
    from dreamgym.envs import family

    hooks = family(env).hooks

    def left(t: Transition) -> bool:
        try:
            # t.history is cut to the model's window: a password typed before it is left to the model, as rarely
            # happens in a dream (which passes the whole episode).
            return hooks.grounded_outcome(t.task, t.state, t.action, t.next_state, t.history) is None
        except Exception:  # noqa: BLE001 - as the synthetic environment: an unreadable state is the model's
            return True

    return left


def gate(figures: dict[str, Any], cfg: HeldOutConfig, model_outcomes: bool = True) -> tuple[list[str], list[str]]:
    """The reasons a model is not fit to dream in (each figure under its threshold), and the gated figures the
    held-out steps could not measure (no real or predicted reward 1, no steps). `model_outcomes=False` (the dream
    takes reward and end from the family's rule, `outcomes_from_model`) leaves `OUTCOME_FIGURES` out: a figure the
    dream never uses cannot make the model unfit for it."""
    thresholds = cfg.thresholds()
    reasons, unmeasured = [], []
    for key, label in GATED:
        threshold, value = thresholds[key], figures.get(key)
        if threshold <= 0 or (key in OUTCOME_FIGURES and not model_outcomes):
            continue
        if value is None:
            unmeasured.append(label)
        elif value < threshold:
            reasons.append(f"{label} {value:.3f} < {threshold} (heldout.min_{key})")
    return reasons, unmeasured


def heldout_report(model: ExperienceModel, steps: list[Transition], cfg: HeldOutConfig) -> dict[str, Any]:
    """`dreamgym train-em`'s held-out fidelity report (`dreamgym.experience.train.HeldOutReport`): the teacher-forced
    figures on `steps`, the gate's verdict (`fit`, `reasons`, `unmeasured`), the figures to log under
    `em/heldout/` (`metrics`) and, when the model is not fit, the warning block to print (`warning`)."""
    own = outcomes_from_model(model.env, cfg.reward_from)
    left = None if own or not model.env else _left_to_model(model.env)
    tf = teacher_forced(model, steps, cfg.batch_size, left_to_model=left)
    real = tf["distinct_next_states_real"]
    tf["distinct_share"] = (tf["distinct_next_states"] / real) if real and tf["distinct_next_states"] is not None \
        else None
    # A family's rule may leave steps undecided (MiniWoB++: a dialog click, a password typed before the history
    # window); the dream takes their reward and end from the model, so the gate judges the model's outcomes on those
    # steps alone.
    partial = not own and tf["model_outcome_steps"] > 0
    reasons, unmeasured = gate({**tf, **tf["model_outcomes"]} if partial else tf, cfg, model_outcomes=own or partial)
    if partial:
        where = f" (on the {tf['model_outcome_steps']} held-out steps the {model.env} family's rule leaves open)"
        labels = tuple(label for key, label in GATED if key in OUTCOME_FIGURES)
        reasons = [r + where if r.startswith(labels) else r for r in reasons]
    if not steps:
        reasons = ["no held-out step to score"]
    keys = ("n", "format_validity", "state_f1", "state_em", "copy_state_f1", "copy_state_em", "reward1_recall",
            "reward1_precision", "done_acc", "distinct_next_states", "distinct_next_states_real", "distinct_share")
    report: dict[str, Any] = {**{k: tf[k] for k in keys}, "by_action": tf["by_action"],
                              "reward1_by_task": tf["reward1_by_task"], "fit": not reasons,
                              "reasons": reasons, "unmeasured": unmeasured,
                              "not_gated": [] if own or partial else [label for key, label in GATED
                                                                      if key in OUTCOME_FIGURES],
                              "not_gated_reason": None if own or partial else (
                                  f"the dream takes reward and end from the {model.env} family's grounded_outcome, "
                                  "not from the model (heldout.reward_from)")}
    if not own:
        report["model_outcome_steps"] = tf["model_outcome_steps"]
        report["model_outcomes"] = tf["model_outcomes"]
    report["reward1_worst"] = worst_reward1_tasks(tf["reward1_by_task"])  # train-em's closing lines print it
    report["metrics"] = {**{k: tf[k] for k in keys}, "fit": not reasons}
    if reasons:
        bar = "!" * 78
        report["warning"] = "\n".join(
            [bar, f"NOT FIT TO DREAM IN: the experience model failed its held-out fidelity check ({tf['n']} "
                  "held-out steps):", *(f"  - {r}" for r in reasons),
             "A policy trained in its dream learns from a world that is not the real one: train it longer or on more "
             "data, or see docs/decisions.md (fidelity gate) for what each figure means.", bar])
    return report


def train_em_main(argv: list[str] | None = None) -> int:
    """`dreamgym train-em`: the experience model's SFT (`dreamgym.experience.train.main`), ending with the held-out
    fidelity report (`heldout_report`)."""
    from dreamgym.experience.train import main as train_main

    return train_main(argv, heldout_report=heldout_report)


def unusable_backend(row: dict[str, Any]) -> bool:
    """Whether most predictions of an evaluation were backend errors."""
    return row["backend_failures"] * 2 > row["predictions"] > 0


def _train_summary(path: str) -> dict[str, Any] | None:
    f = Path(path) / "train_summary.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None
