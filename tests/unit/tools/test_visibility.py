"""doctor's automount item (tools/visibility.py): autofs directories below
the trees a sandbox shows read-only, and what PRIVATE_MOUNTS makes of them."""
from __future__ import annotations

from agent_sandbox.mountinfo import parse_mountinfo
from agent_sandbox.tools.checks import GAPS, GO
from agent_sandbox.tools.visibility import automount_item
from tests.support.policies import policy_of

TABLE = parse_mountinfo(
    "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
    "30 22 0:40 / /cvmfs rw - autofs /etc/auto.cvmfs rw,fd=5,indirect\n"
    "31 22 0:41 / /home rw - autofs /etc/auto.home rw,fd=6,indirect\n"
    "32 30 0:50 / /cvmfs/soft.example.org ro - fuse cvmfs2 ro\n")


def policy(private_mounts=True, readonly=("/usr", "/etc", "/cvmfs"), backend="bwrap"):
    return policy_of("/h", system_readonly=readonly, private_mounts=private_mounts,
                     backend=backend)


def test_autofs_below_a_read_only_tree_is_named_with_what_private_mounts_costs():
    item = automount_item(policy(), TABLE)
    assert item.status == GAPS and item.data["autofs"] == ["/cvmfs"]   # /home is not shown
    assert "Too many levels of symbolic links" in item.summary and "PRIVATE_MOUNTS" in item.fix


def test_without_private_mounts_the_item_says_a_later_share_is_writable():
    item = automount_item(policy(private_mounts=False), TABLE)
    assert item.status == GAPS and "writable if the share is" in item.summary
    assert item.fix.startswith("PRIVATE_MOUNTS=true")


def test_no_autofs_below_the_read_only_trees_is_go():
    assert automount_item(policy(readonly=("/usr", "/etc")), TABLE).status == GO
    assert automount_item(None, TABLE).status == GO


def test_on_landlock_automounts_are_the_hosts_and_writes_are_confined_by_path():
    item = automount_item(policy(backend="landlock"), TABLE)
    assert item.status == GO and item.data["autofs"] == ["/cvmfs"]
