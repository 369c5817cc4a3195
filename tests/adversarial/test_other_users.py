"""No other user's name or uid through pass-through output (issue 11, item
6), from inside a real sandbox: sdiag after another user talked to Slurm, a
node reason set by root, a reservation for another user. Each check first
shows that the real command, outside, does name the other user."""
from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from tests.support.clusters import as_other, outside

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def test_sdiag_shows_only_the_callers_rpc_statistics(user, project, sessions, other_user):
    for _ in range(3):
        as_other(other_user, "squeue", "-h")
    session = sessions(project)
    real = outside(user, "sdiag").stdout
    assert re.search(rf"\n\t{other_user.pw_name} +\( *{other_user.pw_uid}\)", real)
    inside = session.run("sdiag")
    assert inside.returncode == 0, inside
    section = inside.stdout.split("Remote Procedure Call statistics by user\n")[1]
    users = re.findall(r"^\t(\S+) +\( *(\d+)\)", section.split("\n\n")[0], re.M)
    assert users and {name for name, _ in users} == {user.name}, users
    assert other_user.pw_name not in inside.stdout and "root " not in section


def test_node_reasons_and_reservations_name_no_other_user(user, project, sessions,
                                                         slurm_cluster, other_user):
    session = sessions(project)
    node = slurm_cluster.node
    reason = f"adversarial-{uuid.uuid4().hex[:6]}"
    reservation = f"adv_{uuid.uuid4().hex[:6]}"
    subprocess.run(["scontrol", "create", "reservation", f"ReservationName={reservation}",
                    f"Users={other_user.pw_name}", "StartTime=now+1day", "Duration=10",
                    f"Nodes={node}", "Flags=IGNORE_JOBS"], check=True, capture_output=True)
    # Draining the only node holds other tests' jobs back for these seconds.
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                    f"Reason={reason}"], check=True, capture_output=True)
    try:
        assert "root" in outside(user, "sinfo", "-R").stdout           # the real answer names root
        assert "[root@" in outside(user, "scontrol", "show", "node", node).stdout
        for argv in (["sinfo", "-R"], ["sinfo", "-R", "-l"], ["sinfo", "-o", "%E|%u|%N"],
                     ["sinfo", "-o", "%E %U"], ["sinfo", "-O", "reason,user,userlong,nodelist"],
                     ["sinfo", "--json"], ["sinfo", "--yaml"], ["sinfo", "-R", "-h"],
                     ["scontrol", "show", "node", node], ["scontrol", "-o", "show", "node"]):
            inside = session.run(*argv)
            assert inside.returncode == 0 and reason in inside.stdout, (argv, inside)
            assert not re.search(r"\broot\b", inside.stdout), (argv, inside.stdout)
        # The rest is the real command's own answer for the format without the user field.
        assert session.run("sinfo", "-R").stdout == outside(
            user, "sinfo", "-R", "-o", "%20E %19H %N").stdout
        assert session.run("sinfo", "-o", "%E|%u|%N").stdout == outside(
            user, "sinfo", "-o", "%E|%N").stdout
        refused = session.run("sinfo", "-o", "%all")
        assert refused.returncode == 1 and re.fullmatch(
            r"agent-sandbox: sinfo: .+ — .+\. .+\n", refused.stderr), refused
        assert other_user.pw_name in outside(user, "scontrol", "show", "reservation").stdout
        for argv in (["scontrol", "show", "reservation"],
                     ["scontrol", "-o", "show", "reservation", reservation]):
            inside = session.run(*argv)
            assert inside.returncode == 0 and reservation in inside.stdout, inside
            assert other_user.pw_name not in inside.stdout and "Users=(null)" in inside.stdout
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                       capture_output=True)
        subprocess.run(["scontrol", "delete", f"ReservationName={reservation}"],
                       capture_output=True)
