"""The pages of `dreamgym view`, rendered to HTML strings the same way for the server and for a static export.

Owns: `Site` (the given run folders and experience models, the pages: run list, run, curves of several runs,
episode list, episode), `Links` (where a page's links point: server URLs, or relative file names in an export)
and `NotFound` (an id the site does not have). Pages address runs, files, episodes and models only by the
positions the site enumerated itself, never by a path from a request.
Must not know: HTTP, sockets, how the export is written.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2

from dreamgym.utils.metric_names import current_name
from dreamgym.view.charts import line_chart
from dreamgym.view.episodes import EpisodeError, Filter
from dreamgym.view.replay import Comparison, ModelCache, ReplayMode, recorded, replay_in_env, replay_in_model
from dreamgym.view.runs import Run, Series, load_run
from dreamgym.view.states import highlight_diff, shop_page

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"view.css": "text/css", "view.js": "text/javascript"}
"""The only files served from disk by name: the stylesheet and the script, from this package."""
CHART_METRICS = ("rollout/success_rate", "rollout/mean_reward", "losses/loss", "eval/success_rate",
                 "rollout/synthetic_steps", "dream/buffer/size")
"""Training metrics charted on a run's page when logged (every metric can be charted on the curves page); a run
logged before the namespaces (`dreamgym.utils.metric_names`) is read under today's names."""


class NotFound(Exception):
    """A run, file, episode or model id the site does not have; the message names it."""


class Links:
    """Links of the served site (query strings for lists and replays)."""

    static = False
    replays = True
    """Whether episode pages replayed in a model exist to link to."""

    def __init__(self, depth: int = 0):
        self.root = "/"

    def at(self, depth: int) -> Links:
        return self

    def home(self) -> str:
        return self.root

    def asset(self, name: str) -> str:
        return f"{self.root}static/{name}"

    def run(self, rid: int) -> str:
        return f"{self.root}runs/{rid}/"

    def curves(self, runs: list[int], metric: str = "") -> str:
        q = [("run", str(r)) for r in runs] + ([("metric", metric)] if metric else [])
        return f"{self.root}curves?{urlencode(q)}"

    def episodes(self, rid: int, sid: int, start: int = 0, flt: Filter | None = None) -> str:
        q = {k: v for k, v in (("start", start or ""), ("task", flt.task if flt else ""),
                               ("outcome", flt.outcome if flt else ""), ("source", flt.source if flt else "")) if v}
        return f"{self.root}runs/{rid}/files/{sid}/" + (f"?{urlencode(q)}" if q else "")

    def episode(self, rid: int, sid: int, index: int, em: int | None = None, mode: str = "free") -> str:
        q = {} if em is None else {"em": em, **({"mode": mode} if mode != "free" else {})}
        return f"{self.root}runs/{rid}/files/{sid}/{index}" + (f"?{urlencode(q)}" if q else "")


class StaticLinks(Links):
    """Links of a static export: relative file names, from a page `depth` folders below the export's root."""

    static = True

    def __init__(self, depth: int = 0, replays: bool = False):
        self.root = "../" * depth
        self.replays = replays

    def at(self, depth: int) -> Links:
        return StaticLinks(depth, self.replays)

    def home(self) -> str:
        return f"{self.root}index.html"

    def run(self, rid: int) -> str:
        return f"{self.root}runs/{rid}/index.html"

    def curves(self, runs: list[int], metric: str = "") -> str:
        return f"{self.root}curves.html"

    def episodes(self, rid: int, sid: int, start: int = 0, flt: Filter | None = None) -> str:
        return f"{self.root}runs/{rid}/files/{sid}/list-{start}.html"

    def episode(self, rid: int, sid: int, index: int, em: int | None = None, mode: str = "free") -> str:
        suffix = "" if em is None else f"-em{em}" + ("" if mode == "free" else f"-{mode}")
        return f"{self.root}runs/{rid}/files/{sid}/{index}{suffix}.html"


@dataclass
class Model:
    """An experience-model checkpoint the episode page can replay real episodes in."""

    path: Path
    label: str


class Site:
    """The viewer over `run_dirs` (each shown as one run) and the experience models found in them or given."""

    def __init__(self, run_dirs: list[Path], ems: list[Path] | None = None, page_size: int = 50,
                 device: str | None = "cpu"):
        self.run_dirs = [Path(p) for p in run_dirs]
        self.extra_ems = [Path(p).resolve() for p in ems or []]
        self.page_size = page_size
        self.models = ModelCache(device)
        self._replays: OrderedDict[tuple[Any, ...], Comparison] = OrderedDict()
        self._replay_lock = threading.Lock()
        self._runs: dict[int, tuple[float, Run]] = {}
        self._runs_lock = threading.Lock()
        self.jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                                        autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                                        lstrip_blocks=True, undefined=jinja2.StrictUndefined)
        self.jinja.filters["pct"] = lambda v: "" if v is None else f"{100 * v:.1f}"

    # -- data -----------------------------------------------------------------------------------------------
    def run(self, rid: int) -> Run:
        """Run `rid`, re-read when its folder changed (a run still writing shows its progress) or after 2 s."""
        import time

        if not 0 <= rid < len(self.run_dirs):
            raise NotFound(f"no run {rid} (runs 0 to {len(self.run_dirs) - 1})")
        with self._runs_lock:
            cached = self._runs.get(rid)
        if cached is None or time.monotonic() - cached[0] > 2.0:
            # Read without the lock: a run folder that is slow to read holds up only the pages that need it.
            cached = (time.monotonic(), load_run(rid, self.run_dirs[rid]))
            with self._runs_lock:
                self._runs[rid] = cached
        return cached[1]

    def runs(self) -> list[Run]:
        return [self.run(i) for i in range(len(self.run_dirs))]

    def ems(self) -> list[Model]:
        """Experience models: those given, then those found in the run folders, each once."""
        seen: dict[Path, Model] = {p: Model(p, f"{p.name} (given)") for p in self.extra_ems}
        for run in self.runs():
            for p in run.ems:
                seen.setdefault(p, Model(p, f"{run.name}/{p.relative_to(run.root)}" if p != run.root else run.name))
        return list(seen.values())

    def _source(self, rid: int, sid: int) -> Any:
        run = self.run(rid)
        if not 0 <= sid < len(run.sources):
            raise NotFound(f"run {rid} has no episode file {sid} ({len(run.sources)} files)")
        return run, run.sources[sid]

    def comparison(self, rid: int, sid: int, index: int, em: int | None, mode: ReplayMode) -> Comparison:
        run, src = self._source(rid, sid)
        models = self.ems()
        if em is not None and not 0 <= em < len(models):
            raise NotFound(f"no experience model {em} ({len(models)} models)")
        try:
            traj = src.source.episode(index)
        except EpisodeError as e:
            raise NotFound(str(e)) from e
        except OSError as e:  # removed, or swapped for something the viewer does not read, since it was listed
            raise NotFound(f"{src.name}: cannot read the file ({e.strerror or e})") from e
        if traj.source == "synthetic":
            key: tuple[Any, ...] = ("env", src.source.path, index, em)
        elif em is not None:
            key = ("model", src.source.path, index, em, mode)
        else:
            return recorded(traj)
        with self._replay_lock:  # one replay at a time: the model is not shared between threads
            if key in self._replays:
                self._replays.move_to_end(key)
                return self._replays[key]
            model = self.models.get(models[em].path) if em is not None else None
            cmp = replay_in_env(traj, model) if traj.source == "synthetic" else \
                replay_in_model(traj, model, models[em].label if em is not None else "", mode)
            self._replays[key] = cmp
            while len(self._replays) > 64:
                self._replays.popitem(last=False)
            return cmp

    # -- pages ----------------------------------------------------------------------------------------------
    def _render(self, template: str, links: Links, **ctx: Any) -> str:
        return self.jinja.get_template(template).render(links=links, **ctx)

    def index_page(self, links: Links) -> str:
        runs = self.runs()
        return self._render("index.html", links, runs=runs, ems=self.ems(),
                            all_runs=[r.id for r in runs], chart=self._heldout_chart(runs))

    def _heldout_chart(self, runs: list[Run]) -> str:
        series = [Series(f"{r.name}: {s.label}" if s.label != r.name else r.name, s.points, s.band)
                  for r in runs for s in r.heldout]
        return line_chart(series, title="success on held-out real tasks (95% interval shaded)", x_label="iteration",
                          y_label="success", y_range=(0.0, 1.0))

    def run_page(self, rid: int, links: Links) -> str:
        run = self.run(rid)
        charts = [self._heldout_chart([run])] if run.heldout else []
        for name in CHART_METRICS:
            if name in run.metrics:
                charts.append(line_chart(run.metrics[name], title=name, x_label="step"))
        counts: list[int | None] = []
        for s in run.sources:
            try:
                counts.append(s.source.count())
            except (OSError, EpisodeError) as e:
                counts.append(None)
                run.problems.append(f"{s.name}: {e}")
        return self._render("run.html", links, run=run, charts=[c for c in charts if c], counts=counts,
                            metric_names=sorted(run.metrics))

    def curves_page(self, run_ids: list[int], metric: str, links: Links) -> str:
        runs = [self.run(i) for i in run_ids] if run_ids else self.runs()
        metric = current_name(metric) if metric else ""  # a link saved before the namespaces still charts
        names = sorted({k for r in runs for k in r.metrics})
        chart = self._heldout_chart(runs) if not metric else line_chart(
            [Series(f"{r.name}: {s.label}" if s.label != r.name else r.name, s.points)
             for r in runs for s in r.metrics.get(metric, [])], title=metric, x_label="step")
        return self._render("curves.html", links, runs=runs, all_runs=self.runs(), metric=metric, names=names,
                            chart=chart, selected=[r.id for r in runs])

    def episodes_page(self, rid: int, sid: int, start: int, flt: Filter, links: Links,
                      limit: int | None = None) -> str:
        """A page of the episode list; `limit` (an export) lists only the episodes before it."""
        run, src = self._source(rid, sid)
        try:
            page = src.source.page(start, self.page_size, flt)
        except (OSError, EpisodeError) as e:
            from dreamgym.view.episodes import Page

            page = Page([], 0, None, 0, 0, [f"{src.name}: {e}"])
        if limit is not None:
            page.rows = [r for r in page.rows if r.index < limit]
        return self._render("episodes.html", links, run=run, sid=sid, src=src, page=page, flt=flt,
                            page_size=self.page_size, export_limit=page.total if limit is None else limit)

    def episode_page(self, rid: int, sid: int, index: int, em: int | None, mode: ReplayMode, links: Links) -> str:
        run, src = self._source(rid, sid)
        error = ""
        cmp = None
        try:
            cmp = self.comparison(rid, sid, index, em, mode)
        except NotFound as e:
            if em is not None or "has no episode" in str(e) or "no experience model" in str(e):
                raise
            error = str(e)
        steps = [self._step_view(pair, cmp) for pair in cmp.steps] if cmp is not None else []
        return self._render("episode.html", links, run=run, sid=sid, src=src, index=index, cmp=cmp, error=error,
                            steps=steps, models=self.ems(), em=em, mode=mode)

    def _step_view(self, pair: Any, cmp: Comparison) -> dict[str, Any]:
        task = cmp.episode.task
        real, dream = pair.real, pair.dream
        view: dict[str, Any] = {"pair": pair, "differs": False, "real_html": "", "dream_html": ""}
        if real is not None and dream is not None and real.next_state and dream.next_state:
            view["real_html"], view["dream_html"], view["differs"] = highlight_diff(real.next_state, dream.next_state)
            view["reward_differs"] = abs(real.reward - dream.reward) > 1e-9
            view["done_differs"] = real.done != dream.done
        else:
            for side, key in ((real, "real_html"), (dream, "dream_html")):
                if side is not None:
                    view[key] = highlight_diff(side.next_state, side.next_state)[0]
        if task.env == "webshop":
            key_ = (cmp.episode.steps[pair.index].info or {}).get("catalog_key") \
                if pair.index < len(cmp.episode.steps) else None
            for side, name in ((real, "real_page"), (dream, "dream_page")):
                view[name] = shop_page(side.next_state, task, key_) if side is not None and side.next_state else None
        return view
