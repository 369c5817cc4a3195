"""The test tree's fixtures come from tests/support/ (a package of helper
modules, one per concern), delivered here as plugins. Test modules import
helpers from tests.support, never from one another or from a conftest
(tests/unit/test_test_tree.py guards that)."""
import pytest

# The support modules' asserts explain themselves like a test's, also those
# of modules a plugin imports before pytest loads it.
pytest.register_assert_rewrite("tests.support")

pytest_plugins = [
    "tests.support.install",      # installed, admin: the install under test
    "tests.support.launcher",     # user, other_user, project, probes, no_session_dirs
    "tests.support.homes",        # home: a fake home (pure tests) or the user's, cleaned
    "tests.support.clusters",     # slurm_cluster, slurm_multinode, sessions, jobs
    "tests.support.agents",       # clis: the pinned agent CLIs
    "tests.support.oldprimitives",  # old_bwrap, old_firejail: Debian 11's, unpacked once
    "tests.support.platformroot", # platform_root: a Debian root of another release
]
