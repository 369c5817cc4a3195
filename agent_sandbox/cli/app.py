"""The full typer CLI (help, errors, every subcommand). Imported only when the
fast path in cli.py does not apply."""
from __future__ import annotations

from typing import List, Optional

import typer
from typer.core import TyperGroup

from agent_sandbox import __version__

class _Group(TyperGroup):
    """The top-level group: completing its first word offers the agent
    profiles beside the subcommands (profiles are config files, not commands);
    its help and every subcommand's is tidied (`_tidy`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _tidy(self)

    def shell_complete(self, ctx, incomplete: str):
        import os
        import pwd

        try:
            from typer._click.shell_completion import CompletionItem
        except ImportError:         # typer before its vendored click (the last for 3.9)
            from click.shell_completion import CompletionItem

        from agent_sandbox.config.profiles import available

        results = super().shell_complete(ctx, incomplete)
        if not incomplete.startswith("-"):
            home = pwd.getpwuid(os.getuid()).pw_dir
            offered = {item.value for item in results}
            results.extend(CompletionItem(name, help="agent profile")
                           for name in available(home)
                           if name.startswith(incomplete) and name not in offered)
        return results


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"agent-sandbox {__version__}")
        raise typer.Exit(0)


def _tidy(command) -> None:
    """What --help shows of every parameter: a flag no type (typer prints
    `<bool>`), a value its name in capitals rather than `<str>`; help text
    without the backticks of the source (the terminal shows them literally)."""
    for param in command.params:
        if param.metavar is None:
            if getattr(param, "is_flag", False):
                param.metavar = ""
            elif param.param_type_name == "option":
                param.metavar = param.name.upper().replace("_", "-")
            else:
                param.metavar = param.name.upper() + ("..." if param.nargs != 1 else "")
        if param.param_type_name == "argument":   # its metavar says it all (no <list[str]>)
            param.display_type_rich = _no_type
        if getattr(param, "help", None):
            param.help = param.help.replace("`", "")
    if command.help:
        command.help = command.help.replace("`", "")
    for sub in (getattr(command, "commands", None) or {}).values():
        _tidy(sub)


# (command, what it does): --help's epilog and the man page's EXAMPLES.
def _no_type(ctx=None):
    return None


def _flags_show_no_type() -> None:
    """typer >= 0.16 prints `<bool>` after every flag, the ones it adds
    itself (--help, --install-completion) included: a flag takes no value."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "tidied", False):
        return      # an older typer prints no types

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.tidied = True
    TyperOption.display_type_rich = display_type_rich


_flags_show_no_type()


EXAMPLES = (
    ("agent-sandbox claude", "Claude Code, the current directory its project."),
    ("agent-sandbox --dry-run claude", "What that launch would do; runs nothing."),
    ("agent-sandbox run -- make test", "Any command in the sandbox."),
    ("agent-sandbox run --project-dir ~/src/app -- pytest", "Another project directory."),
    ("agent-sandbox bash", "An interactive shell in the sandbox."),
    ("salloc -t 60  (then, in it:)  agent-sandbox claude",
     "Your allocation: srun inside runs sandboxed steps in it."),
    ("agent-sandbox run --allocation 8283 -- bash", "The same for a job named by its id."),
    ("srun --pty agent-sandbox bash", "A sandboxed interactive shell on a compute node."),
    ("agent-sandbox explain ~/.ssh/id_rsa", "What the sandbox does with a path, and why."),
    ("agent-sandbox explain --host pypi.org", "Whether a connection is let through."),
    ("agent-sandbox logs --denials --since 1h", "What was refused in the last hour."),
    ("agent-sandbox help claude", "What the claude profile changes."),
    ("agent-sandbox doctor", "Check this host: backends, Slurm, configuration."),
)


def examples_text() -> str:
    return "Examples:\n\n" + "\n".join(f"{command}\n    {what}" for command, what in EXAMPLES)


app = typer.Typer(
    cls=_Group, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]},
    help="Run AI coding agents and other untrusted commands in a kernel-enforced jail: "
         "the project is writable, the rest of the system read-only, credentials invisible.\n\n"
         "agent-sandbox [--dry-run] [--project-dir DIR] [--backend B] NAME [ARGS] runs the "
         "agent profile NAME (claude, codex, gemini, aider, opencode, bash, or your own in "
         "~/.config/agent-sandbox/agents/). Launcher options go before NAME; everything after "
         "NAME is the agent's own (agent-sandbox claude --dry-run hands --dry-run to "
         "claude). For a subcommand they go after it: agent-sandbox run --dry-run -- CMD.",
    epilog=examples_text())


@app.callback()
def _top(version: bool = typer.Option(False, "--version", "-V", is_eager=True,
                                      callback=_print_version, help="Print the version.")
         ) -> None:
    pass


_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: List[str] = typer.Argument(..., metavar="[--] CMD [ARGS]...",
                                        help="The command to run inside the sandbox."),
    project_dir: Optional[str] = typer.Option(
        None, "--project-dir", help="The writable project directory (default: the current "
        "directory). Must lie under ALLOWED_PROJECT_PARENTS."),
    backend: Optional[str] = typer.Option(
        None, "--backend", help="auto, bwrap, firejail or landlock (default: SANDBOX_BACKEND)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan (mounts, environment, seccomp, guarantees) "
        "and the exact argv; run nothing."),
    keep_fd: List[int] = typer.Option(
        [], "--keep-fd", metavar="N", help="Let the inherited descriptor N into the sandbox "
        "(repeatable). By default nothing but stdin, stdout and stderr enters: a descriptor "
        "you hold open (a key file, a socket) is closed for the command."),
    allocation: Optional[str] = typer.Option(
        None, "--allocation", metavar="JOBID", help="Adopt your own running Slurm "
        "allocation (salloc --no-shell …): srun inside runs its steps there, each "
        "sandboxed. Started inside an allocation (salloc, srun --pty), the launcher "
        "adopts it without this option."),
    job_shared: bool = typer.Option(
        False, "--job-shared", hidden=True, help="A Slurm job's launch (set by the chaperon): "
        "run in the job's one sandbox on this node."),
    job: bool = typer.Option(
        False, "--job", hidden=True, help="A batch job or step on a compute node (what the Slurm "
        "proxy's job wrapper starts): JOB_NETWORK_MODE applies instead of NETWORK_MODE."),
) -> None:
    """Run CMD in the sandbox. Its exit code and signals pass through; 125 means the
    sandbox could not be set up."""
    from agent_sandbox.launch.run import run as launch

    raise typer.Exit(launch(list(command), project_dir=project_dir, backend=backend,
                            dry_run=dry_run, keep_fds=tuple(keep_fd), job_shared=job_shared,
                            **({"job": True} if job else {}),
                            **({"allocation": _job_id(allocation)} if allocation else {})))


def _job_id(value: str) -> str:
    if not (value.isascii() and value.isdigit()):
        raise typer.BadParameter(f"{value!r} is not a Slurm job id (digits, as squeue "
                                 "--me shows them)", param_hint="--allocation")
    return value


@app.command(context_settings=_PASSTHROUGH)
def bash(ctx: typer.Context) -> None:
    """An interactive bash inside the sandbox (arguments go to bash)."""
    from agent_sandbox.launch.run import run as launch

    raise typer.Exit(launch(["bash", *ctx.args]))


@app.command("help")
def help_command(ctx: typer.Context, command: List[str] = typer.Argument(
        None, metavar="[COMMAND]...", help="The command (or profile) to explain.")) -> None:
    """Show the help of agent-sandbox or of COMMAND (`help config show`)."""
    import os
    import pwd

    from agent_sandbox.config.profiles import find

    names = list(command or [])
    if len(names) == 1 and names[0] not in ctx.parent.command.commands:
        path = find(names[0], pwd.getpwuid(os.getuid()).pw_dir)
        if path is not None:
            from agent_sandbox.tools.profilehelp import summary

            profiled = _settings(None, names[0])
            typer.echo(summary(_profile(names[0]), _settings(None).values, profiled.values),
                       nl=False)
            return
    try:
        app(args=[*names, "--help"], prog_name="agent-sandbox", standalone_mode=True)
    except SystemExit as exc:
        raise typer.Exit(exc.code if isinstance(exc.code, int) else 0)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"agent-sandbox {__version__}")


config_app = typer.Typer(help="Inspect the effective configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


def _profile(name: Optional[str]):
    """The agent profile NAME (an unknown name is a usage error), or None."""
    if name is None:
        return None
    import os
    import pwd

    from agent_sandbox.config.load import known_keys
    from agent_sandbox.config.profiles import load

    entry = pwd.getpwuid(os.getuid())
    return load(name, home=entry.pw_dir, user=entry.pw_name,
                known_keys=known_keys(entry.pw_dir, entry.pw_name))


def _settings(project_dir: Optional[str], profile_name: Optional[str] = None):
    import os

    from agent_sandbox.config.load import load_settings
    from agent_sandbox.launch.run import launch_context

    profile = _profile(profile_name)
    ctx = launch_context(project_dir, os.environ)
    return load_settings(home=ctx.home, user=ctx.user, environ=ctx.environ,
                         project_dir=ctx.project_dir or ctx.cwd, profile=profile)


_PROFILE_HELP = "As a launch of this agent profile sees it (its settings applied)."


@config_app.command("show")
def config_show(
    origin: bool = typer.Option(False, "--origin", help="Name the file:line (or default, "
                                "env, flag) of every value and the admin lock holding it."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    project_dir: Optional[str] = typer.Option(None, "--project-dir",
                                              help="Apply conf.d files matching this project."),
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME",
                                          help=_PROFILE_HELP),
) -> None:
    """Print every effective configuration value (as sandbox.conf syntax)."""
    from agent_sandbox.tools.explain import config_show as show

    settings = _settings(project_dir, profile)
    typer.echo(show(settings, origin=origin, as_json=as_json), nl=False)
    for warning in settings.warnings:
        typer.echo(f"agent-sandbox: warning: {warning}", err=True)


@config_app.command("migrate")
def config_migrate(
    path: Optional[str] = typer.Argument(
        None, metavar="[FILE]", help="The file to migrate (default: "
        "~/.config/agent-sandbox/sandbox.conf)."),
) -> None:
    """Print a sandbox.conf of the bash agent-sandbox in this product's terms: its keys
    mapped (NETWORK_FILTER_MODE → NETWORK_MODE) or commented out with the reason. The
    file is not changed; redirect the output to replace it."""
    import os
    import pwd

    from agent_sandbox.config.legacy import LegacyValueError, migrate
    from agent_sandbox.config.syntax import ConfigSyntaxError, parse_config
    from agent_sandbox.errors import ConfigError
    from agent_sandbox.paths import user_config_dir

    entry = pwd.getpwuid(os.getuid())
    path = path or os.path.join(user_config_dir(entry.pw_dir), "sandbox.conf")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        typer.echo(migrate(parse_config(text, file=path, variables={
            "HOME": entry.pw_dir, "USER": entry.pw_name})), nl=False)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} — {exc.strerror}. Name an existing file.") from exc
    except (ConfigSyntaxError, LegacyValueError) as exc:
        raise ConfigError(f"{path}: {exc} — fix the file first.") from exc


@config_app.command("adopt-login")
def config_adopt_login(
    profile: str = typer.Argument(..., metavar="PROFILE", help="The agent profile (claude, "
                                  "codex, gemini)."),
    discard: bool = typer.Option(False, "--discard", help="Drop the sandbox's login instead: "
                                 "the next sandboxed session starts on yours again."),
) -> None:
    """Make the login a sandboxed session of PROFILE left (a refresh, or a login made
    inside) yours outside too: it replaces the agent's login file. Sessions never write
    that file themselves (docs/shared-channels.md). Run it outside the sandbox."""
    import os
    import pwd

    from agent_sandbox.errors import ConfigError
    from agent_sandbox.agents import copy as agentcopy

    try:
        entry = pwd.getpwuid(os.getuid())
        spec = agentcopy.spec_for(_profile(profile), entry.pw_dir)
        if spec is None or not spec.logins:
            raise ConfigError(f"the {profile} profile keeps no login (no AGENT_LOGINS) — "
                              "nothing to adopt. Name claude, codex or gemini.")
        if discard:
            done = agentcopy.discard_logins(spec, entry.pw_dir)
            typer.echo(f"{profile}: the sandbox's login dropped" if done else
                       f"{profile}: the sandbox holds no login of its own")
            return
        written = agentcopy.adopt_login(spec, entry.pw_dir)
    except OSError as exc:
        raise ConfigError(f"cannot adopt the login — {exc}. Check the agent's "
                          "configuration directory and run again.") from exc
    for path in written:
        typer.echo(f"{profile}: {path} now holds the sandbox's login")
    if not written:
        typer.echo(f"{profile}: nothing to adopt — the sandbox's login is yours already "
                   "(or there is none)")


@app.command()
def trust(
    directory: Optional[str] = typer.Argument(
        None, metavar="[DIR]", help="The directory to trust (default: the current one)."),
    agents: List[str] = typer.Option(
        [], "--agent", metavar="NAME", help="The agent whose trust is written (repeatable; "
        "default: every enabled agent whose profile has AGENT_TRUST)."),
) -> None:
    """Trust DIR for your agents, as accepting their trust dialog would: write only that
    agent's trust key for DIR into your own file (Claude Code's ~/.claude.json,
    Codex's ~/.codex/config.toml, Gemini's ~/.gemini/trustedFolders.json), so sandboxed
    sessions there stop asking. A session's own trust grants are never kept (a trusted
    folder's project settings run things): trust is given outside, by you. Run it
    outside the sandbox."""
    import os
    import pwd

    from agent_sandbox.errors import ConfigError, Failed
    from agent_sandbox.launch.run import inside_sandbox

    if inside_sandbox(os.environ):
        raise Failed("trust is refused inside the sandbox — trusting a folder is a grant "
                     "that only you give, outside. Run `agent-sandbox trust` in your own "
                     "shell.")
    target = os.path.realpath(directory or os.getcwd())
    if not os.path.isdir(target):
        raise ConfigError(f"{target} is not a directory — name the project directory to "
                          "trust.")
    entry = pwd.getpwuid(os.getuid())
    if agents:
        profiles = [_profile(name) for name in agents]
        lacking = [p.name for p in profiles if not p.trust]
        if lacking:
            raise ConfigError(f"the {', '.join(lacking)} profile has no AGENT_TRUST — that "
                              "agent keeps no trust of its own to write. Name claude, codex "
                              "or gemini.")
    else:
        from agent_sandbox.config.profiles import available

        enabled = _settings(target).ENABLED_AGENTS
        profiles = [p for p in (_profile(name) for name in available(entry.pw_dir)
                                if name in enabled) if p.trust]
        if not profiles:
            raise ConfigError("no enabled agent profile has AGENT_TRUST — name one with "
                              "--agent NAME.")
    from agent_sandbox.agents.trust import trust as write_trust

    for profile in profiles:
        try:
            written = write_trust(profile, entry.pw_dir, target)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{profile.name}: cannot write its trust of {target} — {exc}. "
                              "Fix the file and run again.") from None
        for path, key in written:
            shown = "~" + path[len(entry.pw_dir):] if path.startswith(entry.pw_dir + "/") \
                else path
            typer.echo(f"{profile.name}: trusts {target} ({key} in {shown})")


@app.command()
def explain(
    target: Optional[str] = typer.Argument(
        None, help="A path (hidden / read-only / writable / absent inside? symlinks are "
        "followed) or an environment variable name (kept / removed?)."),
    host: Optional[str] = typer.Option(
        None, "--host", metavar="HOST[:PORT]", help="Would the egress proxy "
        "(NETWORK_MODE=allowlist) let a connection to HOST through (ports 443 and 80 unless "
        "given), and which ALLOWED_HOSTS entry of which file decides?"),
    project_dir: Optional[str] = typer.Option(None, "--project-dir"),
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME",
                                          help=_PROFILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Say what the sandbox does with PATH or ENV_NAME, or whether it lets a connection to
    --host HOST through, and which rule of which layer decided."""
    import os

    from agent_sandbox.errors import UsageError

    if (target is None) == (host is None):
        raise UsageError("explain takes a PATH or ENV_NAME, or --host HOST[:PORT] — give "
                         "exactly one (`agent-sandbox explain --host pypi.org`).")
    if host is not None:
        from agent_sandbox.tools.nethost import explain_host

        try:
            typer.echo(explain_host(host, _settings(project_dir, profile), as_json=as_json),
                       nl=False)
        except ValueError as exc:
            raise UsageError(f"explain --host: {exc}") from exc
        return
    from agent_sandbox.tools.explain import explain as explain_target
    from agent_sandbox.launch.run import prepare

    prepared = prepare(["true"], project_dir=project_dir, backend=None, environ=os.environ,
                       profile=_profile(profile))
    typer.echo(explain_target(target, prepared.settings, prepared.policy,
                              prepared.plan.mounts, as_json=as_json), nl=False)


# ---------------------------------------------------------------- doctor, status, logs
# Self-contained block: the three read-only commands of issue 7 (host check,
# running sandboxes, chaperon audit logs).
def _hidden_here(what: str) -> None:
    """Inside a sandbox the state directory is hidden: say so instead of
    answering 'nothing'."""
    import os

    from agent_sandbox.errors import Failed
    from agent_sandbox.launch.run import inside_sandbox

    if inside_sandbox(os.environ):
        raise Failed(f"{what} — ~/.local/state/agent-sandbox is hidden inside the sandbox. "
                     "Run this outside the sandbox.")


@app.command()
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    project_dir: Optional[str] = typer.Option(
        None, "--project-dir", help="Check for launches from this project (default: the "
        "current directory)."),
) -> None:
    """Check this host: user namespaces, backends (real probes), Landlock, seccomp, munge,
    Slurm, filesystems, configuration and admin locks; GO / GAPS / NO-GO per item with
    the fix, the backend a launch would use and the guarantees each backend gives. Exit 0
    when some allowed backend works and gives every REQUIREd guarantee, 1 otherwise."""
    import os

    from agent_sandbox.tools.doctor import as_json as doctor_json
    from agent_sandbox.tools.doctor import gather, render

    report = gather(project_dir, os.environ)
    typer.echo((doctor_json if as_json else render)(report), nl=False)
    raise typer.Exit(report.exit_code)


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """This user's running sandboxes on this host: session, pid, backend, chaperon pid,
    uptime, jobs submitted, command, project. Records of ended sandboxes are removed."""
    import os
    import pwd
    import time

    from agent_sandbox.tools.status import as_json as status_json
    from agent_sandbox.tools.status import collect, render

    _hidden_here("status cannot see the session records")
    from agent_sandbox.services.gitcheck import recover

    recover(pwd.getpwuid(os.getuid()).pw_dir)   # sessions whose launcher was killed
    from agent_sandbox.agents import copy as agentcopy

    agentcopy.recover(pwd.getpwuid(os.getuid()).pw_dir)   # their agents' settings: guarded merge
    status_report = collect(pwd.getpwuid(os.getuid()).pw_dir)
    now = time.time()
    typer.echo((status_json if as_json else render)(status_report, now=now), nl=False)


@app.command()
def logs(
    session: Optional[str] = typer.Option(
        None, "--session", help="Only this session (its id or the beginning of it, as "
        "`agent-sandbox status` shows it)."),
    denials: bool = typer.Option(False, "--denials", help="Only refusals, with their reason "
                                 "code and detail."),
    network: bool = typer.Option(False, "--network", help="Only the egress proxy's records "
                                 "(NETWORK_MODE=allowlist): every connection allowed or "
                                 "refused, host, port, rule, bytes, duration."),
    slurm: bool = typer.Option(False, "--slurm", help="Only the Slurm proxy's (chaperon's) "
                               "records."),
    since: Optional[str] = typer.Option(None, "--since", metavar="WHEN", help="Only records "
                                        "since WHEN: a duration back from now (30s, 10m, 2h, "
                                        "1d) or a time (2026-11-28 06:00, 06:00)."),
    last: Optional[int] = typer.Option(None, "--last", metavar="N", min=1,
                                       help="Only the newest N records."),
    telemetry: bool = typer.Option(False, "--telemetry", help="With --denials: also the "
                                   "refused background telemetry of the agents (left out "
                                   "and counted otherwise)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new records as "
                                "they are written (Ctrl-C stops)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object a line, as the "
                                 "chaperon wrote it."),
) -> None:
    """The chaperon and network audit logs, oldest first: time, session, command, event
    and what happened (arguments of a request, reason and detail of a refusal, host,
    rule and bytes of a connection through the egress proxy). With --denials, repeats
    are grouped (count, first time) and Slurm and network refusals shown apart."""
    import os
    import pwd

    import time

    from agent_sandbox.logfiles import log_directory
    from agent_sandbox.tools.logs import (as_json_lines, parse_since, read_records, render,
                                          render_denials, select, unseen)

    _hidden_here("the audit logs cannot be read")
    if network and slurm:
        raise typer.BadParameter("--network and --slurm exclude each other: leave both out "
                                 "for both", param_hint="--slurm")
    try:
        cutoff = parse_since(since, time.time()) if since else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since") from None
    directory = log_directory(pwd.getpwuid(os.getuid()).pw_dir)
    grouping = denials and not as_json and not follow
    if not os.path.isdir(directory) and not follow:
        typer.echo(f"agent-sandbox: no chaperon logs yet ({directory} does not exist): the "
                   "chaperon runs in sandboxes started on hosts with Slurm.", err=True)
        return
    hide = denials and not telemetry     # the agents' background noise, counted apart

    def chosen(*, telemetry_too: bool, newest=last):
        return select(read_records(directory), session=session, denials=denials,
                      network=network, slurm=slurm, since=cutoff, last=newest,
                      telemetry=telemetry_too)

    seen: set = set()
    entries = unseen(chosen(telemetry_too=not hide), seen)
    hidden = (len(chosen(telemetry_too=True, newest=None))
              - len(chosen(telemetry_too=False, newest=None))) if hide and grouping else 0
    if not entries and not follow:
        what = ("network " if network else "Slurm " if slurm else "") + (
            "refusals" if denials else "records")
        scope = f" for session {session}" if session else ""
        extra = f" ({hidden} of the agents' background telemetry: --telemetry shows them)" \
            if hidden else ""
        typer.echo(f"agent-sandbox: no {what}{scope} in {directory}{extra}", err=True)
        return
    if grouping:
        typer.echo(render_denials(entries, telemetry_hidden=hidden), nl=False)
        return
    show = as_json_lines if as_json else render
    typer.echo(show(entries), nl=False)
    try:
        while follow:
            time.sleep(0.5)
            fresh = unseen(chosen(telemetry_too=not hide), seen)
            if fresh:
                typer.echo(show(fresh), nl=False)
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------- sbatch, srun from outside
# Self-contained block: `agent-sandbox sbatch|srun …` from a normal shell (issue 6). The
# chaperon's own handlers run in this process, on a request built from the real argv,
# working directory, sandbox environment and stdin, with their answer written to the real
# stdout/stderr: the same validation, the same wrapper, the same tag and ledger record,
# so the job runs sandboxed on the compute node.
_SLURM_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True,
               "allow_interspersed_args": False, "help_option_names": ["--help"]}


class _RealOut:
    """The handler's `out`: the real standard output and error."""

    def __init__(self):
        import sys

        self.streams = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}

    def _write(self, name: str, data: bytes) -> None:
        stream = self.streams[name]
        stream.write(data)
        stream.flush()

    def stdout(self, data: bytes) -> None:
        self._write("stdout", data)

    def stderr(self, data: bytes) -> None:
        self._write("stderr", data)


def _outside_stdin(command: str, args: list) -> Optional[bytes]:
    """sbatch reads its script from stdin when it has neither a file nor --wrap;
    read it as the stub does (never from a terminal, at most 4 MiB)."""
    import os
    import sys

    if command != "sbatch" or os.isatty(0) or any(
            a == "--wrap" or a.startswith("--wrap=") for a in args):
        return None
    data = sys.stdin.buffer.read(4 * 1024 * 1024 + 1)
    return data


def _submit_outside(command: str, args: list, project_dir: Optional[str]) -> int:
    import os

    from agent_sandbox.errors import Failed, NotFound
    from agent_sandbox.launch.run import inside_sandbox

    if inside_sandbox(os.environ):
        # Inside a sandbox the stub is this command already (PATH leads to it).
        try:
            os.execvp(command, [command, *args])
        except OSError as exc:
            raise NotFound(f"{command}: cannot run the sandbox's {command} "
                           f"— {exc.strerror}.") from exc
    from chaperon.wire import protocol
    from chaperon.audit import AuditLog
    from chaperon.handlers import Context, dispatch

    from agent_sandbox.services.chaperon import _real_binaries, handler_config, staging_dir
    from agent_sandbox.launch.run import prepare

    prepared = prepare(["true"], project_dir=project_dir, backend=None, environ=os.environ)
    settings, policy = prepared.settings, prepared.policy
    binaries = _real_binaries(policy)
    if command not in binaries:
        raise Failed(f"{command}: Slurm is not available here — {command} was not found on "
                     "this host. Run it on a login node of the cluster.")
    staging = staging_dir(policy.home, policy.project_dir)
    os.makedirs(staging, mode=0o700, exist_ok=True)
    config = handler_config(settings, policy, staging)
    from agent_sandbox.process.select import helper_python

    config["python"] = helper_python(policy)   # the job wrapper's and jobstart's
    if policy.slurm_conf:   # the handlers' real commands use the site's Slurm (as the chaperon's)
        os.environ["SLURM_CONF"] = policy.slurm_conf
    try:
        stdin = _outside_stdin(command, args)
        request = protocol.Request(command, args, cwd=os.getcwd(), env=policy.env,
                                   stdin=stdin, resp_path="/dev/null")
    except protocol.ProtocolError as exc:
        raise Failed(f"{command}: the command line is refused — {exc}. "
                     "Keep arguments and scripts under 4 MiB.") from exc
    log = AuditLog(config)
    log.event("start", session=policy.session_id, project=policy.project_dir,
              origin="outside")
    try:
        return dispatch(Context(config, log), request, _RealOut())
    finally:
        log.event("stop", session=policy.session_id)


@app.command(context_settings=_SLURM_ARGS, add_help_option=True)
def sbatch(
    ctx: typer.Context,
    project_dir: Optional[str] = typer.Option(
        None, "--project-dir", help="The project the job belongs to (default: the current "
        "directory, which must lie inside it)."),
) -> None:
    """Submit a batch job from a normal shell: sbatch's own options and script, validated
    as inside the sandbox; the job runs sandboxed on the compute node."""
    raise typer.Exit(_submit_outside("sbatch", list(ctx.args), project_dir))


@app.command(context_settings=_SLURM_ARGS, add_help_option=True)
def srun(
    ctx: typer.Context,
    project_dir: Optional[str] = typer.Option(
        None, "--project-dir", help="The project the step belongs to (default: the current "
        "directory, which must lie inside it)."),
) -> None:
    """Run a command with srun from a normal shell, validated as inside the sandbox; every
    task runs sandboxed on the compute node."""
    raise typer.Exit(_submit_outside("srun", list(ctx.args), project_dir))


# ---------------------------------------------------------------- help text
def _unwrap(text: str) -> str:
    """A docstring's paragraphs as single lines, so the help wraps at the
    terminal's width, not at the source's line breaks (rich keeps those)."""
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def _unwrap_help(typer_app: typer.Typer) -> None:
    import inspect

    for info in typer_app.registered_commands:
        doc = info.help or inspect.getdoc(info.callback) or ""
        info.help = _unwrap(doc)
    for group in typer_app.registered_groups:
        _unwrap_help(group.typer_instance)


_unwrap_help(app)
