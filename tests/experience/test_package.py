"""The package's own layering: each module imports only the modules its `__init__` docstring lists before it, so
there is no import cycle and the format never reaches the model or training code."""

import ast
from pathlib import Path

import dreamgym.experience

ORDER = ["config", "edits", "hooks", "format", "reasoning", "checkpoint", "shortcuts", "model", "data", "train",
         "consistency", "fidelity"]


def _package_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dreamgym.experience."):
            out.add(node.module.split(".")[2])
    return out


def test_modules_import_only_earlier_modules_of_the_package():
    root = Path(dreamgym.experience.__file__).parent
    assert sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__") == sorted(ORDER)
    for i, name in enumerate(ORDER):
        later = _package_imports(root / f"{name}.py") - set(ORDER[:i])
        assert not later, f"dreamgym.experience.{name} imports {sorted(later)}"
    assert all(f"`{name}`" in dreamgym.experience.__doc__ for name in ORDER)
