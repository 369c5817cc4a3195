"""agent_sandbox.agents (issue 28, rooms by concern)."""
