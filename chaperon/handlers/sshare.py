"""sshare, scoped to the caller (SPEC §9): the fair-share lines of the
caller's own associations, which is what sshare shows an ordinary user by
default. --all, --accounts and another user's name would list other people's
shares and are refused; naming yourself is a no-op.
"""
from __future__ import annotations

import os

from ..environment import command_env
from ..slurm.options import CommandSpec, Denial, NONE, REQ
from ..slurm.values import OTHER_CLUSTER, TEXT, allow, deny, flag
from ..scope import refuse_foreign_users
from .common import binary_and_args, run_real

OTHERS = Denial("foreign_jobs", "it lists the shares of other users and accounts",
                "Leave it out; sshare inside shows your own associations")

SSHARE = CommandSpec("sshare", [
    deny("all", "a", NONE, OTHERS),
    deny("accounts", "A", REQ, OTHERS),
    deny("clusters", "M", REQ, OTHER_CLUSTER, aliases=("cluster",)),
    allow("format", "o", TEXT),
    flag("help", "h"),
    flag("helpformat", "e"),
    flag("long", "l"),
    flag("noheader", "n"),
    flag("parsable", "p"),
    flag("parsable2", "P"),
    flag("partition", "m", aliases=("part",)),
    allow("user", "u", aliases=("users",)),
    flag("Users", "U", aliases=("User",)),
    flag("usage"),
    flag("verbose", "v"),
    flag("version", "V"),
])


def handle(ctx, request, out) -> int:
    binary, parsed = binary_and_args(ctx, request, SSHARE)
    refuse_foreign_users(ctx, parsed,
                         "it would list another user's shares",
                         "Leave it out; sshare inside shows your own associations", option="users")
    user = [] if parsed.has("user") else [f"--users={ctx.user or os.getuid()}"]
    code, _ = run_real(out, [binary, *parsed.argv(), *user, *parsed.rest],
                       env=command_env(request.env), cwd=ctx.project_dir)
    return code
