"""Lineage: the MLflow mirror of the archive.

One MLflow *parent run* per WHALE run, one *child run* per leg (``iter-01-weights``), every harness text as an
artifact (``harnesses/<sha12>-<status>.yaml``) and as a prompt version, every checkpoint as a *Logged Model* tagged
with the harness it was trained against (its prompt version linked) and its parent checkpoint (the leg run's model
input); the final checkpoint a registered model version (see `whale_core.records.mlflow_registry`). The archive
(SQL) stays the source of truth for resume; this module only mirrors it so that a person can browse the lineage in
the MLflow UI, which opens on the experiment's runs (experiment tag ``mlflow.experimentKind`` =
``custom_model_development``, set on new and existing experiments); `Lineage.run_url` links a run there.

Steps: a metric of the run's course has one value per leg at step ``k`` = the number of legs done (step 0: the
initial evaluation, before any leg; iteration ``i``, counted from 0, logs at step ``i + 1``); GRPO's per-step
metrics (``grpo/reward``, ``grpo/reward_std``, ``grpo/frac_zero_std``) are at the global GRPO step of the
checkpoint lineage (a second weights leg continues the first's count). Scores say their split: ``val_score``,
``test_score``.

Design points:
- ``MlflowClient`` with explicit run ids everywhere, never the fluent ``mlflow.start_run`` API: Prefect runs tasks in
  threads and ``mlflow.active_run()`` is thread-local.
- Everything is idempotent, so that a resumed or retried run re-attaches instead of duplicating: runs are found by
  id, else by tags (``whale.run_id``, ``whale.iteration``, ``whale.leg``); harness artifacts by file name;
  checkpoints by the tag ``whale.checkpoint_id``.
- Embedded default: ``sqlite:///$WHALE_HOME/mlflow.db`` with artifacts under ``$WHALE_HOME/mlartifacts``; a server
  or Postgres by ``$MLFLOW_TRACKING_URI`` (see ``infra/``).

Simplified on purpose: MLflow params are immutable, so re-attaching only adds params that are missing (a resumed run
with a changed config keeps the first values; the archive records the truth). Secrets are redacted by key name
(segments ``key``, ``token``, ``secret``, ``password``, ...: ``hf_token`` is redacted, ``max_new_tokens`` is not) and
passwords inside URLs; this is a guard against accidents, not a secret scanner. mlflow and matplotlib are imported
lazily (the CLI imports this module).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.errors import WhaleError
from whale_core.records.lineage_models import CheckpointMirror, _all_pages, _q
from whale_core.records.mlflow_params import (  # noqa: F401 (re-exported: the lineage's params rule)
    _PARAM_MAX,
    REDACTED,
    _clean_key,
    flatten_params,
    is_secret_key,
    redact_value,
)
from whale_core.records.mlflow_store import default_artifact_location, default_uri, save_template, seed_store
from whale_core.records.portable import current_home, relocate_mlflow_store

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HARNESS_DIR = "harnesses"
HEADER_PREFIX = "# whale-harness-record: "
_SLUG = re.compile(r"^[A-Za-z0-9_\-]+$")
_TAG_MAX = 8000
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI opens such an experiment on its runs, not the GenAI overview


def leg_run_name(iteration: int, kind: str) -> str:
    """The MLflow name of a leg's child run: ``iter-01-weights``."""
    return f"iter-{iteration:02d}-{kind}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """A run's page in the MLflow UI at ``base`` (e.g. ``http://127.0.0.1:5000``)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def harness_artifact_path(sha: str, status: str) -> str:
    """Artifact path of a harness text: ``harnesses/<sha12>-<status>.yaml``."""
    return f"{HARNESS_DIR}/{sha[:12]}-{status}.yaml"


def parse_harness_artifact(text: str) -> tuple[dict[str, Any], str]:
    """Split a harness artifact into its record (sha, name, status, score, parent, reason) and the harness text."""
    first, _, body = text.partition("\n")
    if not first.startswith(HEADER_PREFIX):
        raise ValueError(f"not a WHALE harness artifact: first line is {first[:80]!r}")
    return json.loads(first[len(HEADER_PREFIX) :]), body


# ------------------------------------------------------------------------------------------------------- the store
class Lineage(CheckpointMirror):
    """The MLflow mirror of one experiment. Thread-safe to share: every call names its run explicitly.

    Contract: every ``ensure_*``/``log_*`` call is idempotent for the same inputs (a resumed run calls them again and
    gets the same ids back, nothing duplicated). Ids returned are MLflow run ids / logged-model ids, which the caller
    stores in the archive and passes back as ``existing_mlflow_run_id`` on resume.
    """

    def __init__(
        self, tracking_uri: str | None = None, experiment: str = "whale", artifact_location: str | None = None
    ):
        from mlflow import MlflowClient

        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()
        self.artifact_location = artifact_location or default_artifact_location(self.tracking_uri)
        try:
            relocate_mlflow_store(current_home(), self.tracking_uri)  # a moved or copied home: records/portable.py
            fresh = seed_store(self.tracking_uri)
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            if fresh is not None:
                save_template(fresh, self.client)
            self.experiment_id = self._ensure_experiment(experiment)
        except Exception as exc:
            if not _broken_store(exc):
                raise
            raise LineageError(
                f"the MLflow store {redact_value(self.tracking_uri)} cannot be opened ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}): restore it from a backup, or move it aside to start a new one "
                "(the archive, whale.db, still holds every run; a new store mirrors only what runs from now on)"
            ) from None
        self._whale_ids: dict[str, str] = {}

    def _ensure_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            if found.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return str(found.experiment_id)
        try:
            return str(
                self.client.create_experiment(
                    name, artifact_location=self.artifact_location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
                )
            )
        except MlflowException:  # created meanwhile by another process or thread
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return str(again.experiment_id)

    def run_url(self, run_id: str, base: str = "http://127.0.0.1:5000") -> str:
        """The MLflow UI page of a run of this experiment: ``<base>/#/experiments/<exp>/runs/<run>``."""
        return run_url(base, self.experiment_id, run_id)

    # ------------------------------------------------------------------------------------------------- runs
    def ensure_run(
        self,
        whale_run_id: str,
        name: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
        existing_mlflow_run_id: str | None = None,
    ) -> str:
        """The parent run of a WHALE run: re-attached (by id, else by tag ``whale.run_id``) or created.

        ``params`` is the run's config (nested); it is flattened and redacted. Returns the MLflow run id.
        """
        want = {"whale.run_id": whale_run_id, "whale.kind": "run", **(tags or {})}
        run_id = self._reattach(existing_mlflow_run_id, {"whale.run_id": whale_run_id, "whale.kind": "run"})
        if run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=_tags(want))
            run_id = run.info.run_id
        else:
            self._set_tags(run_id, want)
        self._log_missing_params(run_id, flatten_params(params))
        return run_id

    def ensure_leg(
        self,
        parent_run_id: str,
        whale_run_id: str,
        iteration: int,
        kind: str,
        existing_mlflow_run_id: str | None = None,
    ) -> str:
        """The child run of one leg (``iter-01-weights``), re-attached by id or by tags if it exists."""
        match = {
            "whale.run_id": whale_run_id,
            "whale.kind": "leg",
            "whale.iteration": str(iteration),
            "whale.leg": kind,
            "mlflow.parentRunId": parent_run_id,
        }
        run_id = self._reattach(existing_mlflow_run_id, match)
        if run_id is not None:
            return run_id
        run = self.client.create_run(self.experiment_id, run_name=leg_run_name(iteration, kind), tags=match)
        return str(run.info.run_id)

    def _reattach(self, run_id: str | None, match: Mapping[str, str]) -> str | None:
        """Find a run by id (if given and it exists) else by tags; reopen it (status RUNNING). None if absent."""
        from mlflow.exceptions import MlflowException

        found = None
        if run_id:
            try:
                found = self.client.get_run(run_id)
            except MlflowException:
                found = None
        if found is None:
            hits = self._search_runs(match, max_results=1)
            found = hits[0] if hits else None
        if found is None:
            return None
        if found.info.lifecycle_stage == "deleted":
            self.client.restore_run(found.info.run_id)
        if found.info.status != "RUNNING":
            self.client.update_run(found.info.run_id, status="RUNNING")
        return str(found.info.run_id)

    def _search_runs(self, match: Mapping[str, str], max_results: int | None = None) -> list[Any]:
        filt = " and ".join(f"tags.`{k}` = {_q(v, k)}" for k, v in match.items())

        def page(token: str | None) -> Any:
            return self.client.search_runs(
                [self.experiment_id], filter_string=filt, max_results=max_results or 1000,
                order_by=["attributes.start_time ASC"], page_token=token,
            )  # fmt: skip

        return _all_pages(page, max_results)

    def _set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in _tags(tags).items()])

    def _log_missing_params(self, run_id: str, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        have = self.client.get_run(run_id).data.params
        new = [Param(k, v) for k, v in params.items() if k not in have]
        for i in range(0, len(new), 100):  # log_batch takes at most 100 params per call
            self.client.log_batch(run_id, params=new[i : i + 100])

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int | None = None,
        *,
        model_id: str | None = None,
        dataset: Any = None,
    ) -> None:
        """Log metric values at ``step`` (0 if None); keys are cleaned to MLflow's allowed characters. With
        ``model_id`` they are the Logged Model's metrics too, measured on ``dataset`` (an MLflow dataset)."""
        self.log_metric_history(run_id, [(int(step or 0), metrics)], model_id=model_id, dataset=dataset)

    def log_metric_history(
        self,
        run_id: str,
        rows: Sequence[tuple[int, Mapping[str, float]]],
        *,
        model_id: str | None = None,
        dataset: Any = None,
    ) -> None:
        """Log many steps' metric values (e.g. a GRPO leg's per-step reward) in as few calls as MLflow allows (1,000
        values per ``log_batch``): one call per step would cost a store round trip each (300 steps: ~1–3 s)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ds = {"dataset_name": dataset.name, "dataset_digest": dataset.digest} if dataset is not None else {}
        batch = [
            Metric(_clean_key(k), float(v), now, int(step), model_id=model_id, **ds)
            for step, metrics in rows
            for k, v in metrics.items()
        ]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(run_id, metrics=batch[i : i + 1000])

    def has_metric(self, run_id: str, key: str, step: int) -> bool:
        """Whether ``run_id`` holds a value of ``key`` at ``step`` (a resumed run logs a point once)."""
        return any(m.step == step for m in self.client.get_metric_history(run_id, key))

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        """One tag on a run (e.g. the link to the orchestrator's record of it)."""
        self.client.set_tag(run_id, key, value)

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        """Close a run: ``FINISHED``, ``FAILED`` or ``KILLED``."""
        if status not in {"FINISHED", "FAILED", "KILLED"}:
            raise ValueError(f"run status {status!r} is not one of FINISHED, FAILED, KILLED")
        self.client.set_terminated(run_id, status=status)

    # ------------------------------------------------------------------------------------------------- artifacts
    def log_harness(
        self,
        run_id: str,
        sha: str,
        text: str,
        *,
        name: str,
        parent_sha: str | None,
        status: str,
        score: float | None,
        reason: str | None = None,
        test_score: float | None = None,
    ) -> str:
        """Store a harness text as ``harnesses/<sha12>-<status>.yaml`` and as a version of the run's prompt.

        The file's first line is a YAML comment holding a JSON record (sha, name, status, score — the val score it
        was recorded with —, parent, reason, and ``test_score`` when given; read it back with
        ``parse_harness_artifact``); the rest is the harness text unchanged. ``status`` is a slug (``candidate``,
        ``accepted``, ``rejected``, ``invalid``, ...). Logging the same sha+status twice writes the file once. The
        prompt version (`mlflow_registry.ensure_prompt_version`) carries the same record as tags and the run's
        aliases. Returns the artifact path.
        """
        from whale_core.records import mlflow_registry

        if not _SLUG.match(status):
            raise ValueError(f"harness status {status!r} must be letters, digits, '_' or '-'")
        path = harness_artifact_path(sha, status)
        record = {"sha": sha, "name": name, "status": status, "score": score, "parent": parent_sha, "reason": reason}
        if test_score is not None:
            record["test_score"] = test_score
        mlflow_registry.ensure_prompt_version(
            self.client, self.experiment_id, self._whale_run_id(run_id), sha, text, record
        )
        if any(f.path == path for f in self.client.list_artifacts(run_id, HARNESS_DIR)):
            return path
        body = text if text.endswith("\n") else text + "\n"
        self.client.log_text(run_id, f"{HEADER_PREFIX}{json.dumps(record, sort_keys=True)}\n{body}", path)
        return path

    def harness_prompt(self, whale_run_id: str, sha: str) -> str | None:
        """The ``prompts:/<name>/<version>`` URI of a harness of a WHALE run (None if it was never logged)."""
        from whale_core.records import mlflow_registry

        name = mlflow_registry.prompt_name(whale_run_id)
        pv = mlflow_registry.find_prompt_version(self.client, name, sha)
        return None if pv is None else mlflow_registry.prompt_uri(name, pv.version)

    def _whale_run_id(self, run_id: str) -> str:
        """The WHALE run an MLflow run belongs to (its ``whale.run_id`` tag; the MLflow id for a run without one)."""
        if run_id not in self._whale_ids:
            self._whale_ids[run_id] = self.client.get_run(run_id).data.tags.get("whale.run_id") or run_id
        return self._whale_ids[run_id]

    def log_leaderboard(self, run_id: str, rows: Sequence[Mapping[str, Any]]) -> bool:
        """A leg's candidates as the table artifact ``leaderboard.json`` (see `mlflow_registry.log_leaderboard`)."""
        from whale_core.records import mlflow_registry

        return mlflow_registry.log_leaderboard(self.client, run_id, rows)

    def log_split(self, run_id: str, split: Mapping[str, Any]) -> Any:
        """A suite split (``suite``, ``split``, ``n``, ``seed``, ``config``) as an input dataset of ``run_id``;
        returns the MLflow dataset (for metrics measured on it)."""
        from whale_core.records import mlflow_registry

        return mlflow_registry.log_split_input(self.client, run_id, split)

    def read_harness(self, run_id: str, artifact_path: str) -> tuple[dict[str, Any], str]:
        """Download a harness artifact and return (record, harness text)."""
        with tempfile.TemporaryDirectory() as tmp:
            local = self.client.download_artifacts(run_id, artifact_path, tmp)
            return parse_harness_artifact(Path(local).read_text(encoding="utf-8"))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as the run artifact ``artifact_file`` (e.g. ``reports/summary.md``)."""
        self.client.log_text(run_id, text, artifact_file)

    def log_figure(self, run_id: str, fig_or_png_path: Figure | str | Path, artifact_file: str) -> None:
        """Store a matplotlib Figure (saved as PNG) or an existing image file as the artifact ``artifact_file``."""
        if isinstance(fig_or_png_path, str | Path):
            src = Path(fig_or_png_path)
            if not src.is_file():
                raise FileNotFoundError(f"figure file {src} does not exist")
            directory, _, filename = artifact_file.rpartition("/")
            with tempfile.TemporaryDirectory() as tmp:
                dst = Path(tmp) / filename
                shutil.copyfile(src, dst)
                self.client.log_artifact(run_id, str(dst), directory or None)
            return
        self.client.log_figure(run_id, fig_or_png_path, artifact_file)

    # ------------------------------------------------------------------------------------------------- read side
    def runs_of(self, whale_run_id: str) -> list[Any]:
        """The parent run and the leg runs of a WHALE run (``mlflow.entities.Run``), oldest first."""
        return self._search_runs({"whale.run_id": whale_run_id})



class LineageError(WhaleError, RuntimeError):
    """The MLflow store cannot be opened (a truncated or corrupt database file)."""


def _broken_store(exc: BaseException) -> bool:
    """Whether opening the store failed because its database is damaged (not a bug of ours)."""
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError | DatabaseError) or any(
        s in text for s in ("malformed", "not a database", "file is encrypted", "database disk image")
    )


def _tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {_clean_key(k): str(v)[:_TAG_MAX] for k, v in tags.items()}
