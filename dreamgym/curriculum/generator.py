"""Curriculum task generator: find the tasks whose outcomes vary most and ask the model for harder variants.

Owns: reward-variance bookkeeping per task (or per embedding cluster for PPO), seed-task selection, the
variant-writing and selection prompts, validation through the environment family's goal parser, the task
pool with the λ cap on generated tasks, and the lineage / variance log
(`dreamgym.curriculum.pools.VARIANCE_LOG`).
Must not know: torch, trainers, how the LLM is served (it only sees the `LLM` seam).

Paper (arXiv:2511.03773, docs/concepts.md): V_τ = (1/n) Σ (r_i − r̄)²; tasks with the highest V_τ are the
seeds; the same LLM as the experience model writes harder variants and a selection step keeps the most
"challenging but feasible" one; λ caps the share of generated tasks. Our choices: the top `n_seeds` tasks with
V_τ > 0, `n_variants` candidates each, selection by a numbered-choice prompt (a malformed choice falls back to the
first valid candidate and is counted), λ applied when sampling a batch.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dreamgym.config import ranged
from dreamgym.data import JsonlWriter
from dreamgym.llm.base import LLM, SamplingParams
from dreamgym.curriculum.pools import draw_tasks
from dreamgym.types import Task, Trajectory

VARIANT_SYSTEM = (
    "You design training tasks for an agent. Given a task the agent sometimes solves and sometimes fails, "
    "write harder variants of it that are still feasible in the same environment. Write each variant on its "
    "own line as `Variant: <instruction>` in the same style as the original."
)
# `Variant[ n]:` or `n.`/`n)`, then the instruction. `variant(?:\s*\d+)?\s*:` accepts the same lines as the
# older `variant\s*\d*\s*:` but cannot split a run of spaces between its two `\s*` in quadratically many ways (22 s
# for a 160k-character `Variant` line without a colon, benchmarks/bench_parser.py).
_VARIANT_LINE = re.compile(r"\s*(?:variant(?:\s*\d+)?\s*:|\d+[.)])\s*(.+)", re.I)
SELECT_SYSTEM = (
    "You pick the training task that is most challenging but still feasible for the agent. "
    "Answer with `Choice: <number>` only."
)


def reward_variance(rewards: list[float]) -> float:
    """V_τ = (1/n) Σ (r_i − r̄)² (population variance; 0 for a single rollout)."""
    if not rewards:
        return 0.0
    r = np.asarray(rewards, dtype=np.float64)
    return float(((r - r.mean()) ** 2).mean())


def cluster_groups(task_ids: list[str], rewards: list[float] | list[list[float]], embeddings: np.ndarray,
                   n_clusters: int, seed: int = 0, iters: int = 20) -> dict[str, list[float]]:
    """For PPO (no rollout groups): k-means the task embeddings (n, d) and give every task the rewards of its
    whole cluster, so V_τ measures how mixed the outcomes of similar tasks are. `rewards[i]` is task i's
    reward or list of rewards."""
    n = len(task_ids)
    k = max(1, min(n_clusters, n))
    rng = np.random.default_rng(seed)
    x = np.asarray(embeddings, dtype=np.float64)
    centers = x[rng.choice(n, size=k, replace=False)]
    for _ in range(iters):
        labels = ((x[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)
        new = np.stack([x[labels == c].mean(0) if (labels == c).any() else centers[c] for c in range(k)])
        if np.allclose(new, centers):
            break
        centers = new
    out: dict[str, list[float]] = {}
    for c in range(k):
        members = [i for i in range(n) if labels[i] == c]
        rs: list[float] = []
        for i in members:
            ri = rewards[i]
            rs.extend(float(r) for r in (ri if isinstance(ri, (list, tuple)) else [ri]))
        for i in members:
            out.setdefault(task_ids[i], []).extend(rs)
    return out


@dataclass
class CurriculumConfig:
    enabled: bool = True
    """Switch the curriculum off for the no-task-generation ablation."""
    n_seeds: int = ranged(4, ge=0)
    """How many highest-variance tasks seed new variants each iteration."""
    n_variants: int = ranged(4, ge=1)
    """Candidate variants the model writes per seed task."""
    max_share: float = ranged(0.3, ge=0, le=1)
    """λ: at most this share of each sampled batch comes from generated tasks."""
    temperature: float = ranged(0.9, ge=0)
    """Sampling temperature for variant writing (selection is greedy)."""
    max_tokens: int = ranged(160, ge=1)
    """Token budget for the variant-writing completion."""
    pool_limit: int = ranged(200, ge=0)
    """Most generated tasks kept; the oldest are dropped first."""
    writer: Literal["model", "family"] = "model"
    """Who writes the variants: 'model' (the experience model's LLM, then its selection step) or 'family' (the
    environment family's `task_variants`: other questions on the seed task's own page, every valid one kept)."""


@dataclass
class CurriculumStats:
    proposed: int = 0
    valid: int = 0
    dropped_invalid: int = 0
    dropped_duplicate: int = 0
    selection_fallbacks: int = 0
    added: int = 0

    @property
    def valid_share(self) -> float:
        return self.valid / self.proposed if self.proposed else 0.0


# ------------------------------------------------------------------------------ teaching the LLM to write tasks
def solved_task_steps(trajectories: list[Trajectory]) -> dict[str, tuple[Task, int]]:
    """Each task some episode in `trajectories` won, with the fewest steps a winning episode took: the
    difficulty measure of `writing_examples` (more steps = harder) and its proof that the task is feasible."""
    out: dict[str, tuple[Task, int]] = {}
    for tr in trajectories:
        if tr.won and (tr.task.id not in out or len(tr.steps) < out[tr.task.id][1]):
            out[tr.task.id] = (tr.task, len(tr.steps))
    return out


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) or {"_"}


def writing_examples(solved: dict[str, tuple[Task, int]], n_variants: int = 4, max_examples: int = 0,
                     neighbours: int = 20, seed: int = 0) -> list[tuple[list[dict[str, str]], str]]:
    """(chat request, target completion) pairs in the curriculum's own two prompts, for the experience
    model's SFT: a model trained from scratch only on transitions cannot write a task (measured on the dial:
    0 of its proposals parsed), so M_task would never add one.

    Variant examples: for task A, up to `n_variants` of the `neighbours` most similar solved tasks (BM25 over
    the instructions' words) that took at least as many steps to win, as `Variant: <instruction>` lines (strictly
    more would be too few: on WebShop most wins take 5 steps, and the neighbours left were other products);
    tasks with no such neighbour are skipped. Selection examples: the same candidates shuffled, answered with the
    hardest one (ties: the first listed) -- every candidate was won in real data, so each is feasible. With
    `max_examples` > 0 at most that many variant examples (and as many selection examples) are kept."""
    from dreamgym.utils.bm25 import import_bm25s

    bm25s = import_bm25s()

    rng = random.Random(seed)
    items = sorted(solved.values(), key=lambda ts: ts[0].id)
    words = [sorted(_words(t.instruction)) for t, _ in items]
    # BM25 over the instructions: template words every task shares ("i", "looking", "dollars") weigh nothing,
    # the product and its attributes decide which tasks are neighbours.
    index = bm25s.BM25()
    index.index(words, show_progress=False)
    step_counts = np.array([n for _, n in items])
    order = list(range(len(items)))
    rng.shuffle(order)
    out: list[tuple[list[dict[str, str]], str]] = []
    picks: list[tuple[list[dict[str, str]], str]] = []
    n_kept = 0
    for i in order:
        if max_examples and n_kept >= max_examples:
            break
        task, steps = items[i]
        scores = np.asarray(index.get_scores(words[i]))
        cand = np.flatnonzero((scores > 0) & (step_counts >= steps))
        cand = cand[cand != i]
        ranked = cand[np.lexsort((cand, -scores[cand]))]  # best score first, ties by index
        seen = {task.instruction.strip().lower()}  # one line per distinct text (dial tasks share instructions)
        sims: list[int] = []
        for j in ranked.tolist():
            text = items[j][0].instruction.strip().lower()
            if text not in seen:
                seen.add(text)
                sims.append(j)
                if len(sims) == neighbours:
                    break
        if not sims:
            continue
        chosen = rng.sample(sims, min(n_variants, len(sims)))
        variants = [items[j][0].instruction for j in chosen]
        out.append((Curriculum.variant_request(task, n_variants),
                    "\n".join(f"Variant: {v}" for v in variants)))
        if len(chosen) > 1:
            rng.shuffle(chosen)
            best = max(range(len(chosen)), key=lambda c: (items[chosen[c]][1], -c))
            picks.append((Curriculum.select_request(task, [items[j][0].instruction for j in chosen]),
                           f"Choice: {best + 1}"))
        n_kept += 1
    return out + picks


class Curriculum:
    """Task pool + variance-driven generation. `sample` draws a batch; `update` takes the iteration's
    rewards per task and grows the pool with validated harder variants. With `config.writer == "family"`,
    `write_variants(task, n, rng)` writes them (the family's `task_variants` on the task's page) instead of `llm`."""

    def __init__(self, base_tasks: list[Task], parse_goal: Callable[[str], dict[str, Any] | None],
                 llm: LLM | None, config: CurriculumConfig | None = None, seed: int = 0,
                 log_path: str | Path | None = None,
                 write_variants: Callable[[Task, int, random.Random], list[str]] | None = None):
        if not base_tasks:
            raise ValueError("the curriculum needs at least one base task")
        if (config or CurriculumConfig()).writer == "family" and write_variants is None:
            raise ValueError("curriculum.writer=family needs the family's variant writer")
        self.write_variants = write_variants
        self.base = list(base_tasks)
        self.generated: list[Task] = []
        self.parse_goal = parse_goal
        self.llm = llm
        self.config = config or CurriculumConfig()
        self.rng = random.Random(seed)
        self.stats = CurriculumStats()
        self.variance_log: list[dict[str, Any]] = []
        self.log_path = Path(log_path) if log_path else None
        self._known: set[str] = set()
        self.remember(self.base)

    # -- sampling ---------------------------------------------------------------------------------------
    def sample(self, n: int, draw_base: Callable[[int], list[Task]] | None = None) -> list[Task]:
        """n tasks; at most ⌊λ·n⌋ generated ones (λ = config.max_share); base tasks drawn by `draw_base` (k -> k base
        tasks: the run's stratified draw), else by `draw_tasks` from this curriculum's own stream."""
        n_gen = min(len(self.generated), int(self.config.max_share * n)) if self.config.enabled else 0
        picked = self.rng.sample(self.generated, n_gen) if n_gen else []
        picked += draw_base(n - n_gen) if draw_base is not None else draw_tasks(self.rng, self.base, n - n_gen)
        self.rng.shuffle(picked)
        return picked

    # -- generation -------------------------------------------------------------------------------------
    @staticmethod
    def variant_request(task: Task, n_variants: int) -> list[dict[str, str]]:
        return [{"role": "system", "content": VARIANT_SYSTEM},
                {"role": "user", "content": f"Task: {task.instruction}\nWrite {n_variants} harder variants."}]

    @staticmethod
    def select_request(task: Task, candidates: list[str]) -> list[dict[str, str]]:
        listing = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(candidates))
        return [{"role": "system", "content": SELECT_SYSTEM},
                {"role": "user", "content": f"Original: {task.instruction}\nCandidates:\n{listing}"}]

    @staticmethod
    def parse_variants(text: str) -> list[str]:
        """The variants in a variant-writing answer: each line `Variant[ n]: <instruction>` or `n. <instruction>`
        / `n) <instruction>` (any case, any spacing). Linear in `len(text)`."""
        out = []
        for line in text.splitlines():
            m = _VARIANT_LINE.match(line)
            if m and m.group(1).strip():
                out.append(m.group(1).strip())
        return out

    @staticmethod
    def parse_choice(text: str, n: int) -> int | None:
        """The 0-based candidate a selection answer picks (its first number, 1-based in the answer), or None when
        it names none of the `n` candidates."""
        m = re.search(r"\d+", text)
        if m is None:
            return None
        # In ASCII whatever script the digits were written in; then a number longer than n's is out of range
        # without int(), which raises on more than 4300 digits (a model that ignores max_tokens can write them).
        digits = "".join(str(int(c)) for c in m.group(0)).lstrip("0")
        if len(digits) > len(str(n)):
            return None
        j = int(digits or "0") - 1
        return j if 0 <= j < n else None

    def update(self, iteration: int, rewards_by_task: dict[str, list[float]],
               tasks_by_id: dict[str, Task]) -> dict[str, float]:
        """Record V_τ per task; when enabled, generate validated variants of the top-variance tasks."""
        variances = {tid: reward_variance(rs) for tid, rs in rewards_by_task.items()}
        for tid, v in variances.items():
            self.variance_log.append({"iteration": iteration, "task_id": tid, "variance": v,
                                      "n": len(rewards_by_task[tid]),
                                      "mean_reward": float(np.mean(rewards_by_task[tid]))})
        report = {"curriculum/mean_variance": float(np.mean(list(variances.values()))) if variances else 0.0,
                  "curriculum/informative_tasks": float(sum(v > 0 for v in variances.values()))}
        writes = self.llm is not None or self.config.writer == "family"
        if self.config.enabled and writes and self.config.n_seeds > 0:
            seeds = [tasks_by_id[t] for t, v in sorted(variances.items(), key=lambda kv: -kv[1])
                     if v > 0 and t in tasks_by_id][: self.config.n_seeds]
            added = self._generate(iteration, seeds)
            report["curriculum/added"] = float(len(added))
        report.update({"curriculum/generated_pool": float(len(self.generated)),
                       "curriculum/valid_share": self.stats.valid_share,
                       "curriculum/proposed_total": float(self.stats.proposed)})
        self._write_log(iteration)
        return report

    def _generate(self, iteration: int, seeds: list[Task]) -> list[Task]:
        if not seeds:
            return []
        if self.config.writer == "family":
            return self._add(iteration, seeds, self._family_variants(seeds))
        assert self.llm is not None
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.max_tokens,
                                seed=self.rng.randrange(2**31))
        outs = self.llm.generate([self.variant_request(t, self.config.n_variants) for t in seeds], params)
        valid_per_seed: list[list[tuple[str, dict[str, Any]]]] = []
        for seed, text in zip(seeds, (o.text for o in outs)):
            cands = self.parse_variants(text)[: self.config.n_variants]
            self.stats.proposed += len(cands) or 1  # an answer with no parsable variant counts as one bad proposal
            if not cands:
                self.stats.dropped_invalid += 1
            valid_per_seed.append(self._valid(cands, seed))
        # Selection: one greedy call for every seed that has a choice to make.
        choosing = [i for i, k in enumerate(valid_per_seed) if len(k) > 1]
        choice = {i: 0 for i, k in enumerate(valid_per_seed) if k}
        if choosing:
            sel = self.llm.generate([self.select_request(seeds[i], [c for c, _ in valid_per_seed[i]])
                                     for i in choosing], SamplingParams(temperature=0.0, max_tokens=8))
            for i, o in zip(choosing, sel):
                j = self.parse_choice(o.text, len(valid_per_seed[i]))
                if j is not None:
                    choice[i] = j
                else:
                    self.stats.selection_fallbacks += 1
        return self._add(iteration, seeds, [[valid_per_seed[i][j]] for i, j in choice.items()],
                         list(choice))

    def _family_variants(self, seeds: list[Task]) -> list[list[tuple[str, dict[str, Any]]]]:
        """Each seed's variants from the family's writer, validated as the model's are; all valid ones are kept: the
        family writes only questions its page can answer, which is what the model's selection step looks for."""
        assert self.write_variants is not None
        out = []
        for task in seeds:
            cands = self.write_variants(task, self.config.n_variants, self.rng)
            self.stats.proposed += len(cands)
            out.append(self._valid(cands, task))
        return out

    def known_key(self, task_id: str, instruction: str) -> str:
        """What makes a task new: its instruction; with the family writer, its instruction on its page (the base
        task it descends from: a generated task's id starts with its parent's), since every page asks the same few
        questions ("Click on Tab #2.")."""
        text = instruction.strip().lower()
        return f"{task_id.split('~')[0]}\t{text}" if self.config.writer == "family" else text

    def remember(self, tasks: list[Task]) -> None:
        """Count `tasks` as known: a variant asking what one of them asks is a duplicate."""
        self._known |= {self.known_key(t.id, t.instruction) for t in tasks}

    def _valid(self, candidates: list[str], seed: Task) -> list[tuple[str, dict[str, Any]]]:
        """The candidates the family's goal parser reads and no known task asks, with their goals; counted."""
        keep = []
        for c in candidates:
            goal = self.parse_goal(c)
            if goal is None:
                self.stats.dropped_invalid += 1
            elif self.known_key(seed.id, c) in self._known:
                self.stats.dropped_duplicate += 1
            else:
                self.stats.valid += 1
                keep.append((c, goal))
        return keep

    def _add(self, iteration: int, seeds: list[Task], kept: list[list[tuple[str, dict[str, Any]]]],
             seed_of: list[int] | None = None) -> list[Task]:
        """The kept variants as generated tasks (`kept[k]` are variants of `seeds[seed_of[k]]`, by default of
        `seeds[k]`), each a child of its seed with the seed's goal fields updated by the variant's."""
        added: list[Task] = []
        for k, variants in enumerate(kept):
            parent = seeds[seed_of[k] if seed_of is not None else k]
            for text, goal in variants:
                if self.known_key(parent.id, text) in self._known:  # another seed's variant in this same round
                    self.stats.dropped_duplicate += 1
                    continue
                merged = dict(parent.goal)
                merged.update(goal)
                t = Task(id=f"{parent.id}~g{iteration}.{len(self.generated) + len(added)}", env=parent.env,
                         instruction=text, goal=merged, split="generated", parent_id=parent.id, iteration=iteration)
                added.append(t)
                self.remember([t])
        self.generated.extend(added)
        self.generated = self.generated[-self.config.pool_limit:]
        self.stats.added += len(added)
        return added

    def _write_log(self, iteration: int) -> None:
        if self.log_path is None:
            return
        # One fsynced O_APPEND write per row, after cutting off a row a kill left torn: never garbage mid-file.
        with JsonlWriter(self.log_path) as fh:
            fh.write_record({"iteration": iteration,
                             "stats": vars(self.stats) | {"valid_share": self.stats.valid_share},
                             "lineage": [{"id": t.id, "parent": t.parent_id, "iteration": t.iteration,
                                          "instruction": t.instruction} for t in self.generated
                                         if t.iteration == iteration],
                             "variance": [r for r in self.variance_log if r["iteration"] == iteration]})
