"""agent-sandbox(1) generated from the command tree, so the man page cannot
drift from `--help`.

typer has no man page generator; this walks the click command tree typer
builds (every subcommand, its arguments and options with their help) and
writes troff with the man(7) macros. `scripts/install.sh` runs
`python -m agent_sandbox.cli.manpage` and installs the result as
/usr/local/share/man/man1/agent-sandbox.1. `render` is pure (command tree
in, text out).
"""
from __future__ import annotations

import datetime
import sys


def _escape(text: str) -> str:
    """troff-safe text: backslashes doubled, a leading . or ' neutralised,
    hyphens in option names kept as real minus signs."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.splitlines() or [""]:
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _params(command) -> list[str]:
    out = []
    for param in command.params:
        if getattr(param, "hidden", False) or param.name in ("install_completion",
                                                            "show_completion"):
            continue
        if param.param_type_name == "option":
            names = ", ".join(param.opts + param.secondary_opts)
            metavar = "" if param.is_flag else f" {param.metavar or param.name.upper()}"
            out += [".TP", f"\\fB{_escape(names)}\\fR{_escape(metavar)}",
                    _escape(param.help or "")]
        else:
            out += [".TP", f"\\fI{_escape(param.metavar or param.name.upper())}\\fR",
                    _escape(getattr(param, "help", None) or "")]
    return out


def _walk(command, path: tuple[str, ...]):
    """(path, command) for every leaf command, depth first in help order."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield path, command
        return
    for name, sub in subcommands.items():
        if not getattr(sub, "hidden", False):
            yield from _walk(sub, (*path, name))


def render(root, *, version: str, date: str, examples=(),
           admin_config: str = "/etc/agent-sandbox/sandbox.conf") -> str:
    head = [f'.TH AGENT\\-SANDBOX 1 "{date}" "agent\\-sandbox {version}" "User Commands"',
            ".SH NAME", "agent\\-sandbox \\- " + _escape(
                "run AI agents and untrusted commands in a kernel-enforced sandbox"),
            ".SH SYNOPSIS",
            ".B agent\\-sandbox", "[\\fIOPTIONS\\fR] \\fINAME\\fR [\\fIARGS\\fR...]", ".br",
            ".B agent\\-sandbox", "\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR...]",
            ".SH DESCRIPTION"]
    for paragraph in (root.help or "").split("\n\n"):
        head += [".PP", _escape(" ".join(paragraph.split()))]
    head += [".SH OPTIONS", *_params(root), ".SH COMMANDS"]
    body = []
    for path, command in _walk(root, ()):
        usage = " ".join(command.collect_usage_pieces(_context(command, path)))
        body += [".SS " + _escape(" ".join(path)),
                 f"\\fBagent\\-sandbox {_escape(' '.join(path))}\\fR {_escape(usage)}",
                 ".PP", _escape(" ".join((command.help or "").split())), *_params(command)]
    tail = [".SH EXIT STATUS",
            "The exit code of the command run in the sandbox; 125 when the sandbox could "
            "not be set up; 2 for a usage error; 126 and 127 when the command cannot be "
            "executed or found.", ".SH EXAMPLES"]
    for command, what in examples:
        tail += [".TP", f"\\fB{_escape(command)}\\fR", _escape(what)]
    tail.append(".SH ENVIRONMENT")
    for name, what in ENVIRONMENT:
        tail += [".TP", f"\\fB{_escape(name)}\\fR", _escape(what)]
    tail.append(".SH FILES")
    for name, what in files(admin_config):
        tail += [".TP", f"\\fI{_escape(name)}\\fR", _escape(what)]
    tail += [".SH SEE ALSO", "bwrap(1), firejail(1), sbatch(1), srun(1), salloc(1)"]
    return "\n".join(head + body + tail) + "\n"


ENVIRONMENT = (
    ("KEY=VALUE (any configuration key)", "Every key of sandbox.conf may be set in the "
     "environment for one launch, e.g. NETWORK_MODE=open agent-sandbox claude; it applies "
     "after the files, unless the admin locked the key. agent-sandbox config show --origin "
     "says where each value comes from."),
    ("SANDBOX_BACKEND", "auto, bwrap, firejail or landlock (--backend sets it too)."),
    ("NETWORK_MODE", "open, allowlist (only ALLOWED_HOSTS, through the egress proxy) or "
     "isolated."),
    ("SANDBOX_QUIET", "true: no banner and no end-of-session report."),
    ("SLURM_JOB_ID", "Set by salloc, srun --pty or a portal's interactive job: the launcher "
     "adopts that allocation when Slurm confirms it is yours and running (--allocation "
     "names one)."),
    ("ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY", "With NETWORK_MODE=allowlist and "
     "API_KEY_BROKERING, a profile's key stays outside: a placeholder inside, the real key "
     "added by the egress proxy."),
    ("ANTHROPIC_BASE_URL, OPENAI_BASE_URL, GOOGLE_GEMINI_BASE_URL", "Your gateway: the "
     "broker's upstream when https, or http to a host ALLOWED_HOSTS lists; otherwise the "
     "launch says why it is not used."),
    ("AGENT_SANDBOX=1, SANDBOX_BACKEND", "Set inside the sandbox, for the commands run "
     "there."),
)


def files(admin_config: str) -> tuple:
    return (
        (admin_config, "The site's settings and locks (the admin's)."),
        ("~/.config/agent-sandbox/sandbox.conf", "Your settings; conf.d/*.conf beside it "
         "apply after it."),
        ("~/.config/agent-sandbox/agents/", "Your agent profiles (NAME.conf), beside the "
         "site's and the shipped ones."),
        ("~/.local/state/agent-sandbox/", "Hidden inside every sandbox: the Slurm job ledger, "
         "the chaperon's and the egress proxy's audit logs (agent-sandbox logs), the session "
         "registry (agent-sandbox status), the compiled plan cache."),
        ("~/.local/state/agent-sandbox-run/", "The running sessions' private directories "
         "(the chaperon's pipes, the egress proxy's socket)."),
    )


def _context(command, path):
    try:
        from typer._click import Context
    except ImportError:             # typer before its vendored click (the last for 3.9)
        from click import Context

    return Context(command, info_name=" ".join(path))


def main() -> int:
    import typer

    from agent_sandbox import __version__
    from agent_sandbox.cli.app import EXAMPLES, app
    from agent_sandbox.paths import ADMIN_CONFIG

    root = typer.main.get_command(app)
    sys.stdout.write(render(root, version=__version__, date=datetime.date.today().isoformat(),
                            examples=EXAMPLES, admin_config=ADMIN_CONFIG))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
