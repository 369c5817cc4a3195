"""Shipped configuration files (installed as package data agent_sandbox.conf)."""
