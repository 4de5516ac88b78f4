"""Other libraries' log records that tell a DreamGym user nothing, dropped at the logger that makes them, each with
the reason.

Owns: `quiet_libraries()`, which the package root calls on `import dreamgym`, before any of those libraries loads (a
logger's filters can be set before its module exists: `logging.getLogger(name)` returns the same logger to it).
Must not know: anything of DreamGym. Only the exact records named here are dropped; everything else those loggers
say, their real errors included, is shown as before.
"""

from __future__ import annotations

import logging

BNB_CPU_OPS_LOGGER = "bitsandbytes.backends.cpu.ops"
"""bitsandbytes' CPU backend. Imported by peft (so by every trainer and by `train-em`/`eval-em`), it looks for the
optional `kernels` package on CPUs with AVX512-BF16 and, when that package is not installed, warns
"Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'" at import. The kernel it
looks for serves 4-bit matmuls only, which bitsandbytes then runs its own way; nothing is missing for a user."""


class _KernelsNotInstalled(logging.Filter):
    """Drops a record that reports the `kernels` package as not installed (a `ModuleNotFoundError` for it among the
    record's arguments); any other failure to load a kernel is still shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, ModuleNotFoundError) and a.name == "kernels" for a in args)


_FILTER = _KernelsNotInstalled()


def quiet_libraries() -> None:
    """Install the filters (once; calling again changes nothing)."""
    logger = logging.getLogger(BNB_CPU_OPS_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
