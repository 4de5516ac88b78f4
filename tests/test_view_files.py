"""`dreamgym view` reading run folders that change under it: a FIFO in a run folder is skipped with a problem line
and hangs no page (neither its run's nor any other), and a listed file swapped for a link to content outside the run
folder (or a FIFO) before it is read is refused when it is opened, not served until the next listing. Real run
folders (`collect` output), the real server on a free port, a real HTTP client."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dreamgym.utils import serving
from dreamgym.commands.collect import collect, parse_mix
from dreamgym.data import read_jsonl, write_parquet
from dreamgym.view.server import create_app
from dreamgym.view.site import Site

SECRET = "SECRET-OUTSIDE-THE-RUN-5b1e"


@contextlib.contextmanager
def viewer(*runs: Path) -> Iterator[tuple[httpx.Client, Site]]:
    site = Site(list(runs), page_size=5)
    with serving.start(serving.make_server(create_app(site))) as srv:
        # A page that blocks would never answer: every request has a deadline.
        with httpx.Client(base_url=srv.base, timeout=15) as client:
            yield client, site


def unblock(fifos: list[Path]) -> None:
    """Give any reader still waiting on these FIFOs (the viewer before the fix) an end of file."""
    for f in fifos:
        with contextlib.suppress(OSError):
            os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "runs" / "collect"
    collect("dial", parse_mix("oracle:1.0"), 8, run / "offline.jsonl", overwrite=True, progress=False)
    write_parquet(run / "offline.parquet", read_jsonl(run / "offline.jsonl"))
    (run / "sub").mkdir()
    shutil.copy(run / "offline.jsonl", run / "sub" / "more.jsonl")
    return run


@pytest.fixture
def outside(tmp_path, run_dir) -> Path:
    """Trajectory files outside the run folder, in the formats of the run's own, carrying the secret."""
    out = tmp_path / "outside"
    out.mkdir()
    trajs = list(read_jsonl(run_dir / "offline.jsonl"))
    for t in trajs:
        t.task.id = t.task.instruction = SECRET
    records = [json.loads(line) for line in (run_dir / "offline.jsonl").read_text().splitlines()]
    for r in records:
        r["task"]["id"] = r["task"]["instruction"] = SECRET
    (out / "offline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_parquet(out / "offline.parquet", trajs)
    (out / "sub").mkdir()
    shutil.copy(out / "offline.jsonl", out / "sub" / "more.jsonl")
    return out


def test_a_fifo_in_a_run_folder_is_skipped_with_a_problem_line_and_hangs_no_page(tmp_path, run_dir):
    other = tmp_path / "runs" / "other"
    shutil.copytree(run_dir, other)
    fifos = [run_dir / "stuck.jsonl", run_dir / "summary.json", run_dir / "sub" / "metrics.jsonl"]
    for f in fifos:
        os.mkfifo(f)
    try:
        with viewer(run_dir, other) as (c, _):
            r = c.get("/runs/0/")
            assert r.status_code == 200
            for name in ("stuck.jsonl", "summary.json", "sub/metrics.jsonl"):
                assert f"{name}: skipped, a FIFO, not a regular file" in r.text, name
            assert "offline.jsonl" in r.text  # the run's regular files are still listed and read
            assert c.get("/").status_code == 200 and c.get("/runs/1/").status_code == 200
            assert c.get("/runs/0/files/0/").status_code == 200
    finally:
        unblock(fifos)


def _listed(c: httpx.Client, site: Site, name: str) -> int:
    """The position of the episode file `name` in run 0, listed (and so cached for 2 s) now."""
    assert c.get("/runs/0/").status_code == 200
    return [s.name for s in site.run(0).sources].index(name)


@pytest.mark.parametrize("swap", ["offline.jsonl", "offline.parquet", "sub"])
def test_a_file_swapped_for_a_link_outside_the_run_is_refused_when_opened(run_dir, outside, swap):
    name = "sub/more.jsonl" if swap == "sub" else swap
    with viewer(run_dir) as (c, site):
        sid = _listed(c, site, name)
        r = c.get(f"/runs/0/files/{sid}/")
        assert r.status_code == 200 and "dial-" in r.text and SECRET not in r.text
        # Swapped for a link right after the listing: the next reads come well within the listing's 2 s cache.
        target = run_dir / swap
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        target.symlink_to(outside / swap)
        for url in (f"/runs/0/files/{sid}/", f"/runs/0/files/{sid}/0", f"/runs/0/files/{sid}/?task=x"):
            r = c.get(url)
            assert SECRET not in r.text, url
            assert "outside the run folder" in r.text, url


def test_a_file_swapped_for_a_fifo_after_the_listing_does_not_block(run_dir):
    with viewer(run_dir) as (c, site):
        sid = _listed(c, site, "offline.jsonl")
        (run_dir / "offline.jsonl").unlink()
        os.mkfifo(run_dir / "offline.jsonl")
        try:
            r = c.get(f"/runs/0/files/{sid}/")
            assert r.status_code == 200 and "a FIFO, not a regular file" in r.text
            assert c.get(f"/runs/0/files/{sid}/1").status_code in (200, 404)
            assert c.get("/").status_code == 200
        finally:
            unblock([run_dir / "offline.jsonl"])
