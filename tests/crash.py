"""Running a Python snippet in a subprocess with one of the package's crash points armed (`dreamgym.utils.paths.crash_point`,
through $DREAMGYM_CRASH_AT): the fault tests' way of killing a writer at an exact point, not by timing luck."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dreamgym.utils.paths import CRASH_ENV

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, *args: str, crash: str | None = None) -> subprocess.CompletedProcess:
    """`python -c code args...` on this checkout; `crash` arms `NAME[@N]`, and an inherited setting never leaks in."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
