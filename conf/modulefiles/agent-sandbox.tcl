#%Module1.0
## agent-sandbox @VERSION@ — a template for environment-modules and Lmod
## (scripts/install.sh fills it in with AGENT_SANDBOX_MODULEFILES=DIR; docs/install.md).
proc ModulesHelp { } {
    puts stderr "agent-sandbox @VERSION@: run AI agents and untrusted commands in a kernel-enforced sandbox."
    puts stderr "Site settings (admin floors): @ADMIN_DIR@/sandbox.conf — fixed in the install, never"
    puts stderr "taken from the environment. Check this node: agent-sandbox doctor"
}
module-whatis "agent-sandbox @VERSION@: kernel-enforced sandbox for AI agents (admin config @ADMIN_DIR@/sandbox.conf)"
conflict agent-sandbox
prepend-path PATH @PREFIX@/venv/bin
prepend-path MANPATH @MANDIR@
# An empty element keeps man's own search path: a MANPATH of only our
# directory (what prepend-path makes where MANPATH was unset) hides every
# other man page ("No manual entry for ls"; seen with environment-modules 5.2).
append-path MANPATH {}
# For users and scripts to find the site's settings (cat $AGENT_SANDBOX_ADMIN_CONFIG).
# The launcher never reads it: its admin directory is fixed in the installed
# package (agent_sandbox/paths.py), so no environment can move the floors.
setenv AGENT_SANDBOX_ADMIN_CONFIG @ADMIN_DIR@/sandbox.conf
