"""Run folders for `dreamgym view`: what one folder holds, read leniently, every problem kept with where it is.

Owns: `Run` (config, machine record, results with intervals, training and held-out curves, episode sources,
experience-model checkpoints and fidelity reports found in one folder) and `load_run`, which never raises: a
file that is missing, truncated or malformed becomes a `Run.problems` entry naming it, and the rest is shown.
Which folders are looked into is decided here too: only the given folder and its sub-folders, with links that
lead outside it and files that are not regular files (a FIFO would block its reader) skipped with a problem line;
every file is then opened by `dreamgym.view.files`, which checks the opened file again, so nothing outside a given
run folder is ever read through the viewer, even when a listed file is swapped for a link before it is read.
Must not know: HTTP, HTML, models, environments.

What is read (the formats of `dreamgym.commands.train`, `dreamgym.commands.recipe`, `dreamgym.utils.metrics`,
`dreamgym.data`, `dreamgym.experience.checkpoint` and `dreamgym.experience.fidelity`): `config.yaml`; `summary.json` (a
train run's start and final evaluations, or a recipe's `results` by method, each with its machine record); `eval.jsonl`
(one held-out evaluation per line, with its Wilson interval); every `metrics.jsonl` (curves; in a recipe folder one per
method; a metric of a run logged before the namespaces under its name today, `dreamgym.utils.metric_names`); trajectory
files (`*.jsonl`, `*.parquet`); a dream's `buffer/`; `em_config.json` folders (experience models) and their
`fidelity.json`; a dream's audit (`dream_audit.jsonl`, `dreamgym.dream.audit`: per iteration its figures, and each
audited episode linked to its dream episode file). """

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.dream.audit import AUDIT_FILE, summarize
from dreamgym.utils.metric_names import current_name
from dreamgym.view.episodes import (DreamSource, EpisodeSource, JsonlSource, ParquetSource, buffer_transitions,
                                    looks_like_trajectories)
from dreamgym.view.files import file_kind, open_in_run

MAX_DEPTH = 2
"""Sub-folder levels searched below a run folder (a recipe's method folders are at level 1)."""
SKIP_DIRS = {"model", "tb", "checkpoint", "final", "adapter", "buffer", "__pycache__"}
"""Folders holding weights, TensorBoard events or a buffer's internals: never searched for files."""
LOGS = {"metrics.jsonl", "eval.jsonl", "curriculum.jsonl", AUDIT_FILE}
MAX_SMALL_FILE = 32 << 20
"""Largest config or summary file read (a bigger one is reported, not read)."""


@dataclass
class Result:
    """One row of a results table: a success rate with its 95% interval and what came with it."""

    name: str
    success_rate: float
    ci_low: float
    ci_high: float
    n: int | None = None
    mean_reward: float | None = None
    mean_steps: float | None = None
    real_steps: int | None = None
    real_data: int | None = None
    wall_time_s: float | None = None


@dataclass
class Series:
    """One curve: (x, y) points, and for held-out success its interval band (x, low, high)."""

    label: str
    points: list[tuple[float, float]]
    band: list[tuple[float, float, float]] = field(default_factory=list)


@dataclass
class Source:
    """An episode source with the name it is listed under."""

    name: str
    source: EpisodeSource
    size: int


@dataclass
class AuditedEpisode:
    """One dream episode of an audit: the dream's and the real environment's outcome for the same actions."""

    task: str
    dream_won: bool
    real_won: bool | None
    """None: the real environment could not replay it (`error`)."""
    dream_steps: int
    real_steps: int
    first_difference: int | None
    """The first replayed step (from 1) whose real next state is not the dream's; None when all agree."""
    error: str
    source: int | None
    """The run's episode source holding the dream episode (its side by side page), None when it is not there."""
    index: int


@dataclass
class AuditIteration:
    """An audit file's rows of one iteration: their figures (`dreamgym.dream.audit.summarize`) and episodes."""

    label: str
    iteration: int
    figures: dict[str, float]
    episodes: list[AuditedEpisode]


@dataclass
class Run:
    id: int
    root: Path
    name: str
    problems: list[str] = field(default_factory=list)
    config_text: str = ""
    config_file: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    metrics: dict[str, list[Series]] = field(default_factory=dict)
    """Metric name -> one series per metrics.jsonl that logged it."""
    heldout: list[Series] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    ems: list[Path] = field(default_factory=list)
    fidelity: list[dict[str, Any]] = field(default_factory=list)
    audit: list[AuditIteration] = field(default_factory=list)
    report: str = ""

    @property
    def env(self) -> str:
        for line in self.config_text.splitlines():
            if line.startswith("env:"):
                return line.split(":", 1)[1].strip()
        return ""


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, is `root` or below it."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _walk(root: Path, problems: list[str]) -> list[Path]:
    """The files under `root` (at most MAX_DEPTH folders down, SKIP_DIRS left out) whose real location is inside it."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: problems.append(
            f"{e.filename}: cannot list the folder ({e.strerror})")):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and depth < MAX_DEPTH and inside(here / d, root))
        for name in sorted(filenames):
            p = here / name
            if name.startswith("."):
                continue
            if not inside(p, root):
                problems.append(f"{p.relative_to(root)}: skipped, a link to a file outside the run folder")
                continue
            try:
                mode = p.stat().st_mode
            except OSError as e:
                problems.append(f"{p.relative_to(root)}: cannot read the file ({e.strerror or e})")
                continue
            if not stat.S_ISREG(mode):  # a FIFO would block the reader until someone writes to it
                problems.append(f"{p.relative_to(root)}: skipped, {file_kind(mode)}, not a regular file")
                continue
            out.append(p)
    return out


def _read_text(path: Path, root: Path, problems: list[str]) -> str | None:
    rel = path.relative_to(root)
    try:
        with open_in_run(path, root) as fh:
            if os.fstat(fh.fileno()).st_size > MAX_SMALL_FILE:
                problems.append(f"{rel}: over {MAX_SMALL_FILE >> 20} MiB, not read")
                return None
            return fh.read().decode("utf-8")
    except OSError as e:
        problems.append(f"{rel}: cannot read the file ({e.strerror or e})")
    except UnicodeDecodeError as e:
        problems.append(f"{rel}: not UTF-8 text (byte {e.start})")
    return None


def _read_json(path: Path, root: Path, problems: list[str]) -> Any:
    text = _read_text(path, root, problems)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{path.relative_to(root)}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                        "truncated or damaged")
    except RecursionError:
        problems.append(f"{path.relative_to(root)}: not valid JSON (nested too deeply)")
    return None


def _jsonl_rows(path: Path, root: Path, problems: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of a log file; each line that is not one is reported (a torn last line as truncated)."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    rel = path.relative_to(root)
    try:
        with open_in_run(path, root) as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except (ValueError, RecursionError):
                    if not raw.endswith(b"\n"):
                        problems.append(f"{rel}:{lineno}: truncated last line (a writer was killed mid-write); "
                                        "skipped")
                    else:
                        bad.append(lineno)
                    continue
                if isinstance(row, dict):
                    rows.append(row)
                else:
                    bad.append(lineno)
    except OSError as e:
        problems.append(f"{rel}: cannot read the file ({e.strerror or e})")
    if bad:
        problems.append(f"{rel}: {len(bad)} line(s) are not JSON objects and were skipped (line "
                        f"{', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''})")
    return rows


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _result(name: str, d: Any) -> Result | None:
    if not isinstance(d, dict) or _num(d.get("success_rate")) is None:
        return None
    lo, hi = _num(d.get("ci_low")), _num(d.get("ci_high"))
    sr = float(d["success_rate"])

    def opt_int(k: str) -> int | None:
        v = _num(d.get(k))
        return None if v is None else int(v)

    return Result(name, sr, sr if lo is None else lo, sr if hi is None else hi, n=opt_int("n"),
                  mean_reward=_num(d.get("mean_reward")), mean_steps=_num(d.get("mean_steps")),
                  real_steps=opt_int("real_steps"), real_data=opt_int("real_data"),
                  wall_time_s=_num(d.get("wall_time_s")))


def _label(path: Path, run: Run) -> str:
    rel = path.parent.relative_to(run.root)
    return run.name if not rel.parts else str(rel)


def load_run(run_id: int, root: Path) -> Run:
    """Everything `dreamgym view` shows of the folder `root`; problems are recorded, never raised."""
    root = root.resolve()
    run = Run(run_id, root, root.name)
    if not root.is_dir():
        run.problems.append(f"{root}: not a folder")
        return run
    files = _walk(root, run.problems)
    audits: list[Path] = []
    for p in files:
        rel = p.relative_to(root)
        if p.name in ("config.yaml", "em_config.json") and not run.config_text:
            run.config_text = _read_text(p, root, run.problems) or ""
            run.config_file = str(rel)
        if p.name == "summary.json":
            _summary(run, p)
        elif p.name == "eval.jsonl":
            _evaluations(run, p)
        elif p.name == "metrics.jsonl":
            _metrics(run, p)
        elif p.name == "em_config.json":
            run.ems.append(p.parent)
        elif p.name == "fidelity.json":
            d = _read_json(p, root, run.problems)
            for label, row in (d.get("rows") or {}).items() if isinstance(d, dict) else []:
                if isinstance(row, dict):
                    run.fidelity.append({"model": f"{_label(p, run)}: {label}", **row})
        elif p.name == AUDIT_FILE:
            audits.append(p)
        elif p.name in ("report.md", "results.md") and not run.report:
            run.report = _read_text(p, root, run.problems) or ""
        elif p.suffix in (".jsonl", ".parquet") and p.name not in LOGS and looks_like_trajectories(p, root):
            src: EpisodeSource = ParquetSource(p, root) if p.suffix == ".parquet" else JsonlSource(p, root)
            run.sources.append(Source(str(rel), src, p.stat().st_size))
    for buf in sorted(d for d in [root / "buffer", *(c / "buffer" for c in root.iterdir() if c.is_dir())]
                      if d.is_dir() and inside(d, root)):
        trs = buffer_transitions(buf, root)
        if trs is not None and inside(trs, root):
            run.sources.append(Source(f"{buf.relative_to(root)} (dream episodes)", DreamSource(buf, trs, root),
                                      trs.stat().st_size))
    for p in audits:
        _audit(run, p)
    return run


def _audit(run: Run, p: Path) -> None:
    """The audit file `p` by iteration; a row that is not an audit row is a problem line, the others are shown."""
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    bad = 0
    for row in _jsonl_rows(p, run.root, run.problems):
        ok = (isinstance(row.get("iteration"), int) and isinstance(row.get("steps"), list)
              and all(isinstance(s, dict) for s in row["steps"])
              and all(k in row for k in ("dream_won", "real_won", "episode_index", "task")))
        if ok:
            by_iteration.setdefault(row["iteration"], []).append(row)
        bad += not ok
    if bad:
        run.problems.append(f"{p.relative_to(run.root)}: {bad} row(s) are not audited episodes and were skipped")
    sources = {s.name: i for i, s in enumerate(run.sources)}
    for it, rows in sorted(by_iteration.items()):
        episodes = []
        for r in rows:
            replayed = [s for s in r["steps"] if s.get("replayed")]
            differs = [i for i, s in enumerate(replayed, 1)
                       if " ".join(str(s.get("dream_next_state", "")).split())
                       != " ".join(str(s.get("real_next_state", "")).split())]
            file = str(p.parent.relative_to(run.root) / str(r.get("dream_file", "")))
            task = r["task"].get("id", "?") if isinstance(r["task"], dict) else str(r["task"])
            episodes.append(AuditedEpisode(task, bool(r["dream_won"]), None if r.get("error") else bool(r["real_won"]),
                                           len(r["steps"]), len(replayed), differs[0] if differs else None,
                                           str(r.get("error") or ""), sources.get(file), int(r["episode_index"])))
        try:
            figures = summarize(rows)
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # a row with the keys but not their types
            run.problems.append(f"{p.relative_to(run.root)}: iteration {it}: its figures cannot be read ({e!r})")
            figures = {}
        run.audit.append(AuditIteration(_label(p, run), it, figures, episodes))


def _summary(run: Run, p: Path) -> None:
    d = _read_json(p, run.root, run.problems)
    if not isinstance(d, dict):
        if d is not None:
            run.problems.append(f"{p.relative_to(run.root)}: expected a JSON object")
        return
    if isinstance(d.get("machine"), dict) and not run.machine:
        run.machine = d["machine"]
    if isinstance(d.get("results"), dict):  # a recipe: one row per method
        for name, r in d["results"].items():
            res = _result(str(name), r)
            if res is not None:
                run.results.append(res)
            curve = r.get("curve") if isinstance(r, dict) else None
            if curve:
                pts = [(float(x), float(y)) for x, y in curve if _num(x) is not None and _num(y) is not None]
                run.heldout.append(Series(str(name), pts))
    for tag in ("start", "final"):
        res = _result(f"{_label(p, run)} {tag}", d.get(tag))
        if res is not None and not any(r.name == res.name for r in run.results):
            run.results.append(res)


def _evaluations(run: Run, p: Path) -> None:
    rows = _jsonl_rows(p, run.root, run.problems)
    pts, band = [], []
    for row in rows:
        res = _result(f"{_label(p, run)} {row.get('tag', '')}".strip(), row)
        step = _num(row.get("step"))
        if res is None or step is None:
            continue
        pts.append((step, res.success_rate))
        band.append((step, res.ci_low, res.ci_high))
    if pts:
        run.heldout.append(Series(_label(p, run), pts, band))


def _metrics(run: Run, p: Path) -> None:
    rows = _jsonl_rows(p, run.root, run.problems)
    label = _label(p, run)
    series: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        step = _num(row.get("step"))
        if step is None:
            continue
        for k, v in row.items():
            y = _num(v)
            if y is not None and k not in ("step", "time"):
                # A run logged before the namespaces shows under today's names, beside runs logged since.
                series.setdefault(current_name(k), []).append((step, y))
    for k, pts in series.items():
        run.metrics.setdefault(k, []).append(Series(label, pts))
