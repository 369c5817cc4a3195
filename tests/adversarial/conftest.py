"""The adversarial suite reuses the scope tests' long-lived sandboxes (one
`agent-sandbox run` serving many commands) and their helpers."""
from tests.integration.test_scope import jobs, sessions  # noqa: F401  (fixtures)
