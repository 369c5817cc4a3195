#!/usr/bin/env python3
"""The egress path's cost on loopback against same-run baselines (issue 16 item 7).

A server process on 127.0.0.2 (echo, bulk, and paced at 100 MB/s); the
installed proxy (`python3 -I -m egress SPEC`, rule 127.0.0.2/32:PORT) with
the installed relay (netrelay.py) in front of it; the client in this
process. Each figure is measured direct and through relay+proxy (HTTP
CONNECT, as curl and Python send it), in alternating rounds so a busy
machine weighs on both alike:

1. connect: median time from connect() to the first echoed byte.
   Target: relay+proxy adds at most 2 ms.
2. bulk: download throughput (best round). Target: at least 1 GB/s through
   relay+proxy.
3. paced: a server limited to 100 MB/s. Target: at most 5 % slower.

Run (as root or any user) after scripts/install.sh:
    python3 benchmarks/network.py [--prefix /opt/agent-sandbox] [--rounds N]
Prints the figures and PASS/FAIL per target; exits 1 if a target fails.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = r'''
import os, socket, sys, threading, time
CHUNK = memoryview(bytes(4 << 20))
def handle(conn):
    with conn:
        request = b""
        while b"\n" not in request:
            data = conn.recv(64)
            if not data:
                return
            request += data
        request, _, data = request.partition(b"\n")
        mode, *args = request.split()
        if mode == b"echo":
            while data:
                conn.sendall(data)
                data = conn.recv(65536)
                conn.sendall(data)
        elif mode == b"bulk":
            left = int(args[0])
            while left > 0:
                left -= conn.send(CHUNK[:min(left, len(CHUNK))])
        elif mode == b"paced":
            left, rate, step = int(args[0]), int(args[1]), 1 << 20
            start, sent = time.perf_counter(), 0
            while sent < left:
                conn.sendall(CHUNK[:min(step, left - sent)])
                sent += min(step, left - sent)
                delay = start + sent / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.2", 0))
listener.listen(128)
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
'''


def _open(target, via) -> socket.socket:
    """A connection to target, direct or through the relay (HTTP CONNECT)."""
    if via is None:
        sock = socket.create_connection(target)
    else:
        sock = socket.create_connection(("127.0.0.1", via))
        sock.sendall(f"CONNECT {target[0]}:{target[1]} HTTP/1.1\r\n\r\n".encode())
        answer = b""
        while not answer.endswith(b"\r\n\r\n"):
            data = sock.recv(1)
            if not data:
                raise RuntimeError("the proxy closed the connection")
            answer += data
        if not answer.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"the proxy refused: {answer!r}")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def connect_ms(target, via) -> float:
    start = time.perf_counter()
    with _open(target, via) as sock:
        sock.sendall(b"echo\nx")
        if sock.recv(1) != b"x":
            raise RuntimeError("no echo")
        return (time.perf_counter() - start) * 1000


def download(target, via, request: bytes, size: int) -> float:
    """Seconds to receive `size` bytes after sending `request`."""
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    with _open(target, via) as sock:
        start = time.perf_counter()
        sock.sendall(request)
        got = 0
        while got < size:
            count = sock.recv_into(view)
            if not count:
                raise RuntimeError(f"short transfer: {got} of {size}")
            got += count
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", default=os.environ.get("AGENT_SANDBOX_PREFIX",
                                                           "/opt/agent-sandbox"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connects", type=int, default=200)
    parser.add_argument("--bulk-mb", type=int, default=2000)
    parser.add_argument("--paced-mb", type=int, default=200)
    args = parser.parse_args()
    os.environ["AGENT_SANDBOX_TEST_PREFIX"] = args.prefix
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.egresskit import free_port, start_proxy, start_relay, stop_proxy, write_spec

    server = subprocess.Popen([sys.executable, "-I", "-c", SERVER], stdout=subprocess.PIPE)
    directory = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    proxy = relay = None
    try:
        port = int(server.stdout.readline())
        target = ("127.0.0.2", port)
        spec_path, spec = write_spec(directory, [f"127.0.0.2/32:{port}"], session="bench")
        proxy = start_proxy(spec_path)
        via = free_port()
        relay = start_relay(via, spec["socket"])
        ways = {"direct": None, "relay+proxy": via}
        for way in ways.values():      # warm up both paths
            connect_ms(target, way)
            download(target, way, b"bulk %d\n" % (64 << 20), 64 << 20)

        connects = {name: [] for name in ways}
        bulk = {name: [] for name in ways}
        paced = {name: [] for name in ways}
        bulk_size, paced_size = args.bulk_mb * 10**6, args.paced_mb * 10**6
        for _ in range(args.rounds):
            for name, way in ways.items():
                connects[name] += [connect_ms(target, way)
                                   for _ in range(args.connects // args.rounds)]
                bulk[name].append(bulk_size / download(target, way, b"bulk %d\n" % bulk_size,
                                                       bulk_size) / 1e9)
        for _ in range(2):
            for name, way in ways.items():
                request = b"paced %d %d\n" % (paced_size, 100 * 10**6)
                paced[name].append(paced_size / download(target, way, request, paced_size)
                                   / 1e6)
    finally:
        for process in (relay, server):
            if process is not None:
                process.kill()
                process.wait()
        if proxy is not None:
            stop_proxy(proxy)
        shutil.rmtree(directory, ignore_errors=True)

    med = {n: statistics.median(v) for n, v in connects.items()}
    best = {n: max(v) for n, v in bulk.items()}
    rate = {n: statistics.median(v) for n, v in paced.items()}
    added = med["relay+proxy"] - med["direct"]
    slower = (1 - rate["relay+proxy"] / rate["direct"]) * 100
    results = [
        (f"connect to first byte: direct {med['direct']:.3f} ms, relay+proxy "
         f"{med['relay+proxy']:.3f} ms (median of {len(connects['direct'])}): "
         f"+{added:.3f} ms (target <= 2 ms)", added <= 2.0),
        (f"bulk download: direct {best['direct']:.2f} GB/s, relay+proxy "
         f"{best['relay+proxy']:.2f} GB/s (best of {args.rounds} x {args.bulk_mb} MB; "
         f"rounds {', '.join(f'{x:.2f}' for x in bulk['relay+proxy'])}) (target >= 1 GB/s)",
         best["relay+proxy"] >= 1.0),
        (f"server paced at 100 MB/s: direct {rate['direct']:.1f} MB/s, relay+proxy "
         f"{rate['relay+proxy']:.1f} MB/s: {slower:+.1f} % slower (target <= 5 %)",
         slower <= 5.0),
    ]
    failed = False
    for text, ok in results:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
