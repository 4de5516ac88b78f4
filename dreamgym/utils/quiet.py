"""Other libraries' log records that tell a DreamGym user nothing, dropped at the logger that makes them, each with
the reason.

Owns: `quiet_libraries()`, which the package root calls on `import dreamgym`, before any of those libraries loads (a
logger's filters can be set before its module exists: `logging.getLogger(name)` returns the same logger to it).
Also `quiet_progress_bars()`, which a command's `--no-progress` calls: no library's progress bar in its log.
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


def quiet_progress_bars() -> None:
    """Turn off the progress bars of Hugging Face's libraries for the rest of the process: a command's
    `--no-progress` means no bar in its log, and transformers draws its own while loading and saving weights
    ("Loading weights", "Writing model shards"). huggingface_hub's switch is read by transformers and datasets when
    they are imported; a library imported already is switched off through its own call."""
    import sys

    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils import logging as datasets_logging

        datasets_logging.disable_progress_bar()
