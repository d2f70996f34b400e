"""The import graph of gpuhealth's packages, read from the source: every import statement counts, also one
inside a function (imported lazily) or under `if TYPE_CHECKING:` (for the type checker only), because each is
still a dependency a reader must follow and a circle through it is still a circle.

A folder without `__init__.py` (bench/, helm/) holds scripts: each is run as `python bench/NAME.py`, which puts its
folder first on sys.path, so its modules import each other by their bare name (`from prom_rules import ...`) as well
as by the folder's (`from bench.sim_peers import ...`); both are read as the same module."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.support import paths

ROOT = paths.REPO


def _module_of(path: Path, top: Path) -> str:
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _named(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from . import x, from ..y import z
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    return [base, *(f"{base}.{a.name}" for a in node.names)]  # `from pkg import mod` imports pkg.mod


def graph(packages: Iterable[str], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of these packages (folders under root) it imports (the deepest module each import
    names). A package's modules are named from the folder that holds it, as Python imports them."""
    paths = {_module_of(p, (root / package).parent): p for package in packages for p in (root / package).rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in paths}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        scripts = "" if (path.parent / "__init__.py").exists() else package  # its bare names are its folder's
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _named(node, package):
                found = _deepest(name, paths) or (scripts and _deepest(f"{scripts}.{name}", paths))
                if found and found != module:
                    edges[module].add(found)
    return edges


def _deepest(name: str, modules: dict[str, Path]) -> str:
    """The deepest of these modules that the dotted name names ("" for none)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
