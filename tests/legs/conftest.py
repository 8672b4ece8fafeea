"""Fixtures of the legs' tests: the harness leg's LLM-proposer tests talk to the scripted OpenAI-compatible server of
tests/proposers/conftest.py (it stands in for a paid provider API), shared here by name."""

from tests.proposers.conftest import server

__all__ = ["server"]
