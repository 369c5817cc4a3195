"""The job holder's peer on kernels without SO_PEERPIDFD (< 6.5, RHEL 9):
the pid SO_PEERCRED gave when the task connected may have been reused by
another process before the holder reads /proc/PID (its job, whether it is
sandboxed). jobs/peer.py pins a pid only if that process holds the other
end of the connection (by inode, from the kernel's unix_diag)."""
from __future__ import annotations

import os
import socket
import subprocess


def test_a_pid_that_does_not_hold_the_peer_socket_is_not_pinned():
    """The pid SO_PEERCRED gave may name another process by now (reused):
    it is pinned only if it holds the other end of the connection."""
    from agent_sandbox.jobs import peer

    ours, theirs = socket.socketpair()
    other = subprocess.Popen(["sleep", "30"])                       # holds nothing
    holding = subprocess.Popen(["sleep", "30"], pass_fds=[theirs.fileno()])
    try:
        assert peer.pin_peer(ours, other.pid) is None
        pinned = peer.pin_peer(ours, holding.pid)
        assert pinned is not None
        os.close(pinned)
    finally:
        for process in (other, holding):
            process.kill()
            process.wait()
        ours.close()
        theirs.close()
