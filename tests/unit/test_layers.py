"""The package's layers: a module imports only modules of its own package or of a lower layer, and no module
imports itself back through others.

Every import counts: at the top of a module, inside a function, and under ``if TYPE_CHECKING:``. A module loaded
by its name at run time (``importlib.import_module("pgsched....")``) would be a way around them: each must be
listed in BY_NAME with why, and in README's layer table. None is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pgsched

LAYERS = {
    "errors": 0,
    "extras": 1,
    "db": 2,
    "core": 3,
    "observe": 4,
    "runtime": 5,
    "api": 6,
    "dashboard": 7,
    "contrib": 7,
    "testing": 7,
    "demo": 7,
    "__init__": 7,
    "cli": 8,
    "__main__": 9,  # python -m pgsched: the command line
}
# module -> the module it loads by name at run time (not an import: no edge of the graph), and why.
BY_NAME: dict[str, tuple[str, str]] = {}
# Import cycles between modules (each as its sorted modules), and why: none.
CYCLES: dict[tuple[str, ...], str] = {}
ROOT = Path(pgsched.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("pgsched", *parts))] = path
    return found


MODULES = _modules()


def _part(module: str) -> str:
    """The top-level part of pgsched a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(module: str, path: Path) -> set[str]:
    """Every pgsched module ``module`` imports, wherever the import is (a function, ``if TYPE_CHECKING:``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from pgsched.db import queries`` imports the module pgsched.db.queries.
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {
        p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert parts == set(LAYERS), "a new module or package at the top of pgsched/ needs a layer here and in README"


def test_imports_go_down_the_layers_only() -> None:
    wrong = []
    for module, imported in sorted(GRAPH.items()):
        source = _part(module)
        for target in sorted(imported):
            if _part(target) != source and LAYERS[_part(target)] >= LAYERS[source]:
                wrong.append(f"{module} (layer {LAYERS[source]}) imports {target} (layer {LAYERS[_part(target)]})")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back() -> None:
    """Strongly connected parts of the import graph (Tarjan): each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                cycles.append(tuple(sorted(part)))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert set(cycles) == set(CYCLES), f"import cycles: {cycles}"


def test_modules_loaded_by_name_are_listed() -> None:
    loaded = {}
    for module, path in MODULES.items():
        for name in re.findall(r"import_module\(\s*\"(pgsched\.[a-z_.]+)\"", path.read_text()):
            loaded[module] = name
    assert loaded == {module: target for module, (target, _why) in BY_NAME.items()}
