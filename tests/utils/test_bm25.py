import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bm25s_imports_without_touching_jax_and_leaves_jax_importable(tmp_path):
    # A stand-in jax package that records every import of it in a file: bm25s imports `jax.lax` at import time
    # when it can, and the real jax would then take most of a GPU's memory.
    pkg = tmp_path / "jax"
    pkg.mkdir()
    log = tmp_path / "imported.txt"
    (pkg / "__init__.py").write_text(f"open({str(log)!r}, 'a').write('jax\\n')\n")
    (pkg / "lax.py").write_text("def top_k(x, k):\n    raise RuntimeError('bm25s ran a jax op at import')\n")
    code = textwrap.dedent("""
        import sys
        from dreamgym.utils.bm25 import import_bm25s
        bm25s = import_bm25s()
        import bm25s.selection
        assert bm25s.selection.JAX_IS_AVAILABLE is False
        assert "jax" not in sys.modules
        import jax  # the process's own jax is untouched
        print("ok")
    """)
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert log.read_text() == "jax\n"  # imported once, by the script itself, never by bm25s


def test_without_the_guard_bm25s_would_have_run_jax(tmp_path):
    """The stand-in above is what bm25s really reaches for: importing bm25s plainly runs its jax top-k."""
    pkg = tmp_path / "jax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "lax.py").write_text("def top_k(x, k):\n    raise RuntimeError('jax op at import')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", "import bm25s"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "jax op at import" in out.stderr
