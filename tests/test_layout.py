"""Layout rules, enforced by reading the imports that run at import time (transitively inside the package,
without importing anything).

- the parts of the method are layered: commands -> rl -> dream -> experience -> curriculum -> replay -> envs, and
  no import runs back up (lazy imports counted);
- environments, the replay buffer and the curriculum never import torch (or a model library) or a trainer;
- trainers and the rollout engine never import a concrete environment;
- trainers never reach the rollout engine, the real-step budget or the loops;
- every module opens with a docstring; the README's layout names every package and module.
"""

import ast
import re
from pathlib import Path

import pytest
from import_graph import cycles, import_graph

ROOT = Path(__file__).resolve().parents[1] / "dreamgym"
HEAVY = ("torch", "transformers", "peft", "sentence_transformers", "accelerate", "trl")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _module_level(tree: ast.AST):
    """Nodes that run when the module is imported: everything except function bodies (a lazy import inside a
    function is how a light module offers an optional heavy feature without loading it)."""
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _imports(name: str) -> set[str]:
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    out = set()
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def _closure(name: str) -> set[str]:
    """Every module reachable from `name` through imports of dreamgym modules (plus the leaves)."""
    seen, stack, leaves = set(), [name], set()
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        for imp in _imports(cur):
            if imp in MODULES:
                stack.append(imp)
                # importing a submodule imports its parents' __init__
                parts = imp.split(".")
                stack.extend(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES)
            leaves.add(imp)
    return leaves | seen


def _light(name: str) -> bool:
    return name.startswith(("dreamgym.env", "dreamgym.envs", "dreamgym.replay", "dreamgym.curriculum"))


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _light(n)))
def test_envs_buffer_curriculum_import_no_torch_or_trainer(name):
    reached = _closure(name)
    bad = sorted(m for m in reached if m.split(".")[0] in HEAVY or m.startswith(("dreamgym.trainers", "dreamgym.rl")))
    assert not bad, f"{name} reaches {bad}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(("dreamgym.trainers", "dreamgym.rl.rollout"))))
def test_trainers_import_no_concrete_environment(name):
    reached = _closure(name)
    # `import dreamgym` reaches the family registry, which names families by module path only.
    registry = ("dreamgym.envs", "dreamgym.envs.registry", "dreamgym.envs.family", "dreamgym.envs.check")
    bad = sorted(m for m in reached if m.startswith("dreamgym.envs") and m not in registry
                 and m.rsplit(".", 1)[0] not in registry[1:])
    assert not bad, f"{name} reaches {bad}"


TRAINER_MODULES = sorted(n for n in MODULES if n.startswith("dreamgym.trainers"))


@pytest.mark.parametrize("name", TRAINER_MODULES)
def test_trainers_only_update_they_reach_no_rollout_engine_budget_or_loop(name):
    """A trainer learns from the episodes it is given: the rollout engine, the real-step budget and the loops that
    play and count iterations (all of `dreamgym.rl`) are out of its reach, lazy imports included."""
    graph = import_graph()
    seen, stack = set(), [name]
    while stack:
        cur = stack.pop()
        if cur not in seen:
            seen.add(cur)
            stack.extend(graph[cur])
    assert not {m for m in seen if m.startswith("dreamgym.rl")}, sorted(seen)


@pytest.mark.parametrize("name", TRAINER_MODULES)
def test_trainers_share_their_loops_not_each_others_private_helpers(name):
    """GRPO and PPO share `trainers.online`, SFT and DPO `trainers.offline`: no trainer borrows another's private
    name (DPO used to run SFT's `_progress`, PPO GRPO's `_split`)."""
    tree = ast.parse(MODULES[name].read_text())
    borrowed = [f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("dreamgym") for a in node.names if a.name.startswith("_")]
    assert not borrowed, f"{name} imports {borrowed}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_opens_with_a_docstring(name):
    tree = ast.parse(MODULES[name].read_text())
    assert ast.get_docstring(tree), f"{name} has no module docstring"


def test_no_module_is_over_700_lines():
    """One concept per module: a module past 700 lines is doing several jobs and is split (as `llm.capabilities`
    left `llm.http` and `envserve.guard` left `envserve.server`)."""
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 700}
    assert not long, f"modules over 700 lines: {long}"


SCRIPTS = sorted(p for d in ("benchmarks", "experiments") for p in (ROOT.parent / d).glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_scripts_parse_open_with_a_docstring_and_import_only_the_package(path):
    """benchmarks/ and experiments/ scripts are read by people first: a docstring saying what they measure, and
    every `dreamgym` name they import exists (so a refactor cannot silently break a script no test runs)."""
    import importlib

    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{path.name} has no docstring"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dreamgym":
            mod = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(mod, alias.name):  # a submodule: `from dreamgym.envs import dial`
                    importlib.import_module(f"{node.module}.{alias.name}")


def test_no_import_cycle_inside_the_package():
    """A module that needs another which needs it back cannot be read, tested or replaced on its own."""
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The imports between the parts of `package` (its modules and sub-packages, each taken whole): a part imports
    another when any module inside it imports any module inside the other."""
    depth = len(package.split(".")) + 1

    def part(module: str) -> str:
        return ".".join(module.split(".")[:depth])

    inside = [m for m in graph if m.startswith(package + ".")]
    out: dict[str, set[str]] = {part(m): set() for m in inside}
    for m in inside:
        out[part(m)] |= {part(d) for d in graph[m] if d.startswith(package + ".") and part(d) != part(m)}
    return out


PACKAGES = sorted({m.rsplit(".", 1)[0] for m in MODULES if "." in m})


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_parts_of_a_package(package):
    """Taken whole, no two sub-packages or modules of a package need each other, lazy imports counted: a package
    can be read and tested above the ones it uses (`checks` -> `experience` -> `trainers` -> `checks` was one)."""
    found = cycles(package_graph(import_graph(), package))
    assert found == [], f"import cycles in {package}: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_package_graph_finds_a_cycle_the_module_graph_does_not_have():
    graph = {"p.a": {"p.b.x"}, "p.b.x": set(), "p.b.y": {"p.a"}, "p.c": {"p.a"}}
    assert cycles(graph) == []
    assert cycles(package_graph(graph, "p")) == [["p.a", "p.b"]]


def test_the_import_reader_sees_lazy_and_type_checking_imports_and_finds_a_cycle():
    graph = import_graph()
    assert "dreamgym.envs.webshop.product" in graph["dreamgym.envs.webshop.goals"]  # under TYPE_CHECKING
    assert "dreamgym.envs.webshop.product" in graph["dreamgym.envs.webshop.reward"]
    assert "dreamgym.envs.alfworld.env" in graph["dreamgym.envs.alfworld"]  # inside make_env
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


LAYERS = ("commands", "rl", "dream", "experience", "curriculum", "replay", "envs")
"""The method's parts from the top: a part may import those after it, never one before it."""


def test_the_method_is_layered_commands_rl_dream_experience_curriculum_replay_envs():
    """Reading the import graph from the top finds the entry points, then the RL loop, the dream, the experience
    model, the task generator, the replay buffer and the environments; no arrow runs back up, lazy imports counted
    (`dreamgym.dream.world` used to import the loop to build every mode's phases)."""
    parts = package_graph(import_graph(), "dreamgym")
    back = sorted(f"{a} -> {b}" for i, a in enumerate(LAYERS) for b in LAYERS[:i]
                  if f"dreamgym.{b}" in parts[f"dreamgym.{a}"])
    assert not back, f"imports running back up: {back}"
    # and nothing below the commands imports a command
    users = sorted(m for m, deps in import_graph().items() if not m.startswith(("dreamgym.commands", "dreamgym.cli"))
                   and any(d.startswith("dreamgym.commands") for d in deps))
    assert not users, f"library modules importing a command: {users}"


def test_the_layering_test_sees_an_arrow_back_up():
    graph = {"dreamgym.dream.world": {"dreamgym.rl.loop"}, "dreamgym.rl.loop": set()}
    assert "dreamgym.rl" in package_graph(graph, "dreamgym")["dreamgym.dream"]


def _readme_layout() -> set[str]:
    readme = (ROOT.parent / "README.md").read_text(encoding="utf-8")
    tree = readme[readme.index("## Layout"):readme.index("## Results")]
    return {n.rstrip("/") for n in re.findall(r"^\s+([\w/.]+)", tree, flags=re.M)}


def test_the_readme_layout_names_every_module_and_package():
    """The README's annotated tree is how a newcomer finds where a change goes: every top-level module and
    sub-package of `dreamgym/` (and of `dreamgym/envs/`) is on it."""
    listed = _readme_layout()
    for pkg in (ROOT, ROOT / "envs"):
        for p in sorted(pkg.iterdir()):
            if p.name.startswith("_") or p.name == "templates" or not (p.suffix == ".py" or p.is_dir()):
                continue
            assert p.stem in listed or p.name in listed, f"README layout does not name {p.relative_to(ROOT.parent)}"


PARTS = [*(part for part in LAYERS if part != "envs"), "trainers", "utils"]


@pytest.mark.parametrize("part", PARTS)
def test_each_part_of_the_method_maps_its_modules_in_its_docstring(part):
    """Inside a part, its package docstring is the map: every module is named there (`name`), so the README can stay
    a map of packages."""
    doc = ast.get_docstring(ast.parse((ROOT / part / "__init__.py").read_text())) or ""
    named = set(re.findall(r"`(\w+)`", doc))
    missing = sorted(p.stem for p in (ROOT / part).glob("*.py") if not p.name.startswith("_") and p.stem not in named)
    assert not missing, f"dreamgym/{part}/__init__.py does not name {missing}"


def test_every_package_the_readme_layout_lists_exists():
    """A package the tree names (`name/`) is a folder of `dreamgym/` (or of `dreamgym/envs/`): the map cannot keep a
    room the house no longer has."""
    readme = (ROOT.parent / "README.md").read_text(encoding="utf-8")
    tree = readme[readme.index("## Layout"):readme.index("## Results")]
    named = set(re.findall(r"^  ([\w]+)/\s", tree, flags=re.M)) | set(re.findall(r"^    ([\w]+)/\s", tree, flags=re.M))
    missing = sorted(n for n in named if not (ROOT / n).is_dir() and not (ROOT / "envs" / n).is_dir())
    assert not missing, f"README layout names packages that do not exist: {missing}"
