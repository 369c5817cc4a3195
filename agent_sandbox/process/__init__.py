"""agent_sandbox.process (issue 28, rooms by concern)."""
