"""Guards of the package's architecture (issues 13 and 28), in the style of
the import-budget tests: the jail-side helper imports the standard library
only and is reached by path, never as a package; agent_sandbox is built in
floors and a module imports only its own floor or a lower one; the chaperon
never imports the launcher; the import graph of agent_sandbox has no cycle;
and the exit codes are spelled once (errors.py). The graph is read from the
source (AST), with the imports inside functions counted too: a lazy import
is still a dependency."""
from __future__ import annotations

import ast
import os
import subprocess

from agent_sandbox.paths import HELPER_DIR
from tests.support.import_graph import ROOT, cycles as _cycles, graph, modules

PACKAGES = ("agent_sandbox", "chaperon", "stubs", "egress")

# The floors of agent_sandbox, lowest first (docs/design.md): a module may
# import its own floor and the floors below it, never one above; packages on
# one floor may import each other (no cycle: test_no_import_cycle_in_the_package).
# The vocabulary is modules (exact names), each later floor packages (the
# package and everything in it). The pipeline's order: text → Settings
# (config) → Policy (policy) → Plan (backends) → a running process. The
# launch's rooms (issue 28) sit between the backends and the run itself:
# process primitives (process: spawn, terminal, reaping, nesting, the
# backend's probe), the compiled plan cache (plancache), then what one run
# opens around the sandbox (services), an agent's session (agents) and a
# Slurm job's shared sandbox (jobs), and the run itself (launch) on top of
# them; the subcommands beside a launch (tools: doctor, explain, status,
# logs) use all of that, and the CLI (cli, __main__) sits on top of everything.
VOCABULARY = ("agent_sandbox", "agent_sandbox.names", "agent_sandbox.paths",
              "agent_sandbox.errors", "agent_sandbox.mountinfo", "agent_sandbox.jsonlite",
              "agent_sandbox.logfiles", "agent_sandbox.traits", "agent_sandbox.hostid")
FLOORS = (
    VOCABULARY,
    ("agent_sandbox.config",),
    ("agent_sandbox.policy",),
    ("agent_sandbox.backends",),
    ("agent_sandbox.process",),
    ("agent_sandbox.plancache",),
    ("agent_sandbox.services", "agent_sandbox.agents", "agent_sandbox.jobs"),
    ("agent_sandbox.launch",),
    ("agent_sandbox.tools",),
    ("agent_sandbox.cli", "agent_sandbox.__main__"),
)
# Imports allowed upward, each (importer, imported) with its reason. Both lazy,
# inside one function each.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {
    ("agent_sandbox.jobs.join", "agent_sandbox.launch.payloads"):
        "a task joining its job's sandbox gets the session's seccomp filter from "
        "the one builder every launch uses (payloads.seccomp_payload, cached)",
}


def _graph() -> dict[str, set[str]]:
    return graph(modules(*PACKAGES))


def test_the_helper_imports_the_standard_library_only():
    # A clean interpreter: -I -S, and of the package only helper/ on sys.path;
    # every module of the folder, so a new one is covered without a mention here.
    own = sorted(name[:-3] for name in os.listdir(HELPER_DIR) if name.endswith(".py"))
    assert {"sandbox_exec", "landlock", "jobstart", "netrelay", "joinns"} <= set(own), own
    script = ("import importlib, sys; sys.path.insert(0, sys.argv[1]); own = sys.argv[2:]; "
              "[importlib.import_module(name) for name in own]; "
              "print(sorted(m.partition('.')[0] for m in sys.modules "
              "if m.partition('.')[0] not in sys.stdlib_module_names "
              "and m.partition('.')[0] not in own and m != '__main__'))")
    result = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", script, HELPER_DIR, *own],
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


def floor_of(name: str) -> int | None:
    """The floor of module `name` (its index in FLOORS), None when unplaced."""
    for index, members in enumerate(FLOORS):
        for member in members:
            if name == member or (member not in VOCABULARY and name.startswith(member + ".")):
                return index
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of agent_sandbox into a higher floor than the importer's."""
    found = []
    for name, deps in sorted(graph.items()):
        if not name.startswith("agent_sandbox"):
            continue
        for dep in sorted(deps):
            if dep.startswith("agent_sandbox") and floor_of(dep) > floor_of(name):
                found.append((name, dep))
    return found


def test_every_module_has_a_floor():
    # A new module or package is placed on a floor when it is made.
    unplaced = [name for name in _graph() if name.startswith("agent_sandbox")
                and floor_of(name) is None]
    assert unplaced == [], f"add them to FLOORS: {unplaced}"


def test_a_module_imports_only_its_floor_or_lower():
    upward = [edge for edge in upward_imports(_graph()) if edge not in UPWARD_ALLOWED]
    assert upward == [], upward
    stale = [edge for edge in UPWARD_ALLOWED if edge not in upward_imports(_graph())]
    assert stale == [], f"allowed but gone, remove from UPWARD_ALLOWED: {stale}"


def test_the_floors_guard_sees_an_upward_import():
    # The guard itself can fail: a service reaching up into tools, even
    # lazily, and a process primitive reaching up into a service.
    graph = {"agent_sandbox.services.gitcheck": {"agent_sandbox.tools.logs",
                                                 "agent_sandbox.logfiles"},
             "agent_sandbox.tools.logs": {"agent_sandbox.logfiles"},
             "agent_sandbox.process.spawn": {"agent_sandbox.services.chaperon",
                                             "agent_sandbox.backends.base"},
             "agent_sandbox.agents.copy": {"agent_sandbox.services.registry"}}
    assert upward_imports(graph) == [("agent_sandbox.process.spawn",
                                      "agent_sandbox.services.chaperon"),
                                     ("agent_sandbox.services.gitcheck",
                                      "agent_sandbox.tools.logs")]
    assert floor_of("agent_sandbox.config.load") < floor_of("agent_sandbox.policy.view")
    assert (floor_of("agent_sandbox.backends.base") < floor_of("agent_sandbox.process.spawn")
            < floor_of("agent_sandbox.plancache.plans") < floor_of("agent_sandbox.services.egress")
            == floor_of("agent_sandbox.agents.copy") == floor_of("agent_sandbox.jobs.share")
            < floor_of("agent_sandbox.launch.run") < floor_of("agent_sandbox.tools.doctor"))
    assert floor_of("agent_sandbox.plancache.jobs") != floor_of("agent_sandbox.jobs.share")
    assert floor_of("agent_sandbox.names") == 0
    assert floor_of("agent_sandbox.cli.app") == len(FLOORS) - 1


def test_egress_imports_only_the_vocabulary():
    # The egress proxy runs beside the launcher (`python3 -I -m egress`), and
    # config/ imports egress.hosts: egress may lean on the lowest floor only.
    for name, deps in _graph().items():
        if name.startswith("egress"):
            assert not {d for d in deps if d.startswith("agent_sandbox")
                        and d not in VOCABULARY}, (name, deps)


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


# Where a decimal 125, 126 or 127 may be written outside errors.py, with why.
EXIT_LITERALS_ALLOWED = {
    # The jail side: stdlib only, reached by path inside the jail, so it cannot
    # import errors.py; its refusals and the shell's 126/127 are written there.
    "agent_sandbox/helper/sandbox_exec.py": "stdlib-only jail side",
    "agent_sandbox/helper/jobstart.py": "stdlib-only jail side",
    "agent_sandbox/helper/netrelay.py": "stdlib-only jail side",
    "agent_sandbox/helper/privmounts.py": "stdlib-only, run by path before bwrap",
    # The chaperon and the stubs never import the launcher (guarded above):
    # their own exit codes are named once, there.
    "chaperon/wire/session.py": "the chaperon's and stubs' own table of exit codes",
}


def exit_literals(source: str) -> list[int]:
    """The lines of `source` that write 125, 126 or 127 as a decimal integer
    (an exit code spelled again; 0o177 or 0x7F are other things)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Constant) and type(node.value) is int
                and node.value in (125, 126, 127)
                and ast.get_source_segment(source, node) == str(node.value)):
            found.append(node.lineno)
    return sorted(found)


def test_exit_codes_are_spelled_once():
    found = {}
    for top in ("agent_sandbox", "chaperon", "stubs", "egress"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative == "agent_sandbox/errors.py" or relative in EXIT_LITERALS_ALLOWED:
                continue
            lines = exit_literals(path.read_text())
            if lines:
                found[relative] = lines
    assert found == {}, f"name them (agent_sandbox.errors), or raise and let the edge map: {found}"
    for relative in EXIT_LITERALS_ALLOWED:
        assert exit_literals((ROOT / relative).read_text()), f"{relative}: allowed, none left"


def test_the_exit_code_guard_sees_a_literal():
    assert exit_literals("def f():\n    return 127\n") == [2]
    assert exit_literals("os.umask(0o177)\nx = 0x7F\n") == []


# Issue 28, item 4 ("traits, not names"): outside backends/ nothing compares
# a backend's name; callers ask its traits (agent_sandbox/traits.py). Where a
# string literal equal to a backend name may stay, and why:
NAME_LITERALS_ALLOWED = {
    "agent_sandbox/backends/": "the backends themselves",
    "agent_sandbox/traits.py": "the backends' traits table, one row a backend (on the lowest "
                               "floor: the policy asks fixed_mount_points)",
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
    assert found == [], ("ask the backend's traits (agent_sandbox.traits), not its "
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
