"""The test tree's helper library: what more than one test module needs.

Test modules (test_*.py) import helpers from here and never from one another
or from a conftest (tests/unit/test_test_tree.py reads the imports); the
fixtures come in through `pytest_plugins` in tests/conftest.py.

- install.py   the install under test (PREFIX, INSTALLED, ADMIN_DIR): `installed`, `admin`
- launcher.py  the unprivileged test user and running agent-sandbox as that user:
               `user` (a SandboxUser: .run, .sandbox, .write), `other_user`, `project`
- homes.py     one `home` fixture: a fake home (pure tests: make_home, settings_for,
               context) or the test user's real home cleared of agent state
- plans.py     real Policy and Plan builders for the pure backend tests
- waiting.py   `until` (poll a condition), the plan cache's racy window (`wrote`, `settle`)
- clusters.py  the Slurm clusters and long-lived sandboxes talking to them
- agents.py    the pinned agent CLIs (`clis`) and stand-in agents
- agentmock.py, egresskit.py, handlerkit.py, sockets.py, scripts.py, slurmopts.py,
  procs.py, import_graph.py: servers, probes and readers named by what they serve
"""
