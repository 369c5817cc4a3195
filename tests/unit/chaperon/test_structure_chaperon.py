"""Structure guards for the chaperon (issue 13, step 5), read from the AST of
every module, imports nested in functions included:

- the chaperon never imports the launcher (`agent_sandbox`);
- no import cycle inside `chaperon` (Tarjan on the import graph);
- `chaperon/wire`, which the stub imports inside the jail, imports the
  standard library only (and, inside the package, only `chaperon.wire`).
"""
from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import ROOT, STDLIB, cycles as _cycles, graph, imports, modules

PACKAGE = ROOT / "chaperon"
MODULES = modules("chaperon")
GRAPH = graph(MODULES)


def _imports(name: str, path: Path) -> set[str]:
    return imports(name, path, MODULES)


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
    stdlib = STDLIB
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
            assert top in STDLIB or top == "stubs", module
