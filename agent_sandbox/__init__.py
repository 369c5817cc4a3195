"""agent-sandbox: run AI coding agents and other untrusted commands in a
kernel-enforced jail on shared HPC login nodes."""

__version__ = "0.1.0"
