"""Who is at the other end of a connected Unix socket, pinned by a pidfd so
that what is read of the process in /proc is read of that process.

SO_PEERCRED gives the pid the peer had when it connected; the process may
have ended and its pid been reused since. Linux 6.5 gives a pidfd of the
peer itself (SO_PEERPIDFD). Older kernels (RHEL 9's 5.14) have pidfd_open
(5.3) and the kernel's socket diagnostics (unix_diag, 3.3): the pid is
opened, and taken only if that process holds the other end of the
connection, by inode. A pid reused meanwhile names another process, which
holds that socket only if the peer handed it on (its child, which the
caller judges as itself). The caller reads /proc/PID and then checks that
the pidfd is still alive (pidfd_send_signal 0): while it is, the pid was
not reused.
"""
from __future__ import annotations

import os
import socket

SO_PEERPIDFD = 77                 # Linux 6.5; not named by Python 3.11
SOCK_DIAG_BY_FAMILY, NETLINK_SOCK_DIAG, UDIAG_SHOW_PEER, UNIX_DIAG_PEER = 20, 4, 4, 2


def peer_inode(conn: socket.socket) -> int | None:
    """The inode of the other end of the connected Unix socket `conn`, from
    the kernel's socket diagnostics (unix_diag, since Linux 3.3), or None."""
    import struct

    ino = os.fstat(conn.fileno()).st_ino
    request = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, ino,
                          UDIAG_SHOW_PEER, 0xFFFFFFFF, 0xFFFFFFFF)     # no cookie
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
            diag.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, 1, 1, 0)
                      + request)
            data = diag.recv(8192)
        length, kind = struct.unpack_from("=IH", data)
        if kind != SOCK_DIAG_BY_FAMILY or length > len(data):
            return None                        # NLMSG_ERROR: not answered
        if struct.unpack_from("=I", data, 20)[0] != ino:
            return None
        offset = 32                            # nlmsghdr (16) + unix_diag_msg (16)
        while offset + 4 <= length:
            size, attribute = struct.unpack_from("=HH", data, offset)
            if size < 4:
                return None
            if attribute == UNIX_DIAG_PEER and size >= 8:
                return struct.unpack_from("=I", data, offset + 4)[0]
            offset += (size + 3) & ~3
    except (OSError, struct.error):
        return None
    return None


def pin_peer(conn: socket.socket, pid: int) -> int | None:
    """A pidfd of the process `pid` if it holds the other end of `conn` (by
    inode, among /proc/PID/fd), else None."""
    peer = peer_inode(conn)
    if peer is None:
        return None
    try:
        pinned = os.pidfd_open(pid)
    except OSError:
        return None
    wanted = f"socket:[{peer}]"
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{name}") == wanted:
                    return pinned
            except OSError:
                continue
    except OSError:
        pass
    os.close(pinned)
    return None


def pidfd(conn: socket.socket, pid: int) -> int | None:
    """A pidfd of the peer of `conn` (whose SO_PEERCRED pid is `pid`), or
    None when this kernel gives no way to pin it."""
    try:
        return conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        return pin_peer(conn, pid)
