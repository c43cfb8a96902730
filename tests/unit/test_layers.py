"""The package's layers: a module imports, when it is loaded, only modules of its own package or of a lower layer.

Imports for type checking only, and imports inside a function (a lower layer calling up at run time, as a
child process loading the user's App does), are not counted: they make no import circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pgsched

LAYERS = {
    "errors": 0,
    "extras": 1,
    "core": 1,
    "db": 1,
    "observe": 1,
    "runtime": 2,
    "api": 3,
    "cli": 4,
    "dashboard": 4,
    "contrib": 4,
    "story": 4,
    "testing": 4,
    "demo": 4,
    "__init__": 4,
    "__main__": 5,  # python -m pgsched: the command line
}
ROOT = Path(pgsched.__file__).parent


def _part(module: str) -> str:
    """The top-level part of pgsched a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _loaded_imports(tree: ast.Module) -> list[str]:
    """The pgsched modules a module imports when it is loaded (not in functions, not for type checking)."""
    found: list[str] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                walk(ast.Module(body=child.orelse, type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                found.extend(a.name for a in child.names if a.name.startswith("pgsched."))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module == "pgsched":
                    found.extend(f"pgsched.{a.name}" for a in child.names)
                elif child.module.startswith("pgsched."):
                    found.append(child.module)
            walk(child)

    walk(tree)
    return found


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {
        p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert parts == set(LAYERS), "a new module or package at the top of pgsched/ needs a layer here and in README"


def test_imports_go_down_the_layers_only() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("pgsched", *path.relative_to(ROOT).with_suffix("").parts))
        source = _part(module)
        for imported in _loaded_imports(ast.parse(path.read_text(), str(path))):
            target = _part(imported)
            if target == "__version__" or target == source:
                continue
            if target not in LAYERS or LAYERS[target] >= LAYERS[source]:
                wrong.append(f"{module} (layer {LAYERS[source]}) imports {imported} (layer {LAYERS.get(target)})")
    assert not wrong, "\n".join(wrong)
