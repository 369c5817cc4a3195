#!/usr/bin/env python3
"""GPUs inside the sandbox: CUDA's initialisation, an 8192³ bf16 matmul rate
and CUDA IPC between two processes, outside (the same-run baseline) and
inside each backend, in one run (issue 31 item 5).

The workload runs on PyTorch: `torch.cuda.init()` timed (on landlock it
failed with CUDA_ERROR_OPERATING_SYSTEM, 304, while /proc lacked TRUNCATE),
then 20 timed 8192×8192×8192 bf16 matmuls after a warm-up (TFLOP/s), then a
CUDA tensor handed to a second process through a torch.multiprocessing
queue (cudaIpcGetMemHandle; the queue's semaphore lives in /dev/shm) which
adds one and hands it back. Inside, the sandbox is given NVIDIA's devices
(DEVICES=(/dev/nvidia* /dev/nvidia-caps/*)) through a conf.d file of your
configuration that applies to this project alone (PROJECT_MATCH), removed
at the end.

Run as an ordinary user on a GPU node, in a project directory (under
ALLOWED_PROJECT_PARENTS) from which the interpreter with torch is visible
inside (a venv in the project, a system or /opt install; a venv elsewhere in
your home needs HOME_READONLY+=(…)):
    python3 benchmarks/gpu.py [--python PATH] [--backends bwrap,firejail,landlock]
                              [--launcher PATH]
Where there is no NVIDIA GPU, no PyTorch for PATH's interpreter, or CUDA does
not work outside, it prints "no GPU/torch here: <why>" and exits 0 (CI runs
it so). Exits 1 when a backend fails what works outside.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

WORKLOAD = r"""
import sys, time
import torch
import torch.multiprocessing as mp

def child(inbox, outbox):
    tensor = inbox.get()
    tensor += 1
    torch.cuda.synchronize()
    outbox.put("done")

def main():
    start = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print(f"init_ms {(time.perf_counter() - start) * 1e3:.1f}")
    print(f"device {torch.cuda.get_device_name(0)}")
    n, rounds = 8192, 20
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(rounds):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = begin.elapsed_time(end) / 1e3
    print(f"tflops {2 * n ** 3 * rounds / seconds / 1e12:.1f}")
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    shared = torch.zeros(1024, device="cuda")
    proc = ctx.Process(target=child, args=(inbox, outbox))
    proc.start()
    inbox.put(shared)
    outbox.get(timeout=120)
    proc.join(60)
    ok = proc.exitcode == 0 and float(shared.sum()) == 1024.0
    print("ipc ok" if ok else f"ipc failed (exit {proc.exitcode}, sum {float(shared.sum())})")

if __name__ == "__main__":
    main()
"""
LINE = re.compile(r"^(init_ms|tflops) ([\d.]+)$", re.M)
DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*")
SCRIPT = ".bench-gpu.py"
CONF = "zz-benchmarks-gpu.conf"


def no_gpu_here(python: str) -> str | None:
    """Why this host cannot run the benchmark, or None."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no NVIDIA device (/dev/nvidia0…)"
    probe = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return f"no PyTorch for {python}"
    if probe.stdout.strip() != "True":
        return f"torch.cuda.is_available() is False outside the sandbox ({python})"
    return None


def run(argv: list[str]) -> tuple[dict, str, str]:
    """(figures, the ipc line, everything it printed) of one workload run."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        out = result.stdout + result.stderr
        code = result.returncode
    except subprocess.TimeoutExpired as exc:
        out, code = f"timed out: {exc}", -1
    figures = {key: float(value) for key, value in LINE.findall(out)}
    ipc = next((line for line in out.splitlines() if line.startswith("ipc ")), "ipc not run")
    if code != 0 and "tflops" not in figures:
        ipc = f"failed (exit {code})"
    return figures, ipc, out


def config_dir() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return os.path.join(base, "agent-sandbox")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=shutil.which("python3") or sys.executable)
    parser.add_argument("--backends", default="bwrap,firejail,landlock")
    parser.add_argument("--launcher", default=shutil.which("agent-sandbox") or "agent-sandbox")
    args = parser.parse_args()
    why = no_gpu_here(args.python)
    if why:
        print(f"no GPU/torch here: {why} — nothing measured (run this on a GPU node with "
              "PyTorch: python3 benchmarks/gpu.py --python PATH)")
        return 0
    project = os.path.realpath(os.getcwd())
    conf_d = os.path.join(config_dir(), "conf.d")
    conf = os.path.join(conf_d, CONF)
    with open(SCRIPT, "w", encoding="utf-8") as handle:
        handle.write(WORKLOAD)
    os.makedirs(conf_d, mode=0o700, exist_ok=True)
    with open(conf, "w", encoding="utf-8") as handle:
        handle.write(f"# benchmarks/gpu.py, removed when it ends\nPROJECT_MATCH=({project})\n"
                     f"DEVICES+=({' '.join(DEVICES)})\n")
    rows, failed = [], False
    try:
        rows.append(("outside",) + run([args.python, SCRIPT]))
        for backend in [b for b in args.backends.split(",") if b]:
            rows.append((backend,) + run([args.launcher, "run", "--backend", backend, "--",
                                          args.python, SCRIPT]))
    finally:
        for path in (SCRIPT, conf):
            if os.path.exists(path):
                os.unlink(path)
    print(f"CUDA in the sandbox ({args.python}; DEVICES+=({' '.join(DEVICES)})):")
    print(f"  {'where':10} {'cuInit ms':>10} {'bf16 TFLOP/s':>13}  CUDA IPC")
    for where, figures, ipc, out in rows:
        init = f"{figures['init_ms']:.0f}" if "init_ms" in figures else "-"
        rate = f"{figures['tflops']:.0f}" if "tflops" in figures else "-"
        print(f"  {where:10} {init:>10} {rate:>13}  {ipc.removeprefix('ipc ')}")
    baseline = rows[0][1].get("tflops")
    for where, figures, ipc, out in rows:
        if "tflops" not in figures or ipc != "ipc ok":
            failed = True
            tail = "\n    ".join(out.strip().splitlines()[-8:])
            print(f"{where}: the workload failed:\n    {tail}")
        elif baseline and where != "outside":
            print(f"  {where}: {figures['tflops'] / baseline:.2f}× the rate outside")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
