"""Guards of the package's architecture (issue 13), in the style of the
import-budget tests: the jail-side helper imports the standard library only
and is reached by path, never as a package; configuration never imports the
later stages; the chaperon never imports the launcher; and the import graph
of agent_sandbox has no cycle. The graph is read from the source (AST), with
the imports inside functions counted too: a lazy import is still a
dependency."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import agent_sandbox
from agent_sandbox.paths import HELPER_DIR

ROOT = Path(agent_sandbox.__file__).resolve().parent.parent
PACKAGES = ("agent_sandbox", "chaperon", "stubs")


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for top in PACKAGES for p in (ROOT / top).rglob("*.py")
             if "helper" not in p.relative_to(ROOT).parts}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in files else target)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_helper_imports_the_standard_library_only():
    # A clean interpreter: -I -S, and of the package only helper/ on sys.path.
    script = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "import sandbox_exec, landlock, jobstart; "
              "own = {'sandbox_exec', 'landlock', 'jobstart'}; "
              "print(sorted(m.partition('.')[0] for m in sys.modules "
              "if m.partition('.')[0] not in sys.stdlib_module_names "
              "and m.partition('.')[0] not in own and m != '__main__'))")
    result = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", script, HELPER_DIR],
                            capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_the_helper_is_reached_by_path_never_as_a_package():
    assert not os.path.exists(os.path.join(HELPER_DIR, "__init__.py"))
    for top in PACKAGES + ("tests", "benchmarks"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name == "test_structure.py":
                continue
            text = path.read_text()
            assert "agent_sandbox.helper" not in text, path
            assert "from agent_sandbox import sandbox_exec" not in text, path


def test_configuration_never_imports_the_later_stages():
    graph = _graph()
    later = ("agent_sandbox.policy", "agent_sandbox.backends", "agent_sandbox.launch",
             "agent_sandbox.tools", "agent_sandbox.cli")
    for name, deps in graph.items():
        if name.startswith("agent_sandbox.config"):
            assert not {d for d in deps if d.startswith(later)}, (name, deps)


def test_policy_never_imports_launch_tools_or_cli():
    graph = _graph()
    later = ("agent_sandbox.launch", "agent_sandbox.tools", "agent_sandbox.cli")
    for name, deps in graph.items():
        if name.startswith("agent_sandbox.policy"):
            assert not {d for d in deps if d.startswith(later)}, (name, deps)


def test_the_chaperon_never_imports_the_launcher():
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith(("chaperon", "stubs")):
            assert not {d for d in deps if d.startswith("agent_sandbox")}, (name, deps)


def test_no_import_cycle_in_the_package():
    graph = _graph()
    cycles = [c for c in _cycles(graph) if c[0].startswith("agent_sandbox")]
    assert cycles == [], cycles


def test_the_graph_reader_sees_a_cycle_and_lazy_imports():
    # The guard itself can fail: a cycle through a function-level import.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert "agent_sandbox.paths" in _graph()["agent_sandbox.tools.status"]   # lazy there


def test_one_list_of_backend_names():
    import typing

    from agent_sandbox.config.settings import Backend, Settings
    from agent_sandbox.names import BACKENDS

    assert typing.get_args(Backend) == BACKENDS
    hints = typing.get_type_hints(Settings)
    assert typing.get_args(hints["SANDBOX_BACKEND"]) == ("auto",) + BACKENDS
