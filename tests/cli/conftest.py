"""Fixtures of the CLI tests: the scripted OpenAI-compatible server of tests/proposers/conftest.py (it stands in for a
paid provider API), shared here by name."""

from tests.proposers.conftest import server

__all__ = ["server"]
