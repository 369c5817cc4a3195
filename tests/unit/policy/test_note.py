"""policy/note.py: the note an agent profile gives its agent, decided over
injected reads — after the user's own file at that path, after its blanked
copy (the copy consumed: one file, no token), never after a hidden one."""
from __future__ import annotations

from agent_sandbox.policy.note import with_note
from tests.support.policies import sample_policy as make_policy

NOTE = "/h/u/.claude/CLAUDE.md"
HEADING = b"# You are running inside agent-sandbox\n"


def decide(policy, files=None, links=None, blanked=None, slurm=False):
    files, links, blanked = files or {}, links or {}, blanked or {}
    return with_note(policy, NOTE, slurm=slurm, blanked=blanked.__getitem__,
                     realpath=lambda path: links.get(path, path), read=files.get)


def test_the_note_follows_the_users_own_text():
    policy, note, used = decide(make_policy(), files={NOTE: b"my rules\n\n\n"})
    assert note.startswith(b"my rules\n\n" + HEADING) and used is None
    assert policy.notes == ((NOTE, "note-0"),)
    _, note, _ = decide(make_policy(), files={NOTE: b""})          # an empty file
    assert note.startswith(b"\n\n" + HEADING)


def test_without_a_file_the_note_is_alone():
    policy, note, used = decide(make_policy())
    assert note.startswith(HEADING) and used is None
    assert b"Slurm is not available" in note
    assert b"Slurm works as usual" in decide(make_policy(), slurm=True)[1]


def test_a_hidden_file_or_one_linked_into_a_hidden_path_gives_none_of_its_text():
    hidden = make_policy(hidden=("/h/u/.ssh", NOTE))
    assert decide(hidden, files={NOTE: b"secret"})[1].startswith(HEADING)
    linked = decide(make_policy(), files={NOTE: b"secret"}, links={NOTE: "/h/u/.ssh/notes"})
    assert linked[1].startswith(HEADING)


def test_a_blanked_copy_is_consumed_the_note_in_its_place():
    policy = make_policy(generated_files=((NOTE, "bound-0", 0o444),
                                          ("/h/u/.bashrc", "bound-1", 0o444)))
    policy, note, used = decide(policy, files={NOTE: b"TOKEN=ghp_x"},
                                blanked={"bound-0": b"rules\n\n"})
    assert used == "bound-0" and note.startswith(b"rules\n\n" + HEADING)
    assert b"ghp_" not in note
    assert policy.generated_files == (("/h/u/.bashrc", "bound-1", 0o444),)
    assert policy.notes == ((NOTE, "note-0"),)
