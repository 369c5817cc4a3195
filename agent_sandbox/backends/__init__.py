"""Backends compile one Policy into a Plan. Each module answers the same
questions in the same order: is it available (a real probe), what does it
guarantee for this policy, what is its plan (argv, payloads, env)."""
