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


# Issue 28, item 4 ("traits, not names"): outside backends/ nothing compares
# a backend's name; callers ask its traits (backends/traits.py). Where a
# string literal equal to a backend name may stay, and why:
NAME_LITERALS_ALLOWED = {
    "agent_sandbox/backends/": "the backends themselves and their traits table",
    "agent_sandbox/names.py": "the one list of backend names (names.BACKENDS)",
    "agent_sandbox/config/settings.py": "the settings model's Literal types, checked equal to "
                                        "names.BACKENDS by test_one_list_of_backend_names",
    "agent_sandbox/helper/": "the jail-side helper is stdlib only and cannot import the "
                             "registry: jobstart reads SANDBOX_BACKEND inside a sandbox, "
                             "sandbox_exec's option key for --landlock",
}
# Single assignments allowed elsewhere: (file, name assigned) → why.
NAME_ASSIGNMENTS_ALLOWED = {
    ("agent_sandbox/policy/view.py", "PROFILE_LINE_KIND"): "the kind of the view operation "
        "that carries firejail's own profile line (a view op, not a backend choice)",
    ("agent_sandbox/policy/view.py", "RULE_KIND"): "the kind of the view operation that "
        "carries a Landlock rule",
}


def backend_name_literals(source: str, relative: str) -> list[tuple[int, str]]:
    """(line, literal) of every string constant equal to a backend name in
    `source`, but for the arguments of helper_module() (a helper file's
    name) and the assignments NAME_ASSIGNMENTS_ALLOWED lists."""
    import ast

    from agent_sandbox.names import BACKENDS

    tree = ast.parse(source)
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "helper_module"):
            exempt.update(id(a) for a in node.args)
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and (relative, t.id) in NAME_ASSIGNMENTS_ALLOWED
                for t in node.targets):
            exempt.add(id(node.value))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in BACKENDS
                  and id(node) not in exempt)


def test_no_backend_name_literal_outside_backends():
    found = []
    for top in PACKAGES + ("egress",):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(tuple(NAME_LITERALS_ALLOWED)):
                continue
            found += [(relative, line, value) for line, value
                      in backend_name_literals(path.read_text(), relative)]
    assert found == [], ("ask the backend's traits (agent_sandbox.backends.traits), not its "
                         f"name: {found}")


def test_the_name_guard_sees_a_comparison_and_spares_helper_modules():
    from agent_sandbox.names import BACKENDS

    source = (f"if backend == {BACKENDS[0]!r}: pass\n"
              f"shared = backend in ({BACKENDS[1]!r},)\n"
              f"ll = helper_module({BACKENDS[2]!r})\n"
              f"RULE_KIND = {BACKENDS[2]!r}\n")
    assert backend_name_literals(source, "x.py") == [(1, BACKENDS[0]), (2, BACKENDS[1]),
                                                     (4, BACKENDS[2])]
    assert backend_name_literals(source, "agent_sandbox/policy/view.py") == [
        (1, BACKENDS[0]), (2, BACKENDS[1])]


def test_every_backend_declares_its_traits():
    from agent_sandbox.backends import BACKENDS, TRAITS, Traits, traits
    from agent_sandbox.names import BACKENDS as NAMES

    assert tuple(TRAITS) == NAMES
    for name in NAMES:
        assert isinstance(traits(name), Traits) and BACKENDS[name].traits is TRAITS[name]
        assert BACKENDS[name].binds_generated_files == TRAITS[name].generated_files
        assert TRAITS[name].job_join in ("setns", "program", "")
        assert TRAITS[name].inside_evidence in ("pid1", "state-dir", "")
