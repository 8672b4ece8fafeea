"""Project home and the offline environment.

Everything WHALE writes in the embedded default lives under ``$WHALE_HOME`` (default ``./.whale``):
``whale.db`` (archive), ``mlflow.db`` + ``mlartifacts/`` (lineage), ``prefect/`` (PREFECT_HOME),
``models/`` (built tiny models, keyed by recipe hash), ``runs/<run>/`` (traces, reports, checkpoints). Outside the
home, a machine-wide cache (``$WHALE_CACHE_DIR``, default ``~/.cache/whale``) holds migrated database templates that
a new home's databases start from (`whale_core.records.db_templates`); deleting it is always safe.

`setup_offline_env()` sets the variables measured in STACK.md so that nothing reaches a hub or a telemetry
endpoint at run time. It only sets a variable the user has not set, so a user may still point WHALE at servers
(``MLFLOW_TRACKING_URI``, ``PREFECT_API_URL``) or at a proposer API.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, unquote

from whale_core.errors import WhaleError


class HomeError(WhaleError, OSError):
    """The project home cannot be created or written; the message names it and what to do."""


def whale_home() -> Path:
    """The project home: ``$WHALE_HOME`` or ``./.whale`` (created on first use; `HomeError` if that fails or it is
    not writable)."""
    home = Path(os.environ.get("WHALE_HOME", ".whale")).expanduser().resolve()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HomeError(
            f"the WHALE home {home} cannot be created ({exc.strerror or exc}): set WHALE_HOME to a writable directory"
        ) from exc
    if not os.access(home, os.W_OK | os.X_OK):
        raise HomeError(f"the WHALE home {home} is not writable: set WHALE_HOME to a writable directory")
    return home


def sqlite_url(path: str | Path, driver: str = "sqlite") -> str:
    """The SQLAlchemy URL of the SQLite file ``path``, percent-encoded: URL parsers decode ``%20`` in a database
    path, so a home named ``a%20b`` put its databases in a sibling directory ``a b`` before this was used for every
    embedded store (the archive, MLflow, Prefect)."""
    return f"{driver}:///{quote(str(path), safe='/')}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (`sqlite_url`'s inverse; None for any other store or an in-memory one)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    return Path(unquote(url[len("sqlite:///") :].split("?", 1)[0])).resolve()


def setup_offline_env(home: Path | None = None) -> Path:
    """Set the offline/telemetry variables (only where unset) and return the project home."""
    home = home or whale_home()
    defaults = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(home / "hf"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        # WHALE's own log lines (whale_core.progress: GRPO steps, candidates, leg results) reach the flow/task run's
        # logs in the Prefect UI; outside a run (a CLI command's own lines) they are not an error
        "PREFECT_LOGGING_EXTRA_LOGGERS": "whale",
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_DISABLED": "true",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    prefect_db = Path(os.environ["PREFECT_HOME"]).expanduser() / "prefect.db"
    ours = sqlite_url(prefect_db, "sqlite+aiosqlite")
    if ours != f"sqlite+aiosqlite:///{prefect_db}" and not any(
        os.environ.get(k) for k in ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
    ):  # a home whose path a URL would decode (a '%', a space): Prefect's own URL would point elsewhere
        os.environ["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = ours
    return home
