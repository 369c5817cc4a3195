"""Handler table: one module per Slurm command, each a short declaration over
the shared pieces here (the real-command runner, the refusal format), in
chaperon/options.py (the option parser and validator) and in chaperon/scope.py
(which jobs a sandbox may see and touch, and Slurm's output without the tag).

A handler is `handle(ctx, request, out) -> exit code`. It writes the real
command's bytes through `out` (stdout/stderr frames) or a refusal in the
`agent-sandbox: <command>: <what> — <why>. <how instead>` format, exit 1.
"""
from __future__ import annotations

import os
import selectors
import subprocess
import threading

from ..ledger import Ledger

# Stubs that exist but are refused, each with the reason and the way forward.
BLOCKED = {
    "salloc": ("interactive allocations are not available inside the sandbox",
               "Use sbatch for batch work, or srun for a single step"),
    "sattach": ("attaching to a running step would bypass the sandbox's I/O rules",
                "Read the job's output file instead"),
    "sbcast": ("broadcasting files to compute nodes writes outside the project",
               "Keep inputs in the project directory; jobs see it"),
    "scrontab": ("recurring jobs would outlive the sandbox session",
                 "Submit individual jobs with sbatch"),
    "scrun": ("OCI containers are not sandboxed by agent-sandbox",
              "Run the workload with sbatch or srun"),
    "strigger": ("triggers run programs outside any sandbox",
                 "Poll with squeue or use sbatch --dependency"),
    "sreport": ("reports enumerate other users and accounts",
                "Use sacct for your own jobs"),
}


class Context:
    """What every handler may use: the session's configuration, the audit
    log, the ledger and the real Slurm binaries."""

    def __init__(self, config: dict, log):
        self.config = config
        self.log = log
        self.project_dir = config["project_dir"]
        self.session_id = config["session_id"]
        self.scope = config.get("slurm_scope", "project")
        self.binaries: dict[str, str] = config.get("slurm_binaries", {})
        self.ledger = Ledger(config["state_dir"], self.session_id, self.project_dir)
        self.user = config.get("user") or ""
        self.lock = threading.Lock()
        self.gone: set[str] = set()      # ledger ids Slurm has forgotten (scope.live_ids)
        self.pruned_at = float("-inf")   # when `gone` was last brought up to date
        self.cache: dict = {}            # per-session facts (sacct's field table, …)

    def binary(self, name: str) -> str | None:
        return self.binaries.get(name)


def refuse(ctx: Context, out, command: str, reason: str, what: str, why: str,
           fix: str) -> int:
    ctx.log.refusal(command, reason, f"{what} — {why}")
    end = "" if fix.endswith((".", "!", "?")) else "."
    out.stderr(f"agent-sandbox: {command}: {what} — {why}. {fix}{end}\n".encode())
    return 1


def refuse_with(ctx: Context, out, command: str, refusal) -> int:
    """`refuse` for a submit.Refusal raised by the checks."""
    return refuse(ctx, out, command, refusal.reason, refusal.what, refusal.why, refusal.fix)


def binary_and_args(ctx: Context, request, spec):
    """The real binary of `spec.command` and the caller's arguments read by
    its allow-list (options anywhere, as Slurm's getopt permutes them).
    Raises submit.Refusal."""
    from ..options import OptionRefused
    from ..scope import parse_permuted
    from ..submit import Refusal, from_option

    binary = ctx.binary(spec.command)
    if binary is None:
        raise Refusal("not_installed", f"{spec.command} is refused",
                      "it is not installed here", "Ask your site admin")
    try:
        return binary, parse_permuted(spec, request.args_str)
    except OptionRefused as refused:
        raise from_option(refused) from None


def run_real(out, argv: list[str], *, env: dict, cwd: str, stdin: bytes = b"",
             capture: bool = False, on_stdout=None):
    """Run a real Slurm command and stream its stdout/stderr as produced.
    argv[0] is the binary's absolute path; the program sees its plain name as
    argv[0], as when the user runs it, so its messages read the same.
    With capture=True stdout is collected and returned instead of streamed;
    `on_stdout` receives stdout chunks instead of the client.
    Returns (exit code, captured stdout)."""
    proc = subprocess.Popen([os.path.basename(argv[0]), *argv[1:]], executable=argv[0], stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            close_fds=True, start_new_session=True)
    if stdin:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    captured: list[bytes] = []
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
    selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
    try:
        open_streams = 2
        while open_streams:
            for key, _ in selector.select():
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                elif key.data == "stdout":
                    if capture:
                        captured.append(data)
                    elif on_stdout:
                        on_stdout(data)
                    else:
                        out.stdout(data)
                else:
                    out.stderr(data)
    except BaseException:
        proc.kill()   # the client went away: do not leave the real command behind
        raise
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    code = proc.wait()
    return (128 - code if code < 0 else code), b"".join(captured)


def blocked(ctx: Context, request, out) -> int:
    what, fix = BLOCKED.get(request.command, (
        f"{request.command} is not a Slurm command the sandbox proxies",
        "Use sbatch, srun, squeue, scancel, scontrol, sacct, sinfo or sdiag"))
    return refuse(ctx, out, request.command, "blocked_command",
                  f"{request.command} is refused", what, fix)


def _table() -> dict:
    from . import (sacct, sacctmgr, sbatch, scancel, scontrol, sdiag, sinfo, sprio, squeue,
                   srun, sshare, sstat)

    return {
        "sbatch": sbatch.handle,
        "srun": srun.handle,
        "squeue": squeue.handle,
        "scancel": scancel.handle,
        "scontrol": scontrol.handle,
        "sstat": sstat.handle,
        "sacct": sacct.handle,
        "sacctmgr": sacctmgr.handle,
        "sprio": sprio.handle,
        "sshare": sshare.handle,
        "sinfo": sinfo.handle,
        "sdiag": sdiag.handle,
    }


HANDLERS: dict = {}


def dispatch(ctx: Context, request, out) -> int:
    if not HANDLERS:
        HANDLERS.update(_table())
    handler = HANDLERS.get(request.command, blocked)
    ctx.log.request(request.command, [os.fsdecode(a) for a in request.args],
                    os.fsdecode(request.cwd))
    if request.has_nul:
        # No program can receive a NUL byte (exec would fail in every handler).
        return refuse(ctx, out, request.command, "nul_byte",
                      "an argument or variable with a NUL byte is refused",
                      "no program can receive it", "Remove it")
    return handler(ctx, request, out)
