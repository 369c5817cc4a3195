"""Guards of the package's architecture (issue 13), in the style of the
import-budget tests: the jail-side helper imports the standard library only
and is reached by path, never as a package; configuration never imports the
later stages; the chaperon never imports the launcher; and the import graph
of agent_sandbox has no cycle. The graph is read from the source (AST), with
the imports inside functions counted too: a lazy import is still a
dependency."""
from __future__ import annotations

import os
import subprocess

from agent_sandbox.paths import HELPER_DIR
from tests.import_graph import ROOT, cycles as _cycles, graph, modules

PACKAGES = ("agent_sandbox", "chaperon", "stubs")


def _graph() -> dict[str, set[str]]:
    return graph(modules(*PACKAGES))


def test_the_helper_imports_the_standard_library_only():
    # A clean interpreter: -I -S, and of the package only helper/ on sys.path.
    script = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "import sandbox_exec, landlock, jobstart, netrelay; "
              "own = {'sandbox_exec', 'landlock', 'jobstart', 'netrelay'}; "
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
