"""agent_sandbox.plancache (issue 28, rooms by concern)."""
