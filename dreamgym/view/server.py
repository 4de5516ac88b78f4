"""The `dreamgym view` web server: the site's pages over HTTP on the project's web stack (`dreamgym.utils.serving`).

Owns: the routes (`create_app`): `/` (runs), `/runs/{run}/` (a run), `/curves` (curves of several runs),
`/runs/{run}/files/{file}/` (an episode list, paged and filtered by query), `/runs/{run}/files/{file}/{episode}`
(an episode, `?em=N&mode=free|forced` to replay it in an experience model), `/static/{name}` (the stylesheet and
the script, by name from a fixed list) and their error answers: an id the site does not have is a 404, a bad
query value a 400, both JSON naming the problem, as every `dreamgym.utils.serving` server answers.
Must not know: how pages are rendered or run folders read (`dreamgym.view.site`).

Nothing is read by a path taken from a request: runs, files, episodes and models are positions in the lists the
site built from the folders given on the command line.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

from dreamgym.utils import serving
from dreamgym.view.episodes import Filter
from dreamgym.view.site import STATIC, STATIC_FILES, Links, NotFound, Site

LIMITS = serving.Limits(max_body_bytes=16 << 10)
"""The viewer takes no request bodies; the rest are the project's defaults."""
SECURITY_HEADERS = {
    # Only this server's own stylesheet and script; shop pages are inline (srcdoc) frames without scripts.
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "frame-src 'self' about:; script-src 'self'; object-src 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "message": message}}


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=SECURITY_HEADERS)


def create_app(site: Site) -> FastAPI:
    app = FastAPI(title="dreamgym view", docs_url=None, redoc_url=None, openapi_url=None)
    links = Links()

    def page(fn: Any, *args: Any) -> HTMLResponse:
        try:
            return _html(fn(*args, links))
        except NotFound as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return _html(site.index_page(links))

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}")
        return Response((STATIC / name).read_bytes(), media_type=STATIC_FILES[name], headers=SECURITY_HEADERS)

    @app.get("/runs/{rid}/", response_class=HTMLResponse)
    def run(rid: int) -> HTMLResponse:
        return page(site.run_page, rid)

    @app.get("/curves", response_class=HTMLResponse)
    def curves(run: Annotated[list[int] | None, Query()] = None,
               metric: str = Query(default="", max_length=200)) -> HTMLResponse:
        return page(site.curves_page, run or [], metric)

    @app.get("/runs/{rid}/files/{sid}/", response_class=HTMLResponse)
    def episodes(rid: int, sid: int, start: int = Query(default=0, ge=0), task: str = Query(default="", max_length=200),
                 outcome: str = Query(default="", pattern="^(|won|lost)$"),
                 source: str = Query(default="", pattern="^(|real|synthetic)$")) -> HTMLResponse:
        return page(site.episodes_page, rid, sid, start, Filter(task=task, outcome=outcome, source=source))

    @app.get("/runs/{rid}/files/{sid}/{index}", response_class=HTMLResponse)
    def episode(rid: int, sid: int, index: int, em: str = Query(default="", pattern="^[0-9]*$"),
                mode: str = Query(default="free", pattern="^(free|forced)$")) -> HTMLResponse:
        return page(site.episode_page, rid, sid, index, int(em) if em else None, mode)

    serving.install(app, LIMITS, error_body)
    return app


def serve(site: Site, host: str, port: int) -> int:
    """Serve in the foreground until Ctrl-C; prints the address."""
    app = create_app(site)
    sock = serving.bind(host, port, LIMITS.backlog)
    h, p = sock.getsockname()[:2]
    print(f"dreamgym view: http://{h}:{p}/ ({len(site.run_dirs)} run folder(s); Ctrl-C stops)", flush=True)
    serving.run_foreground(serving.make_server(app), sock)
    return 0
