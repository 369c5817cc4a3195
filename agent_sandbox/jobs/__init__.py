"""agent_sandbox.jobs (issue 28, rooms by concern)."""
