"""Shared test set-up: an isolated project home and the offline environment, set before anything heavy imports.

Tests use ``$WHALE_TEST_HOME`` (default ``<repo>/.whale-test``) as the project home so that the tiny model built once
is reused by later test sessions on the same machine (its cache key is the recipe hash, so a changed recipe rebuilds).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_HOME = Path(os.environ.get("WHALE_TEST_HOME", REPO / ".whale-test")).resolve()
os.environ["WHALE_HOME"] = str(TEST_HOME)

from whale_core.env import setup_offline_env  # noqa: E402

setup_offline_env(TEST_HOME)
