"""BM25 (the `bm25s` package), imported without its jax side effect.

Owns: `import_bm25s()`, the one way DreamGym imports bm25s.
Must not know: what is indexed (WebShop's product search and the curriculum's task neighbours use it).

Why: when jax is installed, `import bm25s` runs a `jax.lax.top_k` at import time to pick its top-k backend. That
first jax operation initialises jax's default backend, which on a GPU machine preallocates 75% of the GPU's
memory in every process that imports bm25s: a run with a few workers ran out of GPU memory before torch
allocated anything (docs/gpu-check.md). DreamGym computes its top-k with numpy from `get_scores`, so it needs
none of that: jax is hidden from bm25s while it imports, and left untouched for the rest of the process.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def import_bm25s() -> ModuleType:
    """The `bm25s` module. Unless jax was already imported (then the process has chosen its jax backend, and bm25s
    may use it), jax is unimportable for the duration of the import, so bm25s selects its numpy backend."""
    if "bm25s" in sys.modules or "jax" in sys.modules:
        return importlib.import_module("bm25s")
    # A None entry makes `import jax` raise ImportError, which bm25s catches; removed again right after.
    sys.modules["jax"] = None  # type: ignore[assignment]
    try:
        return importlib.import_module("bm25s")
    finally:
        del sys.modules["jax"]
