"""`dreamgym view [RUN_DIR ...]`: look at runs in a browser, or export them as static pages.

Owns: the command line (the run folders, the experience models, the address, the export) and its checks.
Must not know: how pages are built or served.
"""

from __future__ import annotations

from pathlib import Path

from dreamgym.config import CommandParser, at_least, fail


def main(argv: list[str] | None = None) -> int:
    p = CommandParser(prog="dreamgym view", description=(
        "A local web page of runs: config and machine record, training and held-out curves (several runs "
        "overlaid), results with 95% intervals, a trajectory browser, and episodes beside their dream (a real "
        "episode replayed in an experience model, or a recorded dream replayed in the real environment)."))
    p.add_argument("runs", nargs="*", help="run folders (train, recipe, collect or experience-model folders); "
                                           "default: each folder in runs/")
    p.add_argument("--em", action="append", default=[], metavar="DIR",
                   help="an experience-model checkpoint to replay real episodes in (repeatable; those inside the "
                        "run folders are found by themselves)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=at_least(0, 65535), default=8765, help="port; 0 picks a free one (printed)")
    p.add_argument("--page-size", type=at_least(1, 1000), default=50, help="episodes per list page")
    p.add_argument("--device", default="cpu", help="device of the experience models (default: cpu)")
    p.add_argument("--export", default=None, metavar="DIR", help="write static pages to DIR instead of serving")
    p.add_argument("--export-episodes", type=at_least(0), default=20,
                   help="episodes of each file an export lists and shows (default 20)")
    p.add_argument("--export-replays", action="store_true",
                   help="an export also replays each exported real episode in every experience model")
    a = p.parse_args(argv)
    from dreamgym.experience.checkpoint import usable_checkpoint
    from dreamgym.utils.filecheck import output_path

    runs = [Path(r) for r in a.runs] or sorted(d for d in Path("runs").glob("*") if d.is_dir())
    if not runs:
        return fail("view", "no run folders given and runs/ has none")
    for r in runs:
        if not r.is_dir():
            return fail("view", f"{r}: not a folder")
    for em in a.em:
        try:
            usable_checkpoint(em)
        except (OSError, ValueError) as e:
            return fail("view", f"--em {em}: {e}")
    if a.export:
        try:
            output_path(a.export, "folder")
        except ValueError as e:
            return fail("view", f"--export {e}")
    from dreamgym.view.site import Site

    site = Site(runs, [Path(e) for e in a.em], page_size=a.page_size, device=a.device)
    if a.export:
        from dreamgym.view.export import export

        n = export(site, Path(a.export), episodes=a.export_episodes, replays=a.export_replays)
        print(f"dreamgym view: wrote {n} pages to {a.export}/index.html")
        return 0
    from dreamgym.view.server import serve

    try:
        return serve(site, a.host, a.port)
    except OSError as e:
        return fail("view", f"cannot listen on {a.host}:{a.port}: {e}")
