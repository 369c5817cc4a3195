"""The import graph of our packages read from the source (AST), for the
structure guards (tests/unit/test_structure.py, tests/unit/chaperon/
test_structure_chaperon.py). Imports nested in functions count too: a lazy
import is still a dependency. The jail-side helper folder is not a package
and is left out (its own guard imports it in a clean interpreter)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]     # tests/support/ -> the checkout


def _stdlib_names() -> frozenset:
    """sys.stdlib_module_names (Python 3.10+); on 3.9 the same read off the
    interpreter: its built-in modules and what its standard library holds."""
    if hasattr(sys, "stdlib_module_names"):
        return frozenset(sys.stdlib_module_names)
    import os
    import pkgutil
    import sysconfig

    places = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    places |= {os.path.join(place, "lib-dynload") for place in places}
    return frozenset({m.name for m in pkgutil.iter_modules(sorted(places))}
                     | set(sys.builtin_module_names))


STDLIB = _stdlib_names()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(*packages: str) -> dict[str, Path]:
    return {module_name(p): p for top in packages for p in sorted((ROOT / top).rglob("*.py"))
            if "helper" not in p.relative_to(ROOT).parts}


def imports(name: str, path: Path, known) -> set[str]:
    """Every module `name` imports, absolute. For `from X import y` both X
    and X.y (when y is one of `known`) count."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names
                         if f"{module}.{alias.name}" in known)
    return found


def graph(files: dict[str, Path]) -> dict[str, set[str]]:
    return {name: {m for m in imports(name, path, files) if m in files and m != name}
            for name, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
