"""Figures of a checkout's import graph (issue 17's closing note): cycles, upward edges and
imports written inside functions, for ``sim`` and ``backends``.

Run: ``python scripts/import_graph_figures.py ROOT [ROOT ...]`` (``ROOT``: a checkout; e.g. a
``git worktree add /tmp/before 33206ee`` beside this one). Reads the source with :mod:`ast`
only (nothing is imported, so any commit can be measured with today's interpreter).

* **function-local imports**: ``import``/``from ... import`` statements of ``sim``/``backends``
  modules written inside a ``def`` (any depth), also counted for every module.
* **cycles**: strongly connected components of more than one module in the graph of every
  import statement (function-local ones included: a hidden cycle is still one), by Tarjan's
  algorithm; ``sim <-> backends`` is also checked at package level.
* **upward edges**: imports from a ``sim`` module to one of a higher layer, layers as in
  ``pyproject.toml``'s ``sim-layers`` contract (top-level module names of a commit that the
  contract does not list are placed by :data:`EXTRA_LAYER`), plus every ``sim`` (below
  ``sim.cli``) -> ``backends`` import.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

PACKAGES = ("sim", "backends")
EXTRA_LAYER = {
    # modules of the commits before issue 17, placed where their job sits in today's layers
    "validate_cli": "cli",
    "validate_single": "validate",
    "validate_breakdown": "validate",
    "ground_truth": "validate",
    "__init__": "config",  # the package itself: counted with the basics
}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve_from(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class Collector(ast.NodeVisitor):
    """Import targets of one module, each flagged local (inside a function) or not."""

    def __init__(self, mod: str, is_pkg: bool) -> None:
        self.mod, self.is_pkg, self.depth = mod, is_pkg, 0
        self.found: list[tuple[str, bool]] = []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(a.name, self.depth > 0) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve_from(self.mod, self.is_pkg, node)
        # ``from pkg import name``: the submodule ``pkg.name`` if there is one, else ``pkg``
        # (:func:`collect` walks up to the nearest module), as grimp reads it
        self.found += [(f"{base}.{a.name}", self.depth > 0) for a in node.names]


def collect(root: Path) -> tuple[set[str], list[tuple[str, str, bool]]]:
    """Modules of ``sim``/``backends`` and their import edges (importer, imported, local)."""
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    modules = {module_name(root, p) for p in files}
    edges: list[tuple[str, str, bool]] = []
    for p in files:
        mod = module_name(root, p)
        col = Collector(mod, p.name == "__init__.py")
        col.visit(ast.parse(p.read_text(encoding="utf-8")))
        per_stmt: dict[tuple[str, bool], None] = {}
        for target, local in col.found:
            while target and target not in modules:  # ``from x import name`` -> module x
                target = target.rpartition(".")[0]
            if target and target != mod:
                per_stmt[(target, local)] = None
        edges += [(mod, t, local) for t, local in per_stmt]
    return modules, edges


def local_statements(root: Path) -> tuple[int, int, list[str]]:
    """``import`` statements written inside a function: of sim/backends modules, of any
    module, and where the former are (``module -> target``)."""
    n = total = 0
    where: list[str] = []
    for pkg in PACKAGES:
        for p in (root / pkg).rglob("*.py"):
            mod = module_name(root, p)
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom):
                        tgt = resolve_from(mod, p.name == "__init__.py", sub)
                    elif isinstance(sub, ast.Import):
                        tgt = sub.names[0].name
                    else:
                        continue
                    total += 1
                    if tgt.split(".")[0] in PACKAGES:
                        n += 1
                        where.append(f"{mod} -> {tgt}")
    return n, total, sorted(where)


def sccs(nodes: set[str], adj: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def layer_ranks(contract_root: Path) -> dict[str, int]:
    """Top-level ``sim`` module -> layer index (0 = top), from ``pyproject.toml``."""
    cfg = tomllib.loads((contract_root / "pyproject.toml").read_text())
    layers = next(
        c["layers"] for c in cfg["tool"]["importlinter"]["contracts"] if c["id"] == "sim-layers"
    )
    rank = {}
    for i, layer in enumerate(layers):
        for name in layer.replace("|", ":").split(":"):
            rank[name.strip().strip("()")] = i
    for name, like in EXTRA_LAYER.items():
        rank.setdefault(name, rank[like])
    return rank


def _is_cli(mod: str) -> bool:
    """The CLI (``sim.cli``, and ``sim.validate_cli`` before issue 17) may import backends."""
    return mod.split(".")[:2] in (["sim", "cli"], ["sim", "validate_cli"])


def figures(root: Path, contract_root: Path) -> dict:
    modules, edges = collect(root)
    adj: dict[str, set[str]] = defaultdict(set)
    for a, b, _ in edges:
        adj[a].add(b)
    rank = layer_ranks(contract_root)

    def top(m: str) -> str:
        return m.split(".")[1] if m.count(".") else "__init__"

    upward = []
    for a, b in sorted({(a, b) for a, b, _ in edges}):
        if a.startswith("sim") and b.startswith("backends") and not _is_cli(a):
            upward.append((a, b))
        elif a.startswith("sim.") and b.startswith("sim.") and top(a) != top(b):
            if rank.get(top(b), 99) < rank.get(top(a), 99):
                upward.append((a, b))
    unknown = sorted({top(m) for m in modules if m.startswith("sim.") and top(m) not in rank})
    pkg_edges = {(a.split(".")[0], b.split(".")[0]) for a, b, _ in edges if not _is_cli(a)}
    comps = sccs(modules, adj)
    return {
        "modules": len(modules),
        "lines": sum(
            len(p.read_text(encoding="utf-8").splitlines())
            for pkg in PACKAGES
            for p in (root / pkg).rglob("*.py")
        ),
        "function_local_imports": local_statements(root),  # (ours, all, where)
        "cycles": comps,
        "modules_in_cycles": sum(len(c) for c in comps),
        "upward_edges": upward,
        "sim_backends_both_ways": ("sim", "backends") in pkg_edges
        and ("backends", "sim") in pkg_edges,
        "unplaced": unknown,
    }


def main() -> None:
    contract_root = Path(__file__).resolve().parents[1]
    flags = {a for a in sys.argv[1:] if a.startswith("-")}
    for arg in (a for a in sys.argv[1:] if not a.startswith("-")):
        f = figures(Path(arg).resolve(), contract_root)
        print(f"== {arg}: {f['modules']} modules, {f['lines']} lines")
        ours, total, where = f["function_local_imports"]
        print(f"imports inside functions: {total} ({ours} of sim/backends modules)")
        if "-v" in flags:
            print("".join(f"  {w}\n" for w in where), end="")
        print(f"import cycles: {len(f['cycles'])} ({f['modules_in_cycles']} modules)")
        for c in f["cycles"]:
            print(f"  {len(c)} modules: {', '.join(c[:8])}{' ...' if len(c) > 8 else ''}")
        print(f"sim (below its CLI) <-> backends both ways: {f['sim_backends_both_ways']}")
        print(f"upward edges (layers of pyproject.toml's sim-layers): {len(f['upward_edges'])}")
        for a, b in f["upward_edges"]:
            print(f"  {a} -> {b}")
        if f["unplaced"]:
            print(f"top-level modules with no layer: {', '.join(f['unplaced'])}")


if __name__ == "__main__":
    main()
