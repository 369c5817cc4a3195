"""The full typer CLI (help, errors, every subcommand). Imported only when the
fast path in cli.py does not apply."""
from __future__ import annotations

from typing import List, Optional

import typer

from . import __version__

app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Run AI coding agents and other untrusted commands in a kernel-enforced jail: "
         "the project is writable, the rest of the system read-only, credentials invisible.")

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
) -> None:
    """Run CMD in the sandbox. Its exit code and signals pass through; 125 means the
    sandbox could not be set up."""
    from .launcher import run as launch

    raise typer.Exit(launch(list(command), project_dir=project_dir, backend=backend,
                            dry_run=dry_run))


@app.command(context_settings=_PASSTHROUGH)
def bash(ctx: typer.Context) -> None:
    """An interactive bash inside the sandbox (arguments go to bash)."""
    from .launcher import run as launch

    raise typer.Exit(launch(["bash", *ctx.args]))


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"agent-sandbox {__version__}")
