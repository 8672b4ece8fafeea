"""The one writer of a run's records: the archive (the source of truth) and its MLflow mirror, each in one call.

A leg and the flows hand the `Recorder` what they hold in memory — a checkpoint with the harness it was trained
against, a harness leg's incumbent and its candidates with status, score and reason, a leg's metrics, a run's
report — and it writes the archive rows and the MLflow records (artifacts, tags, metrics, the Logged Model) that
mirror them; nothing is read back from the archive or hashed again to be copied.

One mode, ``replay``: a resumed run re-executes a leg the archive already holds as *done* (its calls come back
cached); its recorder (`Recorder.for_leg`) reads through `Archive.read_only_view` (every write returns `SKIPPED`) and
mirrors into `whale_core.records.no_lineage.NoLineage`, so no record is stored twice. Apart from that, every decision
is stored only when the run does not hold that very decision yet (`Archive.ensure_decision`): an iteration a killed
run had started is taken again from its start on resume. Without a `Lineage` (``whale search``, ``whale train``)
the mirror is a `NoLineage`.

Nothing else writes a run's records: the engine (`whale_core.ascent`) and the legs call the methods here
(`tests/test_architecture.py` checks that no other module calls an archive or lineage write).

MLflow steps (see `whale_core.records.lineage`): a per-leg metric of iteration ``i`` is logged at step ``i + 1``
(`leg_step`), the initial evaluation at step 0 (`run_start`); GRPO's per-step metrics at the global GRPO step.
``splits`` (``{"val": {...}, "test": {...}}``, see `Lineage.log_split`) name the datasets scores are measured on.

What the harness leg writes as it goes (its harnesses, candidates, statuses and evaluations, so that a killed leg
leaves its work on record) goes through `archive`; the MLflow mirror of that leg follows in one `harness_leg` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.records.archive import Archive, LegRecord
from whale_core.records.archive.tables import CandidateStatus, LegKind, RunStatus
from whale_core.records.lineage import Lineage
from whale_core.records.no_lineage import NoLineage
from whale_core.records.refs import HarnessRef

if TYPE_CHECKING:
    from datetime import datetime

    from whale_core.harness import Harness

Mirror = Lineage | NoLineage


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
    prompt_tokens: float | None = None  # mean prompt tokens per problem, when it was scored


def suite_splits(suite: Mapping[str, Any], seed: int, val_n: int, test_n: int) -> dict[str, dict[str, Any]]:
    """The run's val and test splits as `Recorder` ``splits`` (suite config as `SuiteConfig` dumps it)."""
    name = str(suite.get("name", "suite"))
    return {
        split: {"suite": name, "split": split, "n": n, "seed": seed, "config": dict(suite)}
        for split, n in (("val", val_n), ("test", test_n))
    }


MAX_STORED_TEXT = 8192  # characters of a rejected proposal's raw text that are stored (a harness is <= 16 KiB)


def excerpt(text: str | None, limit: int = MAX_STORED_TEXT) -> str | None:
    """``text`` as the records store a proposal's raw text: at most ``limit`` characters, the cut said."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit:,} more characters not stored]"


def create_run(archive: Archive, run_id: str, mode: str, config: Mapping[str, Any]) -> bool:
    """The archive row of a new run, before anything runs (so ``whale resume`` finds it); False when ``run_id``
    exists already (nothing is written then)."""
    try:
        archive.get_run(run_id)
    except LookupError:
        archive.create_run(run_id, mode, dict(config), run_id=run_id)
        return True
    return False


def record_comparison(
    lineage: Lineage,
    compare_id: str,
    params: Mapping[str, Any],
    paths: Mapping[str, Path],
    metrics: Mapping[str, float],
    existing: str | None,
) -> str:
    """A ``whale compare``'s own MLflow run (re-attached by ``existing`` id or tag): its config as params, its
    figures (``*.png`` of ``paths``) and ``report.md`` as artifacts under ``compare/``, its per-mode metrics.
    Returns the MLflow run id."""
    run = lineage.ensure_run(
        f"compare:{compare_id}", f"compare-{compare_id}", params,
        tags={"whale.kind": "compare", "whale.compare": compare_id}, existing_mlflow_run_id=existing,
    )  # fmt: skip
    for name, path in paths.items():
        if name.endswith(".png"):
            lineage.log_figure(run, path, f"compare/{name}")
    lineage.log_text(run, paths["report.md"].read_text(), "compare/report.md")
    lineage.log_metrics(run, metrics)
    lineage.end(run)
    return run


def leg_step(iteration: int) -> int:
    """The MLflow step of iteration ``iteration``'s per-leg metrics: the number of legs done after it (step 0 is the
    initial evaluation)."""
    return iteration + 1


class Recorder:
    """Writes one run's records (see the module docstring). ``mlflow_run``: the MLflow run a leg's records go to (the
    leg's child run); ``mlflow_parent``: the run's own MLflow run; ``leg_id``: the archive row of the leg being
    recorded (`start_leg`)."""

    def __init__(
        self,
        archive: Archive,
        lineage: Mirror | None = None,
        *,
        run_id: str,
        mlflow_parent: str | None = None,
        mlflow_run: str | None = None,
        replay: bool = False,
        splits: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.store = archive  # the archive itself (a replayed leg's recorder still reads and closes through it)
        self.archive = archive.read_only_view() if replay else archive
        self.lineage: Mirror = lineage if lineage is not None else NoLineage()
        self.run_id = run_id
        self.mlflow_parent = mlflow_parent
        self.mlflow_run = mlflow_run
        self.replay = replay
        self.splits = dict(splits or {})
        self.leg_id: int | None = None
        self._new_model: str | None = None  # the Logged Model this leg's checkpoint became

    @classmethod
    def open(
        cls,
        archive: Archive,
        lineage: Mirror,
        *,
        run_id: str,
        mode: str,
        config: Mapping[str, Any],
        params: Mapping[str, Any],
        tags: Mapping[str, str],
        splits: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Recorder:
        """The recorder of run ``run_id``: its archive row (created when missing) and its MLflow parent run
        (re-attached, or created and its id stored in the row)."""
        try:
            run = archive.get_run(run_id)
        except LookupError:
            run = archive.create_run(run_id, mode, dict(config), run_id=run_id)
        parent = lineage.ensure_run(run_id, run_id, params, tags=tags, existing_mlflow_run_id=run.mlflow_run_id)
        if parent and run.mlflow_run_id != parent:
            archive.update_run(run_id, mlflow_run_id=parent)
        return cls(archive, lineage, run_id=run_id, mlflow_parent=parent or None, splits=splits)

    def for_leg(self, *, replay: bool) -> Recorder:
        """A recorder for one leg of this run (``replay``: the archive already holds it as done)."""
        return Recorder(
            self.store, self.lineage, run_id=self.run_id, mlflow_parent=self.mlflow_parent, replay=replay,
            splits=self.splits,
        )  # fmt: skip

    def _dataset(self, run_id: str, split: str) -> Any:
        """The MLflow dataset of a suite split, listed as ``run_id``'s input (None without split descriptions)."""
        if split not in self.splits:
            return None
        return self.lineage.log_split(run_id, self.splits[split])

    @property
    def _mirror(self) -> Mirror:
        return NoLineage() if self.replay else self.lineage

    # -- the run
    def run_status(self, status: RunStatus) -> None:
        """The run's archive status: ``running``, ``finished`` or ``failed``."""
        self.archive.update_run(self.run_id, status=status)

    def link_run(self, url: str | None) -> None:
        """Link the run's MLflow run to the orchestrator's record of it (``whale.prefect_flow_run``)."""
        if url and self.mlflow_parent:
            self.lineage.set_tag(self.mlflow_parent, "whale.prefect_flow_run", url)

    def end_run(self, status: str = "FINISHED") -> None:
        """Close the run's MLflow run."""
        if self.mlflow_parent:
            self.lineage.end(self.mlflow_parent, status)

    def decide(self, iteration: int, kind: str, reason: str, payload: Mapping[str, Any] | None = None) -> Any:
        """Record a decision (``continue``/``switch``, ``accept``/``reject``, ``stop``, ``proposer-unavailable``,
        ...), once: the same decision of the same iteration is not stored again."""
        return self.archive.ensure_decision(self.run_id, iteration, kind, reason, payload)

    # -- a leg
    def close_attempts(self, iteration: int, kind: str, *, refresh: bool, generation: int) -> datetime | None:
        """Mark this iteration's earlier attempts of the leg as history (left out of the report's tables): one still
        ``running`` died with its process, one ``done`` is superseded by a rerun. Returns when the first began."""
        earlier = [leg for leg in self.store.legs(self.run_id) if leg.iteration == iteration and leg.kind == kind]
        for stale in earlier:
            if stale.status == "running":  # its process died (a resumed run): this attempt takes over
                self.archive.end_attempt(stale.id, "interrupted", "its process ended before the leg finished")
            elif refresh and stale.status == "done":
                self.archive.end_attempt(stale.id, "superseded", f"recomputed by whale rerun (generation {generation})")
        return min((leg.started for leg in earlier), default=None)

    def start_leg(
        self, iteration: int, kind: LegKind, *, harness_in: str, checkpoint_in: str, done: LegRecord | None,
        link: str | None,
    ) -> LegRecord:  # fmt: skip
        """The leg's archive row (``running``) and its MLflow child run (``iter-01-weights``; a replayed leg's
        re-attached), linked to the orchestrator's record of it (``link``)."""
        leg = self.archive.start_leg(
            self.run_id, iteration, kind, incumbent_harness_in=harness_in, checkpoint_in=checkpoint_in
        )
        self.leg_id = leg.id
        if self.mlflow_parent:
            child = self.lineage.ensure_leg(
                self.mlflow_parent, self.run_id, iteration, kind,
                existing_mlflow_run_id=done.mlflow_run_id if done else None,
            )  # fmt: skip
            self.mlflow_run = child or None
            if child:
                self.archive.set_leg_mlflow_run(leg.id, child)
                if link:
                    self.lineage.set_tag(child, "whale.prefect_flow_run", link)
        return leg

    def leg_failed(self, error: str, budget_used: int) -> None:
        """The leg raised: its row ``failed`` with the error, its MLflow run ``FAILED``."""
        if self.leg_id is not None:
            self.archive.fail_leg(self.leg_id, error, budget_used=budget_used)
        if self.mlflow_run:
            self.lineage.end(self.mlflow_run, "FAILED")

    # -- what a harness leg writes as it goes (its archive rows; the MLflow mirror follows in `harness_leg`)
    def harness(self, h: Harness) -> None:
        """A harness text the leg scored or was proposed (stored once by sha)."""
        self.archive.put_harness(h.sha, h.text, h.name, h.parent)

    def candidate(
        self, sha: str | None, parent: str | None, proposer: str, status: CandidateStatus, reason: str | None,
        text: str | None = None,
    ) -> int:  # fmt: skip
        """One proposal of the leg (``proposed``, or ``rejected`` with the reason and an `excerpt` of its raw text);
        its row id."""
        return int(
            self.archive.add_candidate(
                run_id=self.run_id, leg_id=self.leg_id, harness_sha=sha, parent_sha=parent, proposer=proposer,
                status=status, reason=excerpt(reason, 2000), text=excerpt(text),
            ).id
        )  # fmt: skip

    def candidate_status(self, candidate_id: int, status: CandidateStatus, reason: str | None) -> None:
        """A candidate's final status (``accepted``/``lost``) with the reason."""
        self.archive.set_candidate_status(candidate_id, status, reason)

    def evaluation(self, **fields: Any) -> None:
        """A harness's scores under a policy on a val subset (`Archive.record_evaluation`'s fields)."""
        self.archive.record_evaluation(run_id=self.run_id, **fields)

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
        reward history (``grpo/reward``, ``grpo/reward_std``, ``grpo/frac_zero_std`` at the global GRPO step)."""
        if self.replay:
            return
        c = checkpoint
        self.archive.put_checkpoint(
            c["id"], self.run_id, c["path"], c["harness_sha"], parent_id=c["parent_id"], step=c["step"]
        )
        lineage, child = self.lineage, self.mlflow_run
        if not child:
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
        self._new_model = model_id
        # the checkpoint's step counts the whole lineage's GRPO steps; this leg's steps are its last ones
        offset = int(c["step"]) - max((int(s["step"]) for s in steps), default=0)
        lineage.log_metric_history(
            child,
            [
                (
                    offset + int(s["step"]),
                    {
                        "grpo/reward": s["reward_mean"],
                        "grpo/reward_std": s["reward_std"],
                        "grpo/frac_zero_std": s["frac_zero_std_groups"],
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
        incumbent_tokens: float | None = None,
    ) -> None:
        """The MLflow mirror of a harness leg (its archive rows were written as it went): the incumbent (status
        ``incumbent``), every candidate in proposal order with its status, score and reason (artifacts and prompt
        versions), the leaderboard table (incumbent first, then best val score first) and the leg's metrics at
        step `leg_step`."""
        lineage, child = self._mirror, self.mlflow_run
        if not child:
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
                excerpt(cand.text) or "",
                name=cand.sha[:12],
                parent_sha=cand.parent_sha,
                status=cand.status,
                score=cand.score,
                reason=cand.reason,
            )
        head = LoggedCandidate(incumbent.sha, incumbent.text, incumbent.parent, "incumbent", incumbent_score, "",
                               incumbent_tokens)  # fmt: skip
        ranked = sorted(candidates, key=lambda c: -(c.score if c.score is not None else float("-inf")))
        lineage.log_leaderboard(child, [_board_row(lineage, self.run_id, c) for c in [head, *ranked]])
        lineage.log_metrics(child, metrics, step=leg_step(iteration))

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
        """A leg that ended: its MLflow run closed, its archive row (``done`` with what it ends with and its
        metrics), its metrics on its MLflow run (``val_score`` also on the Logged Model of the checkpoint the leg
        trained, measured on the val split), and the run's ``val_score`` and ``rollouts`` so far on the run's MLflow
        run (step `leg_step`)."""
        if self.mlflow_run:
            self.lineage.end(self.mlflow_run)  # a replayed leg's re-attached run too
        if self.replay:
            return
        self.archive.finish_leg(
            leg_id,
            budget_used=budget_used,
            incumbent_harness_out=harness_sha,
            checkpoint_out=checkpoint_id,
            metrics=metrics,
        )
        step = leg_step(iteration)
        if self.mlflow_run:
            rest = dict(metrics)
            if self._new_model is not None:
                val = {"val_score": rest.pop("val_score")}
                ds = self._dataset(self.mlflow_run, "val")
                self.lineage.log_metrics(self.mlflow_run, val, step=step, model_id=self._new_model, dataset=ds)
            self.lineage.log_metrics(self.mlflow_run, rest, step=step)
        if self.mlflow_parent:
            self.lineage.log_metrics(
                self.mlflow_parent, {"val_score": metrics["val_score"], "rollouts": float(rollouts)}, step=step
            )

    def run_start(self, val_score: float, rollouts: int) -> None:
        """The initial evaluation on the run's MLflow run: ``val_score`` and ``rollouts`` at step 0 (once: a
        resumed run does not log it again), the val split as the run's input."""
        lineage, parent = self._mirror, self.mlflow_parent
        if not parent or lineage.has_metric(parent, "val_score", 0):
            return
        self._dataset(parent, "val")
        lineage.log_metrics(parent, {"val_score": val_score, "rollouts": float(rollouts)}, step=0)

    def run_end(
        self,
        report_md: Path,
        figure_png: Path,
        final: HarnessRef,
        final_score: float,
        metrics: Mapping[str, float],
        *,
        test_score: float | None = None,
        final_checkpoint: str | None = None,
    ) -> None:
        """A run's end on its MLflow run: the metric-curve figure, the report, the final harness (status ``final``,
        with its val score and ``test_score``), the run's closing metrics (test scores, budget spent), and the
        final checkpoint's Logged Model (when the run trained one): ``test_score`` on the model (test split) and a
        registered model version with the alias ``final``."""
        lineage, parent = self.lineage, self.mlflow_parent
        if not parent:
            return
        lineage.log_figure(parent, figure_png, "metric_curve.png")
        reward_png = figure_png.parent / "reward_curve.png"  # written by the report when the run trained
        if reward_png.is_file():
            lineage.log_figure(parent, reward_png, "reward_curve.png")
        lineage.log_text(parent, report_md.read_text(), "report.md")
        lineage.log_harness(
            parent,
            final.sha,
            final.text,
            name=final.load().name,
            parent_sha=final.parent,
            status="final",
            score=final_score,
            test_score=test_score,
        )
        lineage.log_metrics(parent, metrics)
        model_id = lineage.model_id_of(final_checkpoint) if final_checkpoint else None
        if test_score is not None:
            ds = self._dataset(parent, "test")
            lineage.log_metrics(parent, {"test_score": test_score}, model_id=model_id, dataset=ds)
        if model_id is None:
            return
        tags = {"whale.val_score": f"{final_score:.4f}", "whale.harness_sha": final.sha}
        if test_score is not None:
            tags["whale.test_score"] = f"{test_score:.4f}"
        prompt = lineage.harness_prompt(self.run_id, final.sha)
        if prompt:
            tags["whale.harness_prompt"] = prompt
        lineage.register_final(parent, model_id, tags)


def _board_row(lineage: Mirror, run_id: str, c: LoggedCandidate) -> dict[str, Any]:
    """One leaderboard row: the candidate's sha12, status, val score, mean prompt tokens, reason and prompt URI."""
    return {
        "sha12": c.sha[:12],
        "status": c.status,
        "val_score": None if c.score is None else round(c.score, 4),
        "prompt_tokens": None if c.prompt_tokens is None else round(c.prompt_tokens, 1),
        "reason": c.reason or "",
        "prompt": lineage.harness_prompt(run_id, c.sha) or "",
    }
