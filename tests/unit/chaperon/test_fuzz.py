"""Fuzzing in CI time: at least 100,000 generated inputs each over the
CHAPERON/1 request decoder, the sbatch option validator (command line and
#SBATCH scripts) and the output-path check. Seeded, so a failure reproduces;
the figures are printed (pytest -s)."""
from __future__ import annotations

import os
import random
import time

from chaperon.refusal import Refusal
from chaperon.slurm.directives import parse_script
from chaperon.slurm.sbatch_options import SBATCH, parse
from chaperon.submit import open_project, output_pattern
from chaperon.wire import protocol

SEED = 20261123
ROUNDS = 100_000


def _valid_frame(rng: random.Random) -> bytes:
    args = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 12)))
            for _ in range(rng.randrange(0, 5))]
    return protocol.encode_request(protocol.Request(
        rng.choice(["sbatch", "squeue", "srun", "x"]), args, cwd=b"/p",
        env=[(b"A", b"1")], stdin=rng.choice([None, b"", b"data"]),
        resp_path="/run/agent-sandbox/chaperon/conn/x.resp"))


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(5)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.getrandbits(8)
        elif op == 1:
            data[pos:pos] = rng.choice([b"\n", b"END\n", b"ARG ", b"=", b"\0", b"CHAPERON/1 x\n",
                                        b"RESP /a\n", b"CWD Lw==\n", b"STDIN \n"])
        elif op == 2 and data:
            del data[pos:pos + rng.randrange(1, 8)]
        elif op == 3:
            data[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 16)))
        else:
            data = data[:pos]
    return bytes(data)


def test_request_decoder_never_crashes():
    rng = random.Random(SEED)
    seeds = [_valid_frame(rng) for _ in range(64)]
    accepted = refused = 0
    start = time.perf_counter()
    for _ in range(ROUNDS):
        data = _mutate(rng, rng.choice(seeds))
        decoder = protocol.RequestDecoder()
        cut = rng.randrange(len(data) + 1)
        try:
            for piece in (data[:cut], data[cut:]):
                if piece:
                    decoder.feed(piece)
            decoder.feed(b"")
            while True:
                event = decoder.next_event()
                if event is None or isinstance(event, protocol.Closed):
                    break
                assert isinstance(event, protocol.Request)
                accepted += 1
        except protocol.ProtocolError as exc:
            assert exc.fault == "peer"
            refused += 1
    took = time.perf_counter() - start
    print(f"\ndecoder fuzz: {ROUNDS} inputs, {accepted} requests accepted, {refused} refused, "
          f"0 crashes, {took:.1f} s")
    assert accepted + refused >= ROUNDS * 0.9


DENIED = frozenset(o.name for o in SBATCH.options if o.denial is not None)
WORDS = ["-p", "debug", "--partition", "--part=x", "-D", "/tmp", "--ch=/", "--chdir", "--prolog",
         "--pro", "--uid=0", "--wrap", "true", "-o", "out.%j", "--output=../x", "-e", "--export",
         "ALL,LD_PRELOAD=/x", "--export=NONE", "--get-user-env", "--mail-user=a", "--mail",
         "-J", "--job-name=a/b", "--comment", "x y", "--", "-H", "-Hv", "-W", "--time=10",
         "--array=1-3", "--hold", "--container", "--bb", "--bbf=x", "-", "script.sh", ":",
         "--propagate", "--export-file", "-F", "--nodelist=/etc/x", "--gres=gpu:1", "=", "--=",
         "--no-requeue", "--wait", "--test-only", "--parsable", "--nice=-5", "--nice"]


def test_option_validator_never_yields_a_denied_option():
    rng = random.Random(SEED)
    accepted = refused = 0
    start = time.perf_counter()
    for _ in range(ROUNDS):
        argv = [rng.choice(WORDS) if rng.random() < 0.85 else
                "".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(0, 8)))
                for _ in range(rng.randrange(0, 7))]
        try:
            parsed = parse(argv)
        except Refusal:
            refused += 1
            continue
        accepted += 1
        emitted = {item.name for item in parsed.items if item.emit}
        assert not emitted & DENIED, (argv, emitted & DENIED)
        for word in parsed.argv():
            assert word.startswith("--") and word[2:].split("=", 1)[0] not in DENIED, argv
    took = time.perf_counter() - start
    print(f"\noption fuzz: {ROUNDS} command lines, {accepted} accepted, {refused} refused, "
          f"0 denied options emitted, {took:.1f} s")
    assert accepted > 1000 and refused > 1000


def test_sbatch_directives_never_yield_a_denied_option():
    rng = random.Random(SEED + 1)
    accepted = refused = 0
    rounds = ROUNDS // 4
    for _ in range(rounds):
        lines = ["#!/bin/sh"]
        for _ in range(rng.randrange(1, 4)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 4)))
            lines.append(rng.choice(["#SBATCH ", "#SBATCH\t", "#SLURM ", "# SBATCH "]) + words)
        lines.append("echo body")
        try:
            parsed = parse_script("\n".join(lines)).parsed
        except Refusal:
            refused += 1
            continue
        accepted += 1
        assert not {i.name for i in parsed.items if i.emit} & DENIED, lines
    print(f"\ndirective fuzz: {rounds} scripts, {accepted} accepted, {refused} refused")
    assert accepted and refused


class _Ctx:
    project_dir = "/home/u/proj"


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def test_output_paths_never_resolve_outside_the_project(tmp_path):
    project = tmp_path / "proj"
    (project / "logs").mkdir(parents=True)
    (project / "escape").symlink_to(tmp_path)
    ctx = _Ctx()
    ctx.project_dir = str(project)
    pieces = ["logs", "..", ".", "escape", "%j", "out", "/", "a%x", "//", "%A_%a", "proj"]
    rng = random.Random(SEED + 2)
    accepted = refused = 0
    for _ in range(ROUNDS):
        pattern = "/".join(rng.choice(pieces) for _ in range(rng.randrange(1, 5)))
        if rng.random() < 0.2:
            pattern = str(tmp_path) + "/" + pattern
        try:
            with open_project(ctx) as opened:
                full = output_pattern(opened, str(project), pattern, "--output")
        except Refusal:
            refused += 1
            continue
        accepted += 1
        assert within(os.path.realpath(os.path.dirname(full)), str(project)), pattern
    print(f"\noutput path fuzz: {ROUNDS} patterns, {accepted} accepted, {refused} refused, "
          "none outside the project")
    assert accepted and refused
