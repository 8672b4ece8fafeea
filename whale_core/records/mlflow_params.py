"""MLflow params of a WHALE config, and the redaction rule: a nested config flattened into ``key.sub: text``
params, secret keys and URL passwords masked, values cut to MLflow's limit (used by `whale_core.records.lineage`,
which re-exports these names)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from whale_core.dotted import flatten

REDACTED = "***"
_SECRET_SEGMENTS = {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials"}
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)([^@\s]+)(@)")
_BAD_KEY_CHARS = re.compile(r"[^\w./\- :]")
_PARAM_MAX = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH


def is_secret_key(key: str) -> bool:
    """True when a config key names a credential: one of its ``_``/``-``/``.``/camelCase segments is a secret word."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower()
    segments = [s for s in re.split(r"[_\-.\s/]+", words) if s]
    return any(s in _SECRET_SEGMENTS for s in segments)


def redact_value(value: str) -> str:
    """Mask a password embedded in a URL (``postgresql://u:pw@host`` -> ``postgresql://u:***@host``)."""
    return _URL_PASSWORD.sub(rf"\g<1>{REDACTED}\g<3>", value)


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested config into MLflow params: ``{"weights": {"lr": 1e-5}}`` -> ``{"weights.lr": "1e-05"}``.

    Lists and other values become JSON (or ``str``); secret keys become ``"***"``; long values are truncated to
    MLflow's limit; characters MLflow rejects in keys become ``_``.
    """
    flat = flatten(config, prefix, leaf=lambda key, value: not value or is_secret_key(key))
    return {_clean_key(key): _param_text(key[len(prefix) :], value) for key, value in flat.items()}


def _param_text(key: str, value: Any) -> str:
    if is_secret_key(key.rsplit(".", 1)[-1]):
        text = REDACTED
    elif isinstance(value, str):
        text = redact_value(value)
    elif value is None or isinstance(value, bool | int | float):
        text = str(value)
    else:
        try:
            text = redact_value(json.dumps(value, sort_keys=True, default=str))
        except (TypeError, ValueError):
            text = redact_value(str(value))
    return text[:_PARAM_MAX]


def _clean_key(key: str) -> str:
    return _BAD_KEY_CHARS.sub("_", key).strip("/") or "_"
