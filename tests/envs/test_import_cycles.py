"""No import cycle among the `dreamgym.envs` modules, read from the sources (nothing is imported).

Every import statement counts: module level, inside functions (a lazy import is still a dependency) and under
`if TYPE_CHECKING:`. `from pkg import name` is an edge to the submodule `pkg.name` when there is one, else to
`pkg`; the implicit import of a package's `__init__` by its submodules is not an edge (it would make every
package a cycle with its own submodules).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENVS = ROOT / "dreamgym" / "envs"


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in ENVS.rglob("*.py")}


def _edges(name: str) -> set[str]:
    path = MODULES[name]
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # `import a.b.c.attr`-style names: the longest module prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_reader_sees_the_webshop_modules_and_their_lazy_imports():
    graph = {n: _edges(n) for n in MODULES}
    assert "dreamgym.envs.webshop.product" in graph["dreamgym.envs.webshop.goals"]  # under TYPE_CHECKING
    assert "dreamgym.envs.webshop.product" in graph["dreamgym.envs.webshop.reward"]
    assert "dreamgym.envs.alfworld.env" in graph["dreamgym.envs.alfworld"]  # inside make_env
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle_among_envs_modules():
    graph = {n: _edges(n) for n in MODULES}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"
