"""The site's Slurm configuration the chaperon uses, and when it is refused.

The chaperon runs the real sbatch/srun/squeue OUTSIDE the sandbox with
SLURM_CONF set to this path, and Slurm reads more than slurm.conf from its
directory: plugstack.conf (SPANK plugins loaded into srun and sbatch),
cli_filter.lua, relative Include files, gres.conf, topology.conf. So a
configuration the sandbox could write would let an agent run code outside
it. The rule is an allow-list, checked on the real path (every symlink
resolved; the chaperon is handed that real path, so a link swapped later
changes nothing):

- the file is an existing regular file;
- the file and its directory are owned by root, by the user or by an
  account the admin names in SLURM_CONF_OWNERS (a site whose /etc/slurm
  belongs to SlurmUser), and neither is writable by others (world-writable);
- neither lies in a tree the sandbox can write or another sandbox of the
  user shares: the project, HOME_WRITABLE and EXTRA_WRITABLE_PATHS entries,
  $HOME with HOME_ACCESS=write, and the shared temporary directories /tmp,
  /var/tmp, /dev/shm.

Anything else is refused before the sandbox starts (one `agent-sandbox:`
line, exit 125). The directory is also masked inside (policy/resolve.py
_slurm_boundary), wherever it would be visible. On a compute node the job's
SLURM_CONF is slurmd's own: slurmstepd sets it in every job and task,
overwriting what the submission carried, and the chaperon never passes a
caller's SLURM_CONF (chaperon/environment.py) — nothing inside a job
chooses it, and the same rule applies there.
"""
from __future__ import annotations

import os
import stat

SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def slurm_conf_path(settings, environ) -> str | None:
    """The site's Slurm configuration for the chaperon, as a real path: the
    SLURM_CONF of the environment agent-sandbox was started from (outside any
    sandbox: a user's second cluster, or a site's profile.d), else the
    admin's SLURM_CONF_PATH, else None (Slurm's default). Never a value from
    inside a sandbox: the chaperon gets it from the launcher, and jobs from
    slurmd."""
    given = environ.get("SLURM_CONF", "")
    if given.startswith("/"):
        return os.path.realpath(given)
    return os.path.realpath(settings.SLURM_CONF_PATH) if settings.SLURM_CONF_PATH else None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def owner_uids(names) -> tuple[int, ...]:
    """SLURM_CONF_OWNERS as uids: a name of the passwd database or a number;
    a name that names no account is left out (it can own nothing)."""
    import pwd

    uids = []
    for name in names:
        if name.isascii() and name.isdigit():
            uids.append(int(name))
            continue
        try:
            uids.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    return tuple(uids)


def refusal(site: str, *, uid: int, writable, owners=()) -> str | None:
    """Why the real path `site` may not be the chaperon's Slurm
    configuration (None: accepted). `writable`: the trees the sandbox can
    write (see the module docstring); `owners`: the uids of
    SLURM_CONF_OWNERS."""
    directory = os.path.dirname(site)
    try:
        if not stat.S_ISREG(os.stat(site).st_mode):
            return "it is not a regular file"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    for path in (site, directory):
        info = os.stat(path)
        if info.st_uid not in (0, uid, *owners):
            return (f"{path} is owned by uid {info.st_uid}, neither root nor you nor an "
                    "account of the admin's SLURM_CONF_OWNERS")
        if info.st_mode & stat.S_IWOTH:
            return f"{path} is writable by everyone"
        tree = next((t for t in tuple(writable) + SHARED_TMP
                     if _within(path, os.path.realpath(t))), None)
        if tree is not None:
            return f"{path} lies in {tree}, which a sandbox can write"
    return None


def check(site: str | None, *, uid: int, writable, from_env: bool, owners=()) -> None:
    """Raise PolicyError when `site` is refused (module docstring)."""
    if site is None:
        return
    why = refusal(site, uid=uid, writable=writable, owners=owners)
    if why is None:
        return
    from agent_sandbox.errors import PolicyError

    origin = ("SLURM_CONF of your environment" if from_env
              else "SLURM_CONF_PATH of the admin file")
    raise PolicyError(
        f"refusing the site's Slurm configuration {site} ({origin}) — {why}: the real "
        "Slurm commands outside the sandbox read it and the files beside it (plugstack.conf, "
        "cli_filter.lua, Include), so the sandbox could run code outside it. Keep the "
        "configuration in a directory owned by root or you, outside the project and every "
        "writable path, or unset SLURM_CONF; a site whose configuration belongs to a system "
        "account (SlurmUser) names it in SLURM_CONF_OWNERS of the admin file",
        reason="unsafe_slurm_conf")
