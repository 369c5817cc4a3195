"""What every handler shares: the `Context` of the session, the one place a
`Refusal` becomes the house message and EXIT_REFUSED (`refuse`), the real
binary looked up once ("not installed" written once), the caller's
arguments read by a command's allow-list, and the runner that streams a
real Slurm command's output (`run_real`) with its exit status mapped once
(`exit_status`).

Imports no handler module: handlers import this, and the handler table in
chaperon/handlers/__init__.py loads them lazily, so there is no cycle.
"""
from __future__ import annotations

import os
import selectors
import subprocess
import threading

from ..ledger import Ledger
from ..refusal import EXIT_REFUSED, Refusal
from ..slurm.options import parse_permuted


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
        self.ledger = Ledger(config["state_dir"], self.session_id, self.project_dir,
                             config.get("job_session") or "")
        self.user = config.get("user") or ""
        self.lock = threading.Lock()
        self.gone: set[str] = set()      # ledger ids Slurm has forgotten (scope.live_ids)
        self.pruned_at = float("-inf")   # when `gone` was last brought up to date
        self.cache: dict = {}            # per-session facts (sacct's field table, …)

    def binary(self, name: str) -> str | None:
        return self.binaries.get(name)

    def slurm_series(self) -> str:
        """The Slurm release series whose option tables apply (versions.py):
        the version of the real sbatch (or srun), found once per session
        (slurmversion.py); the nearest older table for an unknown one."""
        series = self.cache.get("slurm_series")
        if series is None:
            from ..slurm.versions import series_for
            from ..slurmversion import detect
            version = detect(self.binaries.get("sbatch") or self.binaries.get("srun"))[0]
            series = self.cache["slurm_series"] = series_for(version)[0]
        return series

    def real_binary(self, name: str) -> str:
        """The real binary of `name`; refused when this host has none."""
        binary = self.binaries.get(name)
        if binary is None:
            raise Refusal("not_installed", f"{name} is refused", "it is not installed here",
                          "Ask your site admin")
        return binary


def refuse(ctx: Context, out, command: str, refusal: Refusal) -> int:
    """Log a refusal and print it in the house format; EXIT_REFUSED."""
    ctx.log.refusal(command, refusal.reason, f"{refusal.what} — {refusal.why}")
    fix = refusal.instead
    end = "" if fix.endswith((".", "!", "?")) else "."
    out.stderr(f"agent-sandbox: {command}: {refusal.what} — {refusal.why}. {fix}{end}\n"
               .encode())
    return EXIT_REFUSED


def binary_and_args(ctx: Context, request, spec):
    """The real binary of `spec.command` and the caller's arguments read by
    its allow-list (options anywhere, as Slurm's getopt permutes them).
    Raises Refusal."""
    return ctx.real_binary(spec.command), parse_permuted(spec, request.args_str)


def exit_status(returncode: int) -> int:
    """A real command's exit status as a shell reports it (128+N for a
    signal), the code the stub exits with."""
    return 128 - returncode if returncode < 0 else returncode


def run_real(out, argv: list[str], *, env: dict, cwd: str, stdin: bytes = b"",
             capture: bool = False, on_stdout=None):
    """Run a real Slurm command and stream its stdout/stderr as produced.
    argv[0] is the binary's absolute path; the program sees its plain name as
    argv[0], as when the user runs it, so its messages read the same.
    With capture=True stdout is collected and returned instead of streamed;
    `on_stdout` receives stdout chunks instead of the client.
    Returns (exit code, captured stdout)."""
    proc = subprocess.Popen([os.path.basename(argv[0]), *argv[1:]], executable=argv[0],
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
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
    return exit_status(code), b"".join(captured)
