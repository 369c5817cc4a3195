"""agent_sandbox.services (issue 28, rooms by concern)."""
