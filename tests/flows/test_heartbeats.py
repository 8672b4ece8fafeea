"""`flows.common.heartbeats`: which flow runs send Prefect's crash-detection heartbeats (settings only, no server)."""

from __future__ import annotations

from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

from flows.common import heartbeats

SERVER = "http://127.0.0.1:4200/api"


def _frequency() -> int | None:
    return get_current_settings().flows.heartbeat_frequency


def test_subflows_never_send_heartbeats() -> None:
    with temporary_settings(updates={PREFECT_API_URL: SERVER}):
        default = _frequency()
        assert default is not None  # Prefect's default: on
        with heartbeats():
            assert _frequency() is None
        assert _frequency() == default  # restored after the subflow


def test_a_top_level_run_keeps_them_only_on_a_persistent_server() -> None:
    with temporary_settings(updates={PREFECT_API_URL: SERVER}), heartbeats(top_level=True):
        assert _frequency() is not None
    with temporary_settings(restore_defaults={PREFECT_API_URL}), heartbeats(top_level=True):
        assert _frequency() is None  # Prefect's temporary server: it ends with the process, nothing watches it
