"""The static export of `dreamgym view` (`--export DIR`): the same pages as files, for sharing without a server.

Owns: which pages an export holds (the run list, every run, the curves of all runs, the first list pages of each
episode file and the first episodes of each, each replayed in every experience model when asked, and every episode
a dream audit names, which the run page links to) and writing them
(atomically, page by page) with relative links.
Must not know: HTTP, how pages are rendered.
"""

from __future__ import annotations

from pathlib import Path

from dreamgym.utils.paths import atomic_write_bytes, atomic_write_text
from dreamgym.view.episodes import EpisodeError, Filter
from dreamgym.view.site import STATIC, STATIC_FILES, NotFound, Site, StaticLinks


def export(site: Site, out: Path, *, episodes: int = 20, replays: bool = False) -> int:
    """Write the site under `out`; returns the number of pages. Lists cover the first `episodes` episodes of each
    file, each of them has its page (and, with `replays`, one per experience model)."""
    links = StaticLinks(replays=replays)
    pages = 0

    def write(rel: str, html: str) -> None:
        nonlocal pages
        atomic_write_text(out / rel, html)
        pages += 1

    for name in STATIC_FILES:
        atomic_write_bytes(out / "static" / name, (STATIC / name).read_bytes())
    write("index.html", site.index_page(links))
    write("curves.html", site.curves_page([], "", links))
    models = site.ems()
    for run in site.runs():
        write(f"runs/{run.id}/index.html", site.run_page(run.id, links.at(2)))
        for sid, src in enumerate(run.sources):
            base = f"runs/{run.id}/files/{sid}"
            try:
                n = min(episodes, src.source.count())
            except (OSError, EpisodeError):
                n = 0
            for start in range(0, max(1, n), site.page_size):
                write(f"{base}/list-{start}.html", site.episodes_page(run.id, sid, start, Filter(), links.at(4), n))
            audited = {e.index for a in run.audit for e in a.episodes if e.source == sid and e.index >= n}
            for i in [*range(n), *sorted(audited)]:
                for em in [None, *(range(len(models)) if replays and i < n else [])]:
                    try:
                        html = site.episode_page(run.id, sid, i, em, "free", links.at(4))
                    except NotFound:
                        continue
                    write(f"{base}/{i}{'' if em is None else f'-em{em}'}.html", html)
    return pages
