"""A real Policy without a compile, for the tests of what reads one (the agent
session copy, the agent executable's resolution): `policy_of(home, **fields)`
is agent_sandbox.policy.resolve.Policy itself, every field a plain default
(nothing hidden, nothing writable, no secrets in env) but those the test
names. Where a test needs what the compile decides, it resolves one instead
(tests/support/plans.py, homes.settings_for and context)."""
from __future__ import annotations

from agent_sandbox.policy.resolve import Policy, Protected

USER = "alice"


def policy_of(home: str, *, backend: str = "bwrap", **fields) -> Policy:
    """A Policy for a session of `home`'s project `home`/proj on `backend`,
    with `fields` set."""
    project = f"{home}/proj"
    plain = dict(
        session_id="s1", backend=backend, project_dir=project, workdir=project,
        uid=1000, gid=1000, user=USER, home=home, home_access="tmpfs",
        system_readonly=(), home_readonly=(), home_writable=(), home_seeded=(),
        extra_writable=(), hidden=(), protected=(), readonly_overlays=(), run_binds=(),
        slurm_masks=(), slurm_binaries=(), devices=(), private_tmp=True, private_ipc=True,
        filter_passwd=True, network_isolated=False, seccomp=True, seccomp_extra=(), env={})
    return Policy(**{**plain, **fields})


def claude_session_policy(home: str, backend: str = "bwrap") -> Policy:
    """A Claude Code session's Policy: ~/.ssh hidden, ~/.claude and its cache
    writable, its hooks and the project's settings.local.json protected."""
    project = f"{home}/proj"
    return policy_of(
        home, backend=backend, hidden=(f"{home}/.ssh",),
        home_writable=(f"{home}/.claude", f"{home}/.cache/claude"),
        protected=(Protected(f"{home}/.claude/hooks", True, False),
                   Protected(f"{project}/.claude/settings.local.json", False, False)))


def sample_policy(**changes) -> Policy:
    """A Policy with something in every kind of path (hidden, writable,
    protected, an install overlay) and a secret in env: for the model's and the
    pure decisions' unit tests (policy/model.py, executable, boundfiles, note)."""
    base = dict(session_id="0123456789ab", backend="bwrap", project_dir="/h/u/proj",
                workdir="/h/u/proj", uid=1000, gid=1000, user="u", home="/h/u",
                home_access="tmpfs", system_readonly=("/usr", "/etc"),
                home_readonly=("/h/u/.gitconfig",), home_writable=("/h/u/.claude",),
                home_seeded=(), extra_writable=("/scratch/u",), hidden=("/h/u/.ssh", "/nfs/keys"),
                protected=(Protected("/h/u/proj/.git/hooks", True, True),),
                readonly_overlays=("/opt/as",), run_binds=(), slurm_masks=(),
                slurm_binaries=(), devices=(), private_tmp=True, private_ipc=True,
                filter_passwd=True, network_isolated=False, seccomp=True, seccomp_extra=(),
                env={"KEY": "secret"})
    base.update(changes)
    return Policy(**base)
