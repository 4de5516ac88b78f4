"""The dream audit: dream episodes replayed action by action in the real environment, and how often the dream's
outcome was the real one.

Owns: `replay` (one dream episode's actions fed to a real environment reset to the same task: both sides' steps and
outcomes, or the reason it could not be replayed), `Replay`, `sample` (which of an iteration's episodes are
audited: a seeded draw of its own, touching no shared random state), `summarize` (outcome agreement, false
successes, real steps, next-state agreement) and the audit file (`AUDIT_FILE`: one JSON row per audited episode,
`write_rows` replacing an iteration's rows whole and atomically, `real_steps` summing them).
Must not know: trainers, the experience model, the run loop or its real-step budget (an audit's real steps are its
own count, reported apart from training and never charged to it), concrete environments (a real environment comes
from the factory the caller gives), how a dream was produced.

Why the replay starts from reset seed `REPLAY_SEED`: the synthetic environment takes a dream's initial state from
the real environment reset to the task with that seed (ALFWorld draws its search order from the reset seed, so the
rollout's own seed would start most replays elsewhere than the dream started). A replay whose initial state still
differs from the dream's is kept and flagged (`same_start`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.env import TextEnv
from dreamgym.episode import Episode
from dreamgym.utils.paths import atomic_write_text
from dreamgym.dream.synthetic_env import REAL_START_SEED

AUDIT_FILE = "dream_audit.jsonl"
"""In a dream's run folder: one row per audited episode (`Replay.to_row`), every iteration's rows in order."""
REPLAY_SEED = REAL_START_SEED
"""The real environment's reset seed for a replay: the one the synthetic environment starts a dream from."""


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


@dataclass
class ReplayStep:
    """One action of a dream episode and what each side answered (the real side empty once its episode ended)."""

    action: str
    dream_next_state: str
    dream_reward: float
    real_next_state: str = ""
    real_reward: float = 0.0
    real_done: bool = False
    real_noop: bool = False
    """The real environment reported that the action did nothing (`info["invalid_action"]`)."""
    replayed: bool = False
    """Whether the real environment took this action (False after the real episode ended, or after a failure)."""


@dataclass
class Replay:
    """A dream episode beside the real environment's answers to its actions."""

    episode_index: int
    """Its position in the iteration's episodes (and in the dream's episode file of that iteration)."""
    task: dict[str, Any]
    dream_seed: int
    dream_won: bool
    dream_reward: float
    real_won: bool = False
    real_reward: float = 0.0
    same_start: bool = True
    """Whether the real environment's initial state was the dream's."""
    steps: list[ReplayStep] = field(default_factory=list)
    error: str = ""
    """Why the real environment could not replay it ("" when it did); such an episode is counted apart."""

    @property
    def real_steps(self) -> int:
        return sum(s.replayed for s in self.steps)

    def to_row(self, **provenance: Any) -> dict[str, Any]:
        """The episode's row of the audit file, `provenance` (iteration, policy version, checkpoint, ...) first."""
        return {**provenance, **asdict(self), "real_steps": self.real_steps}


def replay(episode: Episode, make_env: Callable[[], TextEnv], index: int = 0) -> Replay:
    """Feed the stepped actions of the dream `episode` to a fresh real environment from `make_env`, reset to the same
    task (seed `REPLAY_SEED`), until they run out or the real episode ends. The real outcome is the real
    environment's `info["won"]` on its last step. Never raises: a reset or a step that fails is the replay's `error`
    (the steps taken before it are kept), and so is a curriculum variant the real environment starts on another
    task (MiniWoB++'s start on their parent's page, which asks the parent's question)."""
    stepped = [t for t in episode.turns if t.stepped]
    rep = Replay(index, episode.task.to_dict(), int(episode.seed), bool(episode.won), float(episode.reward),
                 steps=[ReplayStep(t.action or "", t.next_state, float(t.reward)) for t in stepped])
    env: TextEnv | None = None
    try:
        env = make_env()
        _, info = env.reset(seed=REPLAY_SEED, options={"task": episode.task})
        rep.same_start = _same(str(info.get("abstract_state", "")), episode.initial_state)
        if not rep.same_start and episode.task.split == "generated":
            # A variant on its parent's page (MiniWoB++): the real page asks the parent's question and scores that.
            raise ValueError("the real environment starts this curriculum variant on another task than the dream's")
        for step in rep.steps:
            _, reward, term, trunc, info = env.step(step.action)
            step.real_next_state, step.real_reward = str(info.get("abstract_state", "")), float(reward)
            step.real_done, step.real_noop, step.replayed = bool(term or trunc), bool(info.get("invalid_action")), True
            rep.real_reward += float(reward)
            rep.real_won = bool(info.get("won"))
            if term or trunc:
                break
    except Exception as e:  # noqa: BLE001 - a curriculum variant the real game lacks, a real environment failing
        rep.error = f"{type(e).__name__}: {e}"
    finally:
        if env is not None:
            env.close()
    return rep


def sample(episodes: Sequence[Episode], n: int, seed: int, variants: bool = True) -> list[int]:
    """The positions of at most `n` of `episodes` to audit, drawn with `seed` among the trainable ones that took a
    step (what the policy learnt from), in order; curriculum variants only with `variants` (false where the real
    environment cannot start them). Draws from its own generator: the run's random state is untouched, so a run
    with the audit plays what it plays without."""
    pool = [i for i, e in enumerate(episodes) if e.trainable and any(t.stepped for t in e.turns)
            and (variants or e.task.split != "generated")]
    return sorted(random.Random(seed).sample(pool, min(n, len(pool))))


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The figures of audited episodes (their rows, `Replay.to_row`): `episodes`, `unreplayable` (counted apart from the
    rest), `agreement` (dreamt success == real success, over the replayed ones), `dream_wins`, `real_wins`,
    `false_successes` (dreamt win, real loss), `false_success_rate` (of the dreamt wins; absent without one),
    `missed_successes` (dreamt loss, real win), `real_steps` (the audit's own) and `state_agreement` (replayed steps
    whose real next state is the dream's, whitespace aside)."""
    rows = list(rows)
    ok = [r for r in rows if not r.get("error")]
    dream_wins = sum(bool(r["dream_won"]) for r in ok)
    false = sum(bool(r["dream_won"]) and not r["real_won"] for r in ok)
    steps = [s for r in rows for s in r.get("steps", []) if s.get("replayed")]
    out = {"episodes": float(len(rows)), "unreplayable": float(len(rows) - len(ok)),
           "real_steps": float(sum(int(r.get("real_steps", 0)) for r in rows)),
           "dream_wins": float(dream_wins), "real_wins": float(sum(bool(r["real_won"]) for r in ok)),
           "false_successes": float(false),
           "missed_successes": float(sum(bool(r["real_won"]) and not r["dream_won"] for r in ok))}
    if ok:
        out["agreement"] = sum(bool(r["dream_won"]) == bool(r["real_won"]) for r in ok) / len(ok)
    if dream_wins:
        out["false_success_rate"] = false / dream_wins
    if steps:
        out["state_agreement"] = sum(_same(s["dream_next_state"], s["real_next_state"]) for s in steps) / len(steps)
    return out


def write_rows(path: Path, iteration: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """Put `rows` (each with `"iteration": iteration`) into the audit file at `path`, atomically, in place of any rows
    of this or a later iteration (a resumed run redoes them). A line of the file that does not parse is kept as it
    is: the audit never loses what an earlier run wrote."""
    kept: list[str] = []
    for line, old in _lines(path):
        if isinstance(old, dict) and isinstance(old.get("iteration"), int) and old["iteration"] >= iteration:
            continue
        if line.strip():
            kept.append(line)
    kept += [json.dumps(dict(r), ensure_ascii=False) for r in rows]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def real_steps(path: Path) -> int:
    """The real steps of every audited episode in the audit file at `path` (0 when there is none); a line that does
    not parse is not counted."""
    return sum(row["real_steps"] for _, row in _lines(path)
               if isinstance(row, dict) and isinstance(row.get("real_steps"), int))


def _lines(path: Path) -> list[tuple[str, Any]]:
    """Each line of the audit file at `path` (none when it does not exist) with its JSON value, None where it does
    not parse."""
    out: list[tuple[str, Any]] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append((line, json.loads(line)))
            except ValueError:
                out.append((line, None))
    return out
