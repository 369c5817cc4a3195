"""Keystroke echo round trip: through the launcher's relay (process/terminal.py)
versus directly on a pty, in the same run.

Both sides drive the same echo program (`stty raw -echo; exec cat`) and time
one byte written to the terminal's master until it is read back. The relay
side puts the relay between: outer pty → relay → inner pty → cat, the path
a keystroke takes in `agent-sandbox bash` (without the sandbox itself, whose
cost is not per keystroke).

    python benchmarks/tty.py [--rounds N]
"""
from __future__ import annotations

import argparse
import os
import select
import statistics
import sys
import time

ECHO = ["/bin/sh", "-c", "stty raw -echo; echo ready; exec cat"]


def _spawn_on(slave: int, argv: list[str]) -> int:
    return os.posix_spawn(argv[0], argv, dict(os.environ),
                          file_actions=[(os.POSIX_SPAWN_DUP2, slave, n) for n in (0, 1, 2)],
                          setsid=True)


def _read_until(fd: int, wanted: bytes) -> None:
    seen = b""
    while wanted not in seen:
        if not select.select([fd], [], [], 10)[0]:
            raise SystemExit(f"no {wanted!r} from the echo program: {seen!r}")
        seen += os.read(fd, 4096)


def _round_trips(master: int, rounds: int) -> list[float]:
    _read_until(master, b"ready")
    times = []
    for _ in range(rounds + 20):                 # the first 20 warm up
        start = time.perf_counter()
        os.write(master, b"x")
        _read_until(master, b"x")
        times.append(time.perf_counter() - start)
    return times[20:]


def _relay_child() -> int:
    """Runs on the outer pty: the launcher's relay around the echo program."""
    from agent_sandbox.process import terminal

    pty = terminal.open_pty(0)
    pid = _spawn_on(pty.slave, ECHO)
    pty.close_slave()
    try:
        return os.waitstatus_to_exitcode(terminal.relay(pty, pid))
    finally:
        pty.close()


def measure(argv: list[str], rounds: int) -> list[float]:
    master, slave = os.openpty()
    pid = _spawn_on(slave, argv)
    os.close(slave)
    try:
        return _round_trips(master, rounds)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(master)


def _show(name: str, times: list[float]) -> float:
    micro = sorted(t * 1e6 for t in times)
    median = statistics.median(micro)
    print(f"{name:8s} median {median:7.1f} µs   p95 {micro[int(len(micro) * .95)]:7.1f} µs"
          f"   max {micro[-1]:8.1f} µs")
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--relay-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay_child:
        return _relay_child()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    relay = [sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); "
             "sys.argv[1:] = ['--relay-child']; import runpy; "
             f"runpy.run_path({os.path.abspath(__file__)!r}, run_name='__main__')"]
    print(f"keystroke echo round trip, {args.rounds} rounds each (same run)")
    direct = _show("direct", measure(ECHO, args.rounds))
    relayed = _show("relay", measure(relay, args.rounds))
    print(f"relay adds {relayed - direct:.1f} µs per keystroke (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
