"""The one writer of a run's records: the archive (the source of truth) and its MLflow mirror, each in one call.

A leg and the flows hand the `Recorder` what they hold in memory — a checkpoint with the harness it was trained
against, a harness leg's incumbent and its candidates with status, score and reason, a leg's metrics, a run's
report — and it writes the archive rows and the MLflow records (artifacts, tags, metrics, the Logged Model) that
mirror them; nothing is read back from the archive or hashed again to be copied.

Modes:
- ``replay``: a resumed run re-executes a leg the archive already holds as *done* (its tasks come back ``Cached``):
  the recorder's `archive` is `Archive.read_only_view` (every write returns `SKIPPED`) and the MLflow mirror writes
  nothing, so no record is stored twice.
- ``idempotent_decisions``: `decide` stores a decision only when the run does not hold that very decision yet
  (`Archive.ensure_decision`): an iteration a killed run had started is taken again from its start on resume.
- without a `Lineage` (``whale search``), the MLflow mirror is off.

What the harness leg writes as it goes (its harnesses, candidates, statuses and evaluations, so that a killed leg
leaves its work on record) goes through `archive`; the MLflow mirror of that leg follows in one `harness_leg` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whale_core.records.archive import Archive
from whale_core.records.lineage import Lineage
from whale_core.records.refs import HarnessRef


@dataclass(frozen=True)
class LoggedCandidate:
    """One proposal of a harness leg as its MLflow mirror records it (``text``: the harness text, or the raw text of
    a proposal that never parsed; ``sha``: its harness sha, or sha256 of the raw text)."""

    sha: str
    text: str
    parent_sha: str | None
    status: str
    score: float | None
    reason: str


class Recorder:
    """Writes one run's records (see the module docstring). ``mlflow_run``: the MLflow run a leg's records go to (the
    leg's child run); ``mlflow_parent``: the run's own MLflow run."""

    def __init__(
        self,
        archive: Archive,
        lineage: Lineage | None = None,
        *,
        run_id: str,
        mlflow_parent: str | None = None,
        mlflow_run: str | None = None,
        replay: bool = False,
        idempotent_decisions: bool = False,
    ) -> None:
        self.archive = archive.read_only_view() if replay else archive
        self.lineage = lineage
        self.run_id = run_id
        self.mlflow_parent = mlflow_parent
        self.mlflow_run = mlflow_run
        self.replay = replay
        self.idempotent_decisions = idempotent_decisions

    @property
    def _mirror(self) -> Lineage | None:
        return None if self.replay else self.lineage

    # -- archive
    def decide(self, iteration: int, kind: str, reason: str, payload: Mapping[str, Any] | None = None) -> Any:
        """Record a decision (``continue``/``switch``, ``accept``/``reject``, ``proposer-unavailable``, ...)."""
        if self.idempotent_decisions:
            return self.archive.ensure_decision(self.run_id, iteration, kind, reason, payload)
        return self.archive.add_decision(self.run_id, iteration, kind, reason, payload)

    # -- archive and MLflow
    def checkpoint(
        self,
        checkpoint: Mapping[str, Any],
        trained_against: HarnessRef,
        score: float,
        steps: Sequence[Mapping[str, Any]],
    ) -> None:
        """A weights leg's new checkpoint (``id``, ``path``, ``harness_sha``, ``parent_id``, ``step``): its archive
        row, the harness it was trained against (artifact, status ``trained-against``, with the val ``score`` it
        started from), the checkpoint as an MLflow Logged Model (its id stored in the row) and the per-step GRPO
        reward history (``reward_mean``, ``reward_std``, ``frac_zero_std_groups`` of each step)."""
        if self.replay:
            return
        c = checkpoint
        self.archive.put_checkpoint(
            c["id"], self.run_id, c["path"], c["harness_sha"], parent_id=c["parent_id"], step=c["step"]
        )
        lineage, child = self.lineage, self.mlflow_run
        if lineage is None or child is None:
            return
        lineage.log_harness(
            child,
            trained_against.sha,
            trained_against.text,
            name=trained_against.load().name,
            parent_sha=trained_against.parent,
            status="trained-against",
            score=score,
        )
        model_id = lineage.log_checkpoint(
            child,
            Path(c["path"]),
            checkpoint_id=c["id"],
            harness_sha=c["harness_sha"],
            parent_checkpoint_id=c["parent_id"],
            step=c["step"],
        )
        self.archive.put_checkpoint(c["id"], self.run_id, c["path"], c["harness_sha"], mlflow_model_id=model_id)
        lineage.log_metric_history(
            child,
            [
                (
                    s["step"],
                    {
                        "reward": s["reward_mean"],
                        "reward_std": s["reward_std"],
                        "frac_zero_std": s["frac_zero_std_groups"],
                    },
                )
                for s in steps
            ],
        )

    def harness_leg(
        self,
        iteration: int,
        incumbent: HarnessRef,
        incumbent_name: str,
        incumbent_score: float,
        candidates: Sequence[LoggedCandidate],
        metrics: Mapping[str, float],
    ) -> None:
        """The MLflow mirror of a harness leg (its archive rows were written as it went): the incumbent (status
        ``incumbent``), every candidate in proposal order with its status, score and reason, and the leg's metrics
        at step ``iteration``."""
        lineage, child = self._mirror, self.mlflow_run
        if lineage is None or child is None:
            return
        lineage.log_harness(
            child,
            incumbent.sha,
            incumbent.text,
            name=incumbent_name,
            parent_sha=incumbent.parent,
            status="incumbent",
            score=incumbent_score,
        )
        for cand in candidates:
            lineage.log_harness(
                child,
                cand.sha,
                cand.text,
                name=cand.sha[:12],
                parent_sha=cand.parent_sha,
                status=cand.status,
                score=cand.score,
                reason=cand.reason,
            )
        lineage.log_metrics(child, metrics, step=iteration)

    def leg_done(
        self,
        leg_id: int,
        iteration: int,
        *,
        budget_used: int,
        harness_sha: str,
        checkpoint_id: str,
        metrics: Mapping[str, float],
        rollouts: int,
    ) -> None:
        """A leg that ended: its archive row (``done`` with what it ends with and its metrics), its metrics on its
        MLflow run, and the run's ``val_score`` and ``rollouts`` so far on the run's MLflow run (step ``iteration``)."""
        if self.replay:
            return
        self.archive.finish_leg(
            leg_id,
            budget_used=budget_used,
            incumbent_harness_out=harness_sha,
            checkpoint_out=checkpoint_id,
            metrics=metrics,
        )
        if self.lineage is None:
            return
        if self.mlflow_run is not None:
            self.lineage.log_metrics(self.mlflow_run, metrics, step=iteration)
        if self.mlflow_parent is not None:
            self.lineage.log_metrics(
                self.mlflow_parent, {"val_score": metrics["val_score"], "rollouts": float(rollouts)}, step=iteration
            )

    def run_end(
        self,
        report_md: Path,
        figure_png: Path,
        final: HarnessRef,
        final_score: float,
        metrics: Mapping[str, float],
    ) -> None:
        """A run's end on its MLflow run: the metric-curve figure, the report, the final harness (status ``final``,
        with its val score) and the run's closing metrics (test scores, budget spent)."""
        lineage, parent = self.lineage, self.mlflow_parent
        if lineage is None or parent is None:
            return
        lineage.log_figure(parent, figure_png, "metric_curve.png")
        lineage.log_text(parent, report_md.read_text(), "report.md")
        lineage.log_harness(
            parent,
            final.sha,
            final.text,
            name=final.load().name,
            parent_sha=final.parent,
            status="final",
            score=final_score,
        )
        lineage.log_metrics(parent, metrics)
