"""Unit tests of the pure parts of `doctor`, `status` and `logs`: the verdict,
the host-fact parsers, the session registry's staleness rules and round trip,
and the formatting (including escaping of agent-controlled log text)."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from agent_sandbox.tools import checks, doctor, logs, status
from agent_sandbox.services import registry
from agent_sandbox.mountinfo import parse_mountinfo
from agent_sandbox.tools.checks import GAPS, GO, NOGO
from agent_sandbox.tools.checks import Item
from agent_sandbox.tools.doctor import Backend

# ---------------------------------------------------------------- registry
HOST, BOOT = "login1", "boot-a"


def record(**changes):
    base = {"session": "abc123def456", "pid": 4242, "host": HOST, "boot_id": BOOT,
            "start_ticks": 1000, "uid": 1002, "started": 1.0, "backend": "bwrap",
            "project": "/home/u/p", "chaperon_pid": 4250, "command": "claude"}
    base.update(changes)
    return base


def running(uid=1002, ticks=1000):
    return lambda pid: (uid, ticks) if pid == 4242 else None


@pytest.mark.parametrize("rec,lookup,expected", [
    (record(), running(), registry.LIVE),
    (record(), lambda pid: None, registry.STALE),                       # the launcher is gone
    (record(), running(ticks=2000), registry.STALE),                    # pid reused later
    (record(), running(uid=0), registry.STALE),                         # pid reused by root
    (record(boot_id="boot-b"), running(), registry.STALE),              # before a reboot
    (record(host="login2"), lambda pid: None, registry.FOREIGN),        # judged on its host
    (record(start_ticks=None), running(), registry.STALE),
    ({"session": "x"}, running(), registry.STALE),                      # fields missing
    ("not a dict", running(), registry.STALE),
])
def test_judge(rec, lookup, expected):
    assert registry.judge(rec, host=HOST, boot=BOOT, lookup=lookup) == expected


def test_a_foreign_record_is_never_looked_up():
    def lookup(pid):
        raise AssertionError("a record of another host must not be checked here")

    assert registry.judge(record(host="login2"), host=HOST, boot=BOOT,
                          lookup=lookup) == registry.FOREIGN


def test_start_ticks_survives_a_command_name_with_spaces_and_parens(tmp_path, monkeypatch):
    stat_line = "77 (evil) name (x) S 1 77 77 0 -1 4194560 " + " ".join(["0"] * 12) + " 31337 0\n"
    fake = tmp_path / "77"
    fake.mkdir()
    (fake / "stat").write_text(stat_line)
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/77/stat":
            path = fake / "stat"
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert registry.start_ticks(77) == 31337


def test_register_read_unregister_round_trip(tmp_path):
    home = str(tmp_path)
    path = registry.register(home, session="0123456789ab", backend="bwrap",
                             project="/p", chaperon_pid=None, command="bash")
    assert path and os.path.basename(path) == "0123456789ab.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    records, junk = registry.read(home, now=time.time())
    assert junk == [] and len(records) == 1
    saved = records[0][1]
    assert saved["pid"] == os.getpid() and saved["start_ticks"] == registry.start_ticks()
    assert saved["boot_id"] == registry.boot_id() and saved["host"] == registry.host_name()
    # This very process is live by /proc's account; an ended one is not.
    assert registry.judge(saved, host=registry.host_name(), boot=registry.boot_id(),
                          lookup=registry.lookup_proc) == registry.LIVE
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert registry.lookup_proc(ended.pid) is None
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while registry._state_and_ticks(zombie.pid)[0] != b"Z":    # exited, not yet reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert registry.lookup_proc(zombie.pid) is None
    zombie.wait()
    registry.unregister(path)
    assert registry.read(home, now=time.time()) == ([], [])
    registry.unregister(path)          # twice is harmless


def test_register_never_fails_the_launch(tmp_path):
    blocker = tmp_path / ".local"
    blocker.write_text("a file where a directory should be")
    assert registry.register(str(tmp_path), session="s", backend="bwrap", project="/p",
                             chaperon_pid=None, command="x") is None


def test_half_written_and_unreadable_files_are_junk_only_when_old(tmp_path):
    directory = registry.registry_dir(str(tmp_path))
    os.makedirs(directory)
    for name in (".abc.tmp", "garbage.json"):
        with open(os.path.join(directory, name), "w") as handle:
            handle.write("{not json")
    now = time.time()
    assert registry.read(str(tmp_path), now=now) == ([], [])
    records, junk = registry.read(str(tmp_path), now=now + registry.TEMP_GRACE + 5)
    assert records == [] and sorted(os.path.basename(j) for j in junk) == [".abc.tmp",
                                                                          "garbage.json"]


# ---------------------------------------------------------------- status
def write_record(home, rec):
    directory = registry.registry_dir(home)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{rec['session']}.json")
    with open(path, "w") as handle:
        json.dump(rec, handle)
    return path


def test_collect_lists_live_deletes_stale_and_counts_foreign(tmp_path, monkeypatch):
    home = str(tmp_path)
    monkeypatch.setattr(registry, "host_name", lambda: HOST)
    monkeypatch.setattr(registry, "boot_id", lambda: BOOT)
    live = write_record(home, record(session="live00000000", started=100.0))
    stale = write_record(home, record(session="dead00000000", pid=999))
    foreign = write_record(home, record(session="away00000000", host="login2"))
    ledger = tmp_path / ".local/state/agent-sandbox/ledger"
    ledger.mkdir(parents=True)
    (ledger / f"{HOST}_live00000000.jsonl").write_text(
        '{"pending":"t1"}\n{"job":"11","token":"t1"}\n{"job":"12"}\n{"job":"11"}\n{"job":"1')
    result = status.collect(home, lookup=running(), now=200.0)
    assert [s.session for s in result.sessions] == ["live00000000"]
    session = result.sessions[0]
    assert (session.pid, session.backend, session.project, session.jobs) == (
        4242, "bwrap", "/home/u/p", 2)
    assert result.removed == 1 and not os.path.exists(stale)
    assert os.path.exists(live) and os.path.exists(foreign)
    assert result.foreign == (("login2", 1),)


def test_jobs_submitted_without_a_ledger_is_zero(tmp_path):
    assert status.jobs_submitted(str(tmp_path), HOST, "nosuchsession") == 0


@pytest.mark.parametrize("seconds,text", [(0, "00:00:00"), (61, "00:01:01"),
                                          (3600 * 5 + 7, "05:00:07"), (90061, "1d 01:01:01"),
                                          (-5, "00:00:00")])
def test_uptime(seconds, text):
    assert status.uptime(seconds) == text


def test_render_status_table_and_notes():
    s = status.Session("abc123def456", 4242, "bwrap", "/home/u/my project", 4250, False,
                       1000.0, 3, "claude")
    text = status.render(status.Status("login1", (s,), 2, (("login2", 1),)), now=1065.0)
    lines = text.splitlines()
    assert lines[0].split() == ["SESSION", "PID", "BACKEND", "CHAPERON", "UPTIME", "JOBS",
                                "COMMAND", "PROJECT"]
    assert lines[1].split()[:7] == ["abc123def456", "4242", "bwrap", "4250", "(gone)",
                                    "00:01:05", "3"]
    assert lines[1].endswith("/home/u/my project")
    assert "login2" in text and "2 stale record(s)" in text
    empty = status.render(status.Status("login1", (), 0), now=0)
    assert empty == "no running sandboxes of yours on login1\n"
    data = json.loads(status.as_json(status.Status("login1", (s,), 0), now=1065.0))
    assert data["sessions"][0]["pid"] == 4242 and data["sessions"][0]["uptime_seconds"] == 65


# ---------------------------------------------------------------- logs
def line(**fields) -> bytes:
    return (json.dumps(fields) + "\n").encode()


LOG_A = (line(time="2025-01-02T10:00:00+0000", session="aaaa11112222", event="start",
              project="/p")
         + line(time="2025-01-02T10:00:05+0000", session="aaaa11112222", event="request",
                command="sbatch", args=["--chdir=/tmp", "--wrap", "true"], cwd="/p")
         + line(time="2025-01-02T10:00:05+0000", session="aaaa11112222", event="refusal",
                command="sbatch", reason="chdir", detail="--chdir=/tmp is refused — why")
         + b'{"time": "2025-01-02T10:00:06+0000", "sess')                      # torn
LOG_B = (line(time="2025-01-02T10:00:02+0000", session="bbbb33334444", event="refusal",
              command="salloc", reason="blocked_command", detail="salloc is refused")
         + b"garbage\n" + line(not_an="event"))


def entries():
    return logs.parse_lines(LOG_A, 0) + logs.parse_lines(LOG_B, 1)


def test_parse_skips_torn_and_foreign_lines():
    assert len(entries()) == 4


def test_select_orders_by_time_and_filters():
    chosen = logs.select(entries())
    assert [e.record["event"] for e in chosen] == ["start", "refusal", "request", "refusal"]
    assert [e.record["session"] for e in chosen][1] == "bbbb33334444"
    # same second: file order is kept (request before its refusal)
    denials = logs.select(entries(), denials=True)
    assert [e.record["command"] for e in denials] == ["salloc", "sbatch"]
    mine = logs.select(entries(), session="aaaa", denials=True)
    assert [e.record["reason"] for e in mine] == ["chdir"]
    assert logs.select(entries(), session="cccc") == []


def test_format_refusal_and_request():
    chosen = logs.select(entries(), session="aaaa11112222")
    text = logs.render(chosen).splitlines()
    assert len(text) == 3
    assert text[1].split()[2:5] == ["aaaa11112222", "sbatch", "request"]
    assert "--chdir=/tmp --wrap true  (in /p)" in text[1]
    assert text[2].split()[2:6] == ["aaaa11112222", "sbatch", "refusal", "chdir:"]
    assert text[2].endswith("--chdir=/tmp is refused — why")


def test_agent_controlled_text_cannot_reach_the_terminal_raw():
    evil = logs.parse_lines(line(time="2025-01-02T10:00:00+0000", session="s\x1b]0;x\x07",
                                 event="refusal", command="sbatch\x1b[2J", reason="chdir",
                                 detail="--chdir=\x1b[31mred\x9b\x7f"))
    text = logs.render(evil)
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in text)
    assert "\\x1b[31mred\\x9b\\x7f" in text


def test_unknown_events_show_their_fields():
    entry = logs.parse_lines(line(time="bad time", session="s", event="handler_error",
                                  command="squeue", detail="KeyError('x')"))[0]
    assert entry.when == 0.0
    assert "detail=KeyError('x')" in logs.format_entry(entry)


# ---------------------------------------------------------------- doctor: verdict
def backend(name, *, allowed=True, path="/usr/bin/x", ok=True, provides=("seccomp",
            "pid.isolated"), refusal=""):
    return Backend(name, allowed, path, "", ok, "", tuple(provides), (), (), refusal)


def test_all_good_is_go():
    items = [Item("config", GO, "valid")]
    verdict, message, fix, code = doctor.decide(items, [backend("bwrap")], (), "bwrap")
    assert (verdict, code, fix) == (GO, 0, "") and "bwrap" in message


def test_an_item_with_gaps_makes_the_verdict_gaps_but_exit_0():
    items = [Item("config", GO, "valid"), Item("bwrap", GAPS, "not found", "install it")]
    verdict, _, _, code = doctor.decide(items, [backend("bwrap", path=None),
                                                backend("firejail")], (), "firejail")
    assert (verdict, code) == (GAPS, 0)


def test_no_usable_backend_is_no_go():
    verdict, message, _, code = doctor.decide(
        [], [backend("bwrap", path=None), backend("firejail", ok=False),
             backend("landlock", allowed=False)], (), None)
    assert (verdict, code) == (NOGO, 1)
    assert "bwrap: not found" in message and "firejail: probe failed" in message
    assert "landlock: not allowed" in message


def test_require_no_usable_backend_gives_is_no_go_and_names_who_would():
    backends = [backend("bwrap", allowed=False), backend("landlock", provides=("seccomp",))]
    verdict, message, fix, code = doctor.decide([], backends, ("pid.isolated",), "landlock")
    assert (verdict, code) == (NOGO, 1)
    assert "landlock lacks pid.isolated" in message
    assert "bwrap would give them but is not allowed" in fix


def test_require_met_only_by_a_backend_auto_does_not_pick_is_gaps_with_the_setting():
    backends = [backend("bwrap", provides=("seccomp",)), backend("firejail")]
    verdict, message, fix, code = doctor.decide([], backends, ("pid.isolated",), "bwrap")
    assert (verdict, code) == (GAPS, 0)
    assert "SANDBOX_BACKEND=firejail" in fix


def test_a_blocking_item_is_no_go_whatever_the_backends():
    items = [Item("config", NOGO, "bad file", "fix it", blocking=True)]
    verdict, _, fix, code = doctor.decide(items, [backend("bwrap")], (), "bwrap")
    assert (verdict, code, fix) == (NOGO, 1, "fix it")


def test_a_backend_that_refuses_the_policy_is_not_usable():
    assert not backend("landlock", refusal="NETWORK_MODE=isolated needs ABI 4").usable
    assert backend("landlock", refusal="x").state() == "refuses policy"


# ---------------------------------------------------------------- doctor: host facts
MOUNTINFO = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
40 22 0:40 / /home rw,nosuid shared:20 - nfs4 fs1:/export/home rw,vers=4.2
41 40 0:41 / /home/u/my\\040lab rw shared:21 - lustre 10.0.0.1@tcp:/lab rw
42 22 0:42 / /scratch ro,nosuid shared:22 - gpfs scratch rw
43 22 0:43 / /scratch rw shared:23 - tmpfs tmpfs rw
"""


def test_mountinfo_longest_prefix_and_escapes():
    mounts = parse_mountinfo(MOUNTINFO)
    assert checks.mount_of("/home/u", mounts)[1] == "nfs4"
    assert checks.mount_of("/home/u/my lab/proj", mounts)[1] == "lustre"
    assert checks.mount_of("/home/u/my labx", mounts)[1] == "nfs4"
    assert checks.mount_of("/usr/bin", mounts)[1] == "ext4"
    assert checks.mount_of("/scratch/x", mounts)[1] == "tmpfs"     # the later mount wins


@pytest.mark.parametrize("fstype,kind", [("nfs4", "network"), ("nfs", "network"),
                                         ("lustre", "parallel"), ("gpfs", "parallel"),
                                         ("ext4", "local"), ("tmpfs", "local")])
def test_fs_kind(fstype, kind):
    assert checks.fs_kind(fstype) == kind


def test_fs_item_read_only_project_is_gaps():
    mounts = parse_mountinfo(MOUNTINFO)
    item = checks.fs_item("project fs", "/scratch/p", [mounts[3]], project=True,
                          slurm_present=True)
    assert item.status == GAPS and "read-only" in item.summary
    nfs = checks.fs_item("home fs", "/home/u", mounts, project=False, slurm_present=True)
    assert nfs.status == GO and "nfs4" in nfs.summary and "network" in nfs.summary


def test_munge_socket_from_slurm_conf():
    conf = ("AuthType=auth/munge\n# AuthInfo=socket=/commented\n"
            "authinfo=cred_expire=120,socket=/var/spool/munge/m.sock\n")
    assert checks.munge_sockets_from_conf(conf) == ["/var/spool/munge/m.sock"]
    assert checks.munge_sockets_from_conf("AuthType=auth/munge\n") == []


def sample_report(**changes):
    items = (Item("config", GO, "valid"), Item("bwrap", GAPS, "not found", "install bubblewrap"))
    backends = (Backend("bwrap", True, None, "", False, "not run",
                        ("fs.hidden", "seccomp"), (), ()),
                Backend("firejail", True, "/usr/bin/firejail", "firejail version 0.9.72", True,
                        "", ("fs.hidden",), (("passwd.filtered", "nss"),),
                        (("seccomp", "off"),)))
    report = doctor.Report("login1", "u", False, items, backends, ("fs.hidden",), "auto",
                           "firejail", "auto: bwrap not found; firejail passed its probe",
                           GAPS, "sandboxes run on firejail", "", 0)
    return report._replace(**changes)


def test_render_fits_one_screen_and_shows_the_fix_and_table():
    text = doctor.render(sample_report())
    lines = text.splitlines()
    assert len(lines) < 40
    assert any(l.split()[:2] == ["GAPS", "bwrap"] for l in lines)
    assert "fix: install bubblewrap" in text
    assert "a launch uses firejail — auto: bwrap not found" in text
    row = next(l for l in lines if l.strip().startswith("passwd.filtered"))
    assert row.split()[1:] == ["?", "partial"]
    row = next(l for l in lines if l.strip().startswith("fs.hidden *"))
    assert row.split()[2:] == ["yes", "yes"]
    assert lines[-1].startswith("verdict: GAPS")


def test_json_has_the_same_facts():
    data = json.loads(doctor.as_json(sample_report()))
    assert data["pick"]["backend"] == "firejail"
    assert data["items"][1] == {"name": "bwrap", "status": "GAPS", "summary": "not found",
                                "fix": "install bubblewrap", "blocking": False, "data": {}}
    firejail = data["backends"][1]
    assert firejail["usable"] and firejail["partial"] == {"passwd.filtered": "nss"}
    assert data["backends"][0]["state"] == "not found"
    assert data["exit_code"] == 0 and data["require"] == ["fs.hidden"]


def test_render_status_names_an_adopted_allocation():
    s = status.Session("abc123def456", 4242, "bwrap", "/p", 0, False, 1000.0, 0, "bash",
                       allocation="8283")
    text = status.render(status.Status("login1", (s,), 0), now=1065.0)
    assert "session abc123def456 adopted your Slurm allocation 8283" in text


def test_logs_since_last_slurm_and_telemetry():
    entries = [logs.Entry(100.0, (0, 0), {"event": "refusal", "session": "a", "command": "sbatch",
                                          "reason": "chdir", "detail": "x"}),
               logs.Entry(200.0, (1, 0), {"event": "network", "session": "a", "decision":
                                          "refused", "host": "statsig.anthropic.com", "port": 443}),
               logs.Entry(300.0, (1, 1), {"event": "network", "session": "a", "decision":
                                          "refused", "host": "x.test", "port": 443})]
    assert [e.when for e in logs.select(entries, since=150.0)] == [200.0, 300.0]
    assert [e.when for e in logs.select(entries, last=1)] == [300.0]
    assert [e.when for e in logs.select(entries, slurm=True)] == [100.0]
    assert [e.when for e in logs.select(entries, telemetry=False)] == [100.0, 300.0]


def test_logs_since_reads_durations_and_times():
    import datetime

    now = 1_000_000.0
    assert logs.parse_since("90s", now) == now - 90
    assert logs.parse_since("2h", now) == now - 7200
    assert logs.parse_since("1d", now) == now - 86400
    day = datetime.datetime.fromtimestamp(now).date()
    assert logs.parse_since("06:00", now) == datetime.datetime.combine(
        day, datetime.time(6, 0)).timestamp()
    assert logs.parse_since("2026-11-28 06:00", now) == datetime.datetime(
        2026, 11, 28, 6, 0).timestamp()
    with pytest.raises(ValueError, match="neither a duration"):
        logs.parse_since("yesterday", now)


def test_denials_group_repeats_and_keep_slurm_and_network_apart():
    same = {"event": "network", "session": "a", "decision": "refused", "host": "x.test",
            "port": 443, "reason": "not listed"}
    entries = [logs.Entry(float(i), (0, i), dict(same)) for i in (1, 2, 3)]
    entries.append(logs.Entry(4.0, (0, 4), {"event": "refusal", "session": "a",
                                            "command": "srun", "reason": "pty", "detail": "d"}))
    text = logs.render_denials(entries, telemetry_hidden=2).splitlines()
    assert text[0] == "Slurm (the chaperon):" and "pty: d" in text[1]
    assert text[2] == "Network (the egress proxy):" and "(×3, first " in text[3]
    assert len(text) == 5 and "2 refused connection(s)" in text[4]


# `scontrol show config` lines as 22.05 (the host's cluster) and 25.11 print them.
SHOW_CONFIG_2205 = """Configuration data as of 2026-11-28T07:00:00
AuthType                = auth/munge
JobContainerType        = job_container/tmpfs
SlurmctldParameters     = (null)
SLURM_VERSION           = 22.05.8
"""
SHOW_CONFIG_2511 = """AuthType                = auth/slurm
NamespaceType           = namespace/linux
SlurmctldParameters     = enable_configless,idle_on_node_suspend
SLURM_VERSION           = 25.11.2
"""


def test_doctor_reads_the_slurm_site_from_show_config():
    from agent_sandbox.tools import checks

    config = checks.parse_show_config(SHOW_CONFIG_2205)
    assert config["SLURM_VERSION"] == "22.05.8" and config["AuthType"] == "auth/munge"
    facts = checks.slurm_site(config, None, lambda path: path == "/etc/slurm/slurm.conf")
    assert (facts["version"], facts["configless"], facts["served_configless"],
            facts["namespace_type"]) == ("22.05.8", False, False, "job_container/tmpfs")
    facts = checks.slurm_site(checks.parse_show_config(SHOW_CONFIG_2511), None,
                              lambda path: path == checks.CONFIG_CACHE)
    assert (facts["version"], facts["configless"], facts["served_configless"],
            facts["namespace_type"]) == ("25.11.2", True, True, "namespace/linux")
    assert "configless cache" in facts["config_source"]
    nothing = checks.slurm_site({}, None, lambda path: False)
    assert nothing["configless"] and "SRV" in nothing["config_source"]
    assert checks.slurm_site({}, "/site/slurm.conf", lambda p: False)["configless"] is False
    assert checks.slurm_site({"JobContainerType": "job_container/none"}, None,
                             lambda p: True)["namespace_type"] is None


def test_auth_types_from_slurm_conf():
    # Slurm's default is munge; the last setting wins; the alternatives follow.
    assert checks.auth_types_from_conf("ClusterName=x\n") == ["auth/munge"]
    conf = ("AuthType=auth/munge\n# AuthType=auth/none\nauthtype=auth/slurm\n"
            "AuthAltTypes=auth/jwt,auth/slurm\n")
    assert checks.auth_types_from_conf(conf) == ["auth/slurm", "auth/jwt"]
