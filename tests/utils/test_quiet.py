"""Other libraries' noise (`dreamgym.utils.quiet`): the records it names are dropped once `dreamgym` is imported, real
errors of the same loggers still show. Each case runs in a fresh interpreter, as a command does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What bitsandbytes' CPU backend does at import on a CPU with AVX512-BF16 (bitsandbytes/backends/cpu/ops.py): look
# for the optional `kernels` package, and warn with the exception when it cannot load a kernel from it.
BNB_IMPORT = textwrap.dedent("""
    import logging
    import dreamgym

    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    try:
        from kernels import get_kernel  # not installed: ModuleNotFoundError
    except Exception as exc:
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you "
                       "already `pip install kernels` and the kernels >= 0.11.1", exc)
    logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", RuntimeError("no network"))
    logger.error("a real error of bitsandbytes")
""")


def test_bitsandbytes_saying_kernels_is_not_installed_is_dropped_and_its_other_records_show():
    run = subprocess.run([sys.executable, "-c", BNB_IMPORT], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "No module named 'kernels'" not in run.stderr
    assert run.stderr.splitlines() == ["Failed to load CPU gemm_4bit_forward from kernels-community: no network.",
                                       "a real error of bitsandbytes"]

