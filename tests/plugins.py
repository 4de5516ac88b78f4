"""What the tests of families from other packages share: installing a package's `dreamgym.envs` entry points the way
`pip install` would (a `*.dist-info` folder on `sys.path`), so DreamGym finds them by a real metadata lookup."""

from __future__ import annotations

from pathlib import Path

from dreamgym.envs.registry import ENTRY_POINT_GROUP


def dist_info(where: Path, entry_points: dict[str, str], name: str = "familypkg") -> None:
    """What `pip install` of a package declaring these `dreamgym.envs` entry points leaves in site-packages."""
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
