"""`NoLineage`: the stand-in for `whale_core.records.lineage.Lineage` where there is no MLflow mirror.

A `whale_core.records.recorder.Recorder` always has a lineage to write to: the real one, or this one, which takes
every call the recorder makes and writes nothing (``whale search``/``whale train`` records, unit tests without an
MLflow store, and a replayed leg's mirror, whose records exist from its first attempt). Ids it hands out are
empty strings and lookups find nothing, so the recorder's code has no ``if lineage is None`` branches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class NoLineage:
    """Every `Lineage` method the recorder calls, doing nothing (see the module docstring)."""

    def ensure_run(self, whale_run_id: str, name: str, params: Mapping[str, Any], **_: Any) -> str:
        return ""

    def ensure_leg(self, parent_run_id: str, whale_run_id: str, iteration: int, kind: str, **_: Any) -> str:
        return ""

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        return None

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        return None

    def run_url(self, run_id: str, base: str = "") -> str | None:
        return None

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], **_: Any) -> None:
        return None

    def log_metric_history(self, run_id: str, points: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        return None

    def has_metric(self, run_id: str, key: str, step: int) -> bool:
        return False

    def log_harness(self, run_id: str, sha: str, text: str, **_: Any) -> str:
        return ""

    def harness_prompt(self, whale_run_id: str, sha: str) -> str | None:
        return None

    def log_leaderboard(self, run_id: str, rows: Sequence[Mapping[str, Any]]) -> bool:
        return False

    def log_split(self, run_id: str, split: Mapping[str, Any]) -> Any:
        return None

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        return None

    def log_figure(self, run_id: str, fig_or_png_path: Any, artifact_file: str) -> None:
        return None

    def log_checkpoint(self, run_id: str, checkpoint_dir: Path, **_: Any) -> str | None:
        return None

    def model_id_of(self, checkpoint_id: str) -> str | None:
        return None

    def register_final(self, parent_run_id: str, model_id: str, tags: Mapping[str, str]) -> str:
        return ""
