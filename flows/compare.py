"""``whale-compare``: every (mode x seed) as a ``whale-run`` subflow under one budget config, then the comparison
report (bar chart, curves with leg switches, budget table, phase sweep) and the robustness matrix.

Resume: run ids are deterministic (``<compare id>-<label>-s<seed>``). A run the archive holds as finished (with its
``summary.json``) is taken as is; a failed or interrupted one is resumed (``whale_run`` on the same id: its completed
tasks come back ``Cached``); a stored run whose config differs from the one asked for is an error. A failing run is
recorded (and shown in the report) and the comparison goes on. The matrix cells are ``rollout`` tasks, so they come
back ``Cached`` on a second invocation too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow

from flows.common import heartbeats
from flows.startup import prepare
from flows.whale_run import whale_run
from tasks import rollout_task
from tasks.runtime import suite_of
from whale_core.ascent.setup import seed_harness
from whale_core.config import WhaleConfig, upgrade_stored
from whale_core.env import whale_home
from whale_core.legs.population import probe_of
from whale_core.records.archive import Archive
from whale_core.records.recorder import create_run
from whale_core.records.refs import HarnessRef, PolicyRef
from whale_core.science.compare import (
    CompareError,
    CompareSpec,
    RunOutcome,
    Variant,
    check_compare_id,
    check_sweep,
    config_diff,
    config_note,
    outcome_from_run,
    plan_variants,
    run_id_for,
    variant_config,
    write_compare_report,
)
from whale_core.science.robustness import (
    MatrixHarness,
    MatrixModel,
    RobustnessMatrix,
    compute_matrix,
    harness_set,
)


def compare_dir(compare_id: str) -> Path:
    return whale_home() / "compare" / compare_id


def _one_run(archive: Archive, variant: Variant, seed: int, run_cfg: WhaleConfig, run_id: str) -> RunOutcome:
    wanted = run_cfg.model_dump(mode="json")
    try:
        stored = archive.get_run(run_id)
    except LookupError:
        stored = None
    if stored is not None:
        stored_config = upgrade_stored(stored.config)
        diff = config_diff(stored_config, wanted, shared_only=True)
        if diff:
            raise CompareError(
                f"run {run_id} exists with a different config ({', '.join(diff[:8])}); use another compare id"
            )
        wanted = stored_config  # resume exactly what was started (like `whale resume`)
        summary_file = whale_home() / "runs" / run_id / "summary.json"
        if stored.status == "finished" and summary_file.is_file():
            summary = json.loads(summary_file.read_text())
            return outcome_from_run(archive, variant, seed, run_id, summary, source="archive")
    else:
        create_run(archive, run_id, run_cfg.mode, wanted)
    with heartbeats():
        state = whale_run(run_id, WhaleConfig.model_validate(wanted), return_state=True)
    if state.is_completed():
        return outcome_from_run(archive, variant, seed, run_id, state.result())
    exc = state.result(raise_on_failure=False)
    error = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(state.message)
    return RunOutcome(variant.label, variant.mode, seed, run_id, "failed", error=error)


def _policy_of(archive: Archive, base: PolicyRef, checkpoint_id: str | None, run_id: str) -> PolicyRef:
    if not checkpoint_id or checkpoint_id == base.checkpoint_id:
        return base
    rec = archive.find_checkpoint(checkpoint_id, run_id)  # the run's own copy
    if rec is None:
        raise CompareError(f"final checkpoint {checkpoint_id} is not in the archive")
    from whale_core.records.checkpoints import Checkpoint

    return PolicyRef.of_checkpoint(base, Checkpoint.load(rec.path))


def _matrix(cfg: WhaleConfig, spec: CompareSpec, outcomes: list[RunOutcome], archive: Archive, out: Path) -> Any:
    done = [o for o in outcomes if o.ok]
    if not spec.matrix.enabled or not done:
        return None
    base = PolicyRef.base(cfg.model.name, cfg.model.device)
    seed_h = seed_harness(cfg, suite_of(cfg.suite))
    models = [MatrixModel("base", None, base, seed_h.sha)]
    models += [
        MatrixModel(
            f"{o.label}/s{o.seed}", o.run_id, _policy_of(archive, base, o.final_checkpoint, o.run_id), o.final_harness
        )
        for o in done
        if o.final_harness
    ]
    finals = [(f"{o.label}/s{o.seed}", o.final_harness) for o in done if o.final_harness]
    probe = probe_of(suite_of(cfg.suite), "test", 16, cfg.seed)
    cols = harness_set(archive, [o.run_id for o in done], finals, seed_h, spec.matrix, probe=probe)
    traces = str(out / "matrix-traces")

    def evaluate(model: MatrixModel, harness: MatrixHarness, problems: list[Any]) -> float:
        name = f"matrix-{model.label}-x-{harness.label}".replace("{", "{{").replace("}", "}}")
        res = rollout_task.with_options(task_run_name=name)(
            model.policy, HarnessRef.of(harness.harness), cfg.suite, "test", len(problems), cfg.seed,
            cfg.rollout.batch_size, traces,
        )  # fmt: skip
        if res.n != len(problems):
            raise CompareError(f"matrix cell {model.label} x {harness.label}: {res.n} != {len(problems)} problems")
        return float(res.score)

    matrix = compute_matrix(models, cols, suite_of(cfg.suite), spec.matrix.test_problems, evaluate)
    (out / "robustness.json").write_text(json.dumps(matrix.__dict__, indent=1))
    (out / "harnesses").mkdir(exist_ok=True)
    for c in cols:
        (out / "harnesses" / f"{c.label.replace(':', '_').replace('/', '_')}.yaml").write_text(c.harness.text)
    return matrix


@flow(name="whale-compare", flow_run_name="compare-{compare_id}", persist_result=True, validate_parameters=False)
def whale_compare(
    compare_id: str, config: dict[str, Any], spec: dict[str, Any], command: str = "", request: Any = None
) -> dict[str, Any]:
    """Run the plan, then write and log the report; returns a JSON-able summary (also ``compare.json``)."""
    cfg = WhaleConfig.model_validate(config)
    sp = CompareSpec.model_validate(spec)
    out = compare_dir(check_compare_id(compare_id))
    out.mkdir(parents=True, exist_ok=True)
    state_file = out / "compare.json"
    previous = json.loads(state_file.read_text()) if state_file.is_file() else {}
    archive = Archive(cfg.tracking.archive_url)
    outcomes: list[RunOutcome] = []
    for variant in plan_variants(sp.modes, sp.sweep_phase):
        for seed in sp.seeds:
            rid = run_id_for(compare_id, variant, seed)
            outcomes.append(_one_run(archive, variant, seed, variant_config(cfg, variant, seed), rid))
    matrix: RobustnessMatrix | None = None
    matrix_error = None
    try:
        matrix = _matrix(cfg, sp, outcomes, archive, out)
    except Exception as exc:  # the matrix is an extra: a failure is reported, the comparison report still comes out
        matrix_error = f"{type(exc).__name__}: {exc}"
    note = config_note(cfg, sp.seeds)
    if matrix_error:
        note += f"\n\nRobustness matrix failed: {matrix_error}"
    paths = write_compare_report(out, compare_id, outcomes, command=command, config_note=note, matrix=matrix)
    mlflow_id = _log_mlflow(cfg, compare_id, sp, outcomes, paths, previous.get("mlflow_run_id"))
    summary = {
        "compare_id": compare_id,
        "spec": sp.model_dump(mode="json"),
        "config": config,
        "command": command,
        "request": request,
        "report": str(paths["report.md"]),
        "mlflow_run_id": mlflow_id,
        "matrix_error": matrix_error,
        "outcomes": [o.__dict__ for o in outcomes],
    }
    state_file.write_text(json.dumps(summary, indent=1, default=str))
    return summary


def _log_mlflow(
    cfg: WhaleConfig,
    compare_id: str,
    sp: CompareSpec,
    outcomes: list[RunOutcome],
    paths: dict[str, Path],
    existing: str | None,
) -> str:
    from whale_core.records.lineage import Lineage
    from whale_core.records.recorder import record_comparison
    from whale_core.science.compare import aggregate

    metrics: dict[str, float] = {}
    for s in aggregate(outcomes):
        if s.n:
            metrics[f"test_mean.{s.label}"] = s.mean
            metrics[f"test_sd.{s.label}"] = s.sd
    metrics["runs_failed"] = float(sum(not o.ok for o in outcomes))
    return record_comparison(
        Lineage(cfg.tracking.mlflow_uri, cfg.tracking.experiment), compare_id,
        {"compare": sp.model_dump(mode="json"), **cfg.model_dump(mode="json")}, paths, metrics, existing,
    )  # fmt: skip


def resolve_config(compare_id: str, cfg: WhaleConfig, request: Any) -> WhaleConfig:
    """The base config of a comparison: ``cfg`` for a new id; for an existing id the config it was started with,
    provided the same options (``request``: config file text and ``--set`` items) are given again. So a resume is
    not broken by a changed default in a newer WHALE, and changed options are refused rather than mixed in."""
    state_file = compare_dir(check_compare_id(compare_id)) / "compare.json"
    if not state_file.is_file():
        return cfg
    stored = json.loads(state_file.read_text())
    if request is not None and stored.get("request") not in (None, request):
        raise CompareError(
            f"compare {compare_id} was started with other options ({stored.get('request')}); give the same "
            f"--config/--set to resume it, or use a new --id"
        )
    try:
        return WhaleConfig.model_validate(upgrade_stored(stored["config"]))
    except ValueError as exc:
        raise CompareError(f"compare {compare_id}'s stored config no longer validates: {exc}") from None


def start_compare(
    cfg: WhaleConfig, spec: CompareSpec, compare_id: str, command: str = "", request: Any = None
) -> dict[str, Any]:
    """Entry point for the CLI: one Prefect flow run of `whale_compare` (an existing id resumes, `resolve_config`)."""
    base = resolve_config(compare_id, cfg, request)
    check_sweep(base, spec.sweep_phase)
    prepare(base)
    with heartbeats(top_level=True):
        return whale_compare(
            check_compare_id(compare_id), base.model_dump(mode="json"), spec.model_dump(mode="json"), command, request
        )
