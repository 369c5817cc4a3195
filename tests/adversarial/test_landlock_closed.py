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


def test_auto_on_a_slurm_host_never_lands_silently_on_landlock(user: SandboxUser, project,
                                                                slurm_cluster):
    user.set_config("ALLOWED_BACKENDS=(landlock)\n")
    wrote()
    refused = user.sandbox("true", cwd=project)
    assert refused.returncode == 125, refused.stdout + refused.stderr
    message = refused.stderr
    assert message.startswith("agent-sandbox: the landlock backend"), message
    for words in ("Slurm host", "slurm.boundary", "munge", "SLURM_BOUNDARY_OPTIONAL=true",
                  "--backend landlock explicitly"):
        assert words in message, (words, message)
    assert "Traceback" not in message
    dry = user.sandbox("true", options=("--dry-run",), cwd=project)
    assert dry.returncode == 125 and "slurm.boundary" in dry.stderr, dry.stdout + dry.stderr
    chosen = user.sandbox("true", options=("--backend", "landlock"), cwd=project)
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
