-- agent-sandbox @VERSION@ — a template for Lmod (the Tcl one beside it serves
-- Lmod and environment-modules alike; scripts/install.sh writes that one).
-- Fill in @PREFIX@, @ADMIN_DIR@, @MANDIR@, @VERSION@ as install.sh does.
help([[
agent-sandbox @VERSION@: run AI agents and untrusted commands in a kernel-enforced sandbox.
Site settings (admin floors): @ADMIN_DIR@/sandbox.conf — fixed in the install, never
taken from the environment. Check this node: agent-sandbox doctor
]])
whatis("agent-sandbox @VERSION@: kernel-enforced sandbox for AI agents (admin config @ADMIN_DIR@/sandbox.conf)")
conflict("agent-sandbox")
prepend_path("PATH", "@PREFIX@/venv/bin")
prepend_path("MANPATH", "@MANDIR@")
-- An empty element keeps man's own search path (a MANPATH of only our
-- directory hides every other man page): the Tcl template's append-path {}.
append_path("MANPATH", "")
-- For users and scripts to find the site's settings; the launcher never reads
-- it (its admin directory is fixed in the installed package, agent_sandbox/paths.py).
setenv("AGENT_SANDBOX_ADMIN_CONFIG", "@ADMIN_DIR@/sandbox.conf")
