"""The import graph of ``sim`` and ``backends``: the layer contracts hold and no module imports
itself through others.

The graph is grimp's (the library under import-linter): it reads every import statement,
those inside functions included, so a cycle hidden by a function-local import is found. The
layer and boundary contracts are in ``pyproject.toml`` (``[tool.importlinter]``) and also run
on their own in ``scripts/test.sh`` (``lint-imports``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]


def cycles(graph) -> list[list[str]]:
    """Every group of more than one module that import each other (directly or through others):
    a module's group is what it imports, transitively, that also imports it."""
    out: set[tuple[str, ...]] = set()
    for m in graph.modules:
        group = graph.find_upstream_modules(m) & graph.find_downstream_modules(m)
        if group:
            out.add(tuple(sorted(group | {m})))
    return [list(g) for g in sorted(out)]


def describe(graph, component: list[str]) -> str:
    """The imports that tie ``component`` together, with file lines."""
    lines = []
    members = set(component)
    for a in component:
        for b in sorted(graph.find_modules_directly_imported_by(a) & members):
            where = ", ".join(
                f"l.{d['line_number']}" for d in graph.get_import_details(importer=a, imported=b)
            )
            lines.append(f"  {a} -> {b} ({where})")
    return "\n".join(lines)


def test_a_cycle_hidden_inside_a_function_is_found(tmp_path, monkeypatch):
    """The checker itself: ``a`` imports ``b`` at the top, ``b`` imports ``a`` in a function."""
    pkg = tmp_path / "hidden"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from hidden import b\n")
    (pkg / "b.py").write_text("def f():\n    from hidden import a\n    return a\n")
    (pkg / "c.py").write_text("from hidden import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("hidden", cache_dir=None)
    assert cycles(graph) == [["hidden.a", "hidden.b"]]


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("sim", "backends", cache_dir=None)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(graph, c) for c in found)


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_layer_contracts_hold():
    res = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
        if Path(sys.executable).with_name("lint-imports").exists()
        else ["lint-imports", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def package_cycles(graph, root: str) -> list[list[str]]:
    """Cycles between the packages (and top-level modules) directly under ``root``: module
    imports collapsed to ``root.<first name>``, then every strongly connected group of more
    than one (Tarjan's algorithm)."""
    depth = root.count(".") + 2

    def top(m: str) -> str:
        return ".".join(m.split(".")[:depth])

    edges: dict[str, set[str]] = {}
    for m in graph.modules:
        if not m.startswith(root + "."):
            continue
        for i in graph.find_modules_directly_imported_by(m):
            if i.startswith(root + ".") and top(i) != top(m):
                edges.setdefault(top(m), set()).add(top(i))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_package_cycle_checker_finds_a_package_level_circle(tmp_path, monkeypatch):
    """Two packages whose modules import each other's (no module-level cycle) form a circle."""
    pkg = tmp_path / "floors"
    for sub in ("", "/low", "/high"):
        (tmp_path / f"floors{sub}").mkdir()
        (tmp_path / f"floors{sub}/__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from floors.high import c\n")
    (pkg / "high" / "b.py").write_text("from floors.low import d\n")
    (pkg / "high" / "c.py").write_text("")
    (pkg / "low" / "d.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("floors", cache_dir=None)
    assert cycles(graph) == []
    assert package_cycles(graph, "floors") == [["floors.high", "floors.low"]]


@pytest.mark.parametrize("root", ["sim", "backends.torch"])
def test_no_package_level_circle(root):
    """No two packages of ``sim`` (or rooms of the torch backend) import each other, even
    through different modules (issue 25: the model's floors)."""
    graph = grimp.build_graph("sim", "backends", cache_dir=None)
    assert package_cycles(graph, root) == []


def private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``file:line module name`` for every ``from module import _name`` (a name private to
    another module) in the ``.py`` files under ``root``, where ``module`` is in ``packages``."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in packages
            ):
                found += [
                    f"{path.relative_to(root.parent)}:{node.lineno} {node.module} {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    return found


def test_private_import_checker_finds_one(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import _helper, public\n")
    assert private_imports(tmp_path / "pkg", ("pkg",)) == ["pkg/a.py:1 pkg.b _helper"]


@pytest.mark.parametrize("top", ["sim", "backends"])
def test_no_module_imports_another_modules_private_name(top):
    """Issue 25: what one module uses of another is public (a helper two modules share lives
    where both import it, under a public name)."""
    assert private_imports(ROOT / top, ("sim", "backends")) == []
