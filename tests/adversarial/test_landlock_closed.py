"""Issue 31 (Landlock closed), items 2 and 3, as the unprivileged user on the
real kernel:

- HOME_ACCESS=write keeps the agents' guarded files in the home read-only on
  every backend — on landlock too, where they were writable (a hook planted
  in ~/.claude/hooks/ ran in the user's next unsandboxed Claude Code): the
  home is carved around them (backends/landlock.py _guarded_state);
- on this Slurm host SANDBOX_BACKEND=auto never lands silently on landlock,
  whose munge socket is reachable (the real srun ran an unsandboxed job): the
  launch is refused naming slurm.boundary and what would give it, while an
  explicit --backend landlock for a plain `run` is the user's choice.
Both failed on the code before (landlock wrote the files; auto ran)."""
from __future__ import annotations

import os
import re

import pytest

from tests.support.launcher import SandboxUser
from tests.support.waiting import wrote

GUARDED = {".claude/settings.json": '{"hooks": {}}\n', ".claude.json": '{"n": 1}\n',
           ".claude/hooks/existing.sh": "#!/bin/sh\n"}
ATTACK = r"""
for target in ~/.claude/settings.json ~/.claude.json ~/.claude/hooks/existing.sh; do
  echo planted >> "$target" 2>/dev/null && echo "wrote $target"
done
echo '#!/bin/sh' > ~/.claude/hooks/planted.sh 2>/dev/null && echo "made a hook"
mv ~/.claude/settings.json ~/.claude/moved.json 2>/dev/null && echo "moved settings"
rm -f ~/.claude.json 2>/dev/null; [ -e ~/.claude.json ] || echo "removed .claude.json"
echo ok >> ~/notes-31.txt && echo "home writable"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail", "landlock"])
def test_home_write_keeps_the_agents_guarded_files_read_only(user: SandboxUser, project,
                                                             backend):
    for relative, content in GUARDED.items():
        user.write(relative, content, 0o600)
    user.write("notes-31.txt", "")
    (user.home / ".claude/hooks/planted.sh").unlink(missing_ok=True)
    user.set_config("HOME_ACCESS=write\nPROTECTED_PATHS+=(~/.claude/settings.json "
                    "~/.claude/hooks/ ~/.claude.json)\n")
    wrote()
    result = user.sandbox("sh", "-c", ATTACK, options=("--backend", backend), cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["home writable"], result.stdout + result.stderr
    for relative, content in GUARDED.items():
        assert (user.home / relative).read_text() == content, relative
    assert not (user.home / ".claude/hooks/planted.sh").exists()
    assert (user.home / "notes-31.txt").read_text() == "ok\n"


def test_auto_on_a_slurm_host_lands_on_landlock_only_with_the_boundary(user: SandboxUser,
                                                                      project, slurm_cluster):
    """On a Slurm host auto and agent profiles require slurm.boundary
    (launch/run.py implied_require). Landlock gives it where its supervisor
    runs (every Landlock kernel: the munge and Slurm auth sockets are refused
    to connect()), so auto lands there with the row saying yes; without the
    supervisor the refusal's text is a unit test's (tests/unit/launch)."""
    user.set_config("ALLOWED_BACKENDS=(landlock)\n")
    wrote()
    dry = user.sandbox("true", options=("--dry-run",), cwd=project)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert re.search(r"yes\s+slurm\.boundary", dry.stdout + dry.stderr), dry.stdout
    ran = user.sandbox("true", cwd=project)
    assert ran.returncode == 0, ran.stdout + ran.stderr


METADATA = r"""
for target in ~/.bashrc ~/.ssh/id_rsa ~/.config/agent-sandbox; do
  chmod 666 "$target" 2>/dev/null && echo "chmod $target"
  python3 -c "import os, sys; os.utime(sys.argv[1], (1, 1))" "$target" 2>/dev/null \
    && echo "utime $target"
  python3 -c "import os, sys; os.setxattr(sys.argv[1], 'user.as31', b'1')" "$target" \
    2>/dev/null && echo "xattr $target"
done
: > mine.txt && chmod 600 mine.txt && touch -d 2001-01-01 mine.txt && echo "project ok"
"""


@pytest.mark.parametrize("backend", ["bwrap", "firejail"])
def test_metadata_outside_the_writable_set_is_refused_by_the_mount_view(user: SandboxUser,
                                                                       project, backend):
    """metadata.confined on a mount view (issue 31 item 2): the home shown
    read-only, a hidden key and the user config tree keep their mode, times
    and xattrs on the host; the project's files do not. (firejail copies the
    shell's start-up files in: a change to that copy is the sandbox's own.
    Landlock says no: its report.)"""
    targets = [user.home / ".bashrc", user.home / ".ssh/id_rsa",
               user.home / ".config/agent-sandbox"]
    user.set_config("")
    before = {t: (t.stat().st_mode, t.stat().st_mtime_ns) for t in targets}
    result = user.sandbox("sh", "-c", METADATA, options=("--backend", backend), cwd=project,
                          env=user.env(HOME_ACCESS="read"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "project ok" in result.stdout.splitlines(), result.stdout + result.stderr
    assert f"chmod {user.home}/.ssh/id_rsa" not in result.stdout
    assert {t: (t.stat().st_mode, t.stat().st_mtime_ns) for t in targets} == before
    assert not any("user.as31" in os.listxattr(t) for t in targets)


def test_landlock_reports_metadata_and_shared_memory_as_they_are(user: SandboxUser, project):
    report = user.sandbox("true", options=("--backend", "landlock", "--dry-run"), cwd=project)
    assert report.returncode == 0, report.stdout + report.stderr
    lines = [line for line in report.stdout.splitlines() if "metadata.confined" in line]
    assert lines, report.stdout
    for backend in ("bwrap", "firejail"):
        shown = user.sandbox("true", options=("--backend", backend, "--dry-run"), cwd=project)
        assert "metadata.confined" in shown.stdout, shown.stdout
