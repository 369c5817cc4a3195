"""Structure guards for the egress proxy, read from the AST (lazy imports
count): it imports the standard library, itself, agent_sandbox.paths and
agent_sandbox.errors (the one mapping of a refusal to its line and exit
code, egress/__main__) only (no pydantic, no launcher: it starts in every
allowlist session); the
decision and the parsers are pure (no asyncio, no sockets, no server);
no import cycle."""
from __future__ import annotations


from tests.support.import_graph import STDLIB, cycles, graph, imports, modules

MODULES = modules("egress")


def _imports(name: str) -> set[str]:
    return {m for m in imports(name, MODULES[name], MODULES) if m}


def test_the_proxy_imports_the_standard_library_paths_and_errors_only():
    assert "egress.server" in MODULES and "egress.hosts" in MODULES
    for name in MODULES:
        foreign = {m for m in _imports(name)
                   if m.partition(".")[0] not in STDLIB
                   and m.partition(".")[0] != "egress"
                   and m not in ("agent_sandbox.paths", "agent_sandbox.errors")}
        assert not foreign, (name, foreign)


def test_the_decision_and_the_parsers_are_pure():
    for name in ("egress.hosts", "egress.protocol"):
        found = _imports(name)
        assert not found & {"asyncio", "threading", "selectors", "egress.server",
                            "egress.broker", "agent_sandbox.paths"}, (name, found)


def test_no_import_cycle_in_the_proxy():
    assert cycles(graph(MODULES)) == []
