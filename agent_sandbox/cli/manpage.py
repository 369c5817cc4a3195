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


def render(root, *, version: str, date: str) -> str:
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
            "executed or found.",
            ".SH FILES", ".TP", "\\fI/etc/agent\\-sandbox/sandbox.conf\\fR", "Site settings.",
            ".TP", "\\fI~/.config/agent\\-sandbox/sandbox.conf\\fR", "Your settings.",
            ".TP", "\\fI~/.config/agent\\-sandbox/agents/\\fR", "Your agent profiles.",
            ".SH SEE ALSO", "bwrap(1), firejail(1)"]
    return "\n".join(head + body + tail) + "\n"


def _context(command, path):
    try:
        from typer._click import Context
    except ImportError:             # typer before its vendored click (the last for 3.9)
        from click import Context

    return Context(command, info_name=" ".join(path))


def main() -> int:
    import typer

    from agent_sandbox import __version__
    from agent_sandbox.cli.app import app

    root = typer.main.get_command(app)
    sys.stdout.write(render(root, version=__version__,
                            date=datetime.date.today().isoformat()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
