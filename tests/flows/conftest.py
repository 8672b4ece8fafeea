"""Fixtures for flow tests (helpers live in flow_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir.parent
