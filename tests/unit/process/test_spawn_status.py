"""The status documents a backend writes (bwrap's --json-status-fd, the
helper's --status) are read as JSON, one object a line, never matched as
substrings (issue 28, item 4)."""
from agent_sandbox.process import spawn

BWRAP = ('{ "child-pid": 4242, "cgroup-namespace": 4026531835, "ipc-namespace": 4026532 }\n'
         '{ "exit-code": 3 }\n')


def test_bwrap_status_gives_the_init_pid_and_the_exit_code():
    assert spawn._init_pid_in(BWRAP) == 4242
    assert spawn._status_value(BWRAP, "exit-code") == 3
    assert spawn._status_value(BWRAP, "helper-exec") is None


def test_a_line_cut_short_or_a_key_inside_a_string_is_not_a_report():
    assert spawn._init_pid_in('{ "child-pid": 42') is None          # read mid-line
    assert spawn._status_value('{"note": "\\"exit-code\\""}\n', "exit-code") is None
    assert spawn._status_value('not json\n{"helper-exec": 7}\n', "helper-exec") == 7


def test_the_setup_failure_hint_reads_child_pid_from_the_documents():
    assert "namespaces" in spawn._setup_failure_hint("")
    assert "filesystem" in spawn._setup_failure_hint(BWRAP.splitlines()[0])
    assert "namespaces" in spawn._setup_failure_hint('{"x": "child-pid"}')
