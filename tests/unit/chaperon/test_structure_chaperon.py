"""Structure guards for the chaperon (issue 13, step 5), read from the AST of
every module, imports nested in functions included:

- the chaperon never imports the launcher (`agent_sandbox`);
- no import cycle inside `chaperon` (Tarjan on the import graph);
- `chaperon/wire`, which the stub imports inside the jail, imports the
  standard library only (and, inside the package, only `chaperon.wire`).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "chaperon"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, absolute, at any depth of its AST. For
    `from X import y` both X and X.y (when y is a module) count."""
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
                         if f"{module}.{alias.name}" in MODULES)
    return found


GRAPH = {name: {m for m in _imports(name, path) if m in MODULES and m != name}
         for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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
        for nxt in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read():
    assert "chaperon.wire.protocol" in MODULES and "chaperon.handlers.sbatch" in MODULES
    assert "chaperon.handlers.common" in GRAPH["chaperon.handlers.sbatch"]
    assert "chaperon.slurm.options" in GRAPH["chaperon.slurm.directives"]


def test_the_chaperon_never_imports_the_launcher():
    offenders = {name: sorted(m for m in _imports(name, path)
                              if m == "agent_sandbox" or m.startswith("agent_sandbox."))
                 for name, path in MODULES.items()}
    assert not {n: m for n, m in offenders.items() if m}


def test_no_import_cycle_inside_the_chaperon():
    assert _cycles(GRAPH) == []


def test_tarjan_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_wire_imports_the_standard_library_only():
    stdlib = sys.stdlib_module_names
    for name, path in MODULES.items():
        if not (name == "chaperon.wire" or name.startswith("chaperon.wire.")):
            continue
        for module in _imports(name, path):
            top = module.split(".")[0]
            if top == "chaperon":
                assert module in ("chaperon", "chaperon.wire") or module.startswith(
                    "chaperon.wire."), (name, module)
            else:
                assert top in stdlib, (name, module)


def test_the_stub_imports_only_the_wire():
    client = ROOT / "stubs" / "client.py"
    for module in _imports("stubs.client", client):
        top = module.split(".")[0]
        if top == "chaperon":
            assert module.startswith("chaperon.wire"), module
        else:
            assert top in sys.stdlib_module_names or top == "stubs", module
