"""MLflow's own features for the lineage: prompts, registered models, datasets and tables (used by `Lineage`).

- Every harness text is a **prompt version** of the prompt ``<whale-run-id>-harness`` (one prompt per WHALE run,
  created with `MlflowClient.create_prompt` / `create_prompt_version` and tagged with its experiment, so it shows on
  the experiment's Prompts tab). Version tags: ``whale.sha``, ``whale.status``, ``whale.score`` (the val score it
  was recorded with), ``whale.parent`` (parent sha) and ``whale.parent_prompt`` (the parent's ``prompts:/`` URI),
  ``whale.reason``; the final harness adds ``whale.test_score``. A harness recorded again (a later leg, a new
  status) keeps its version and gets the new status and score. Aliases are the run's roles: ``incumbent`` — the
  harness the run holds now (the latest accepted one, the one a leg starts from, or the one a weights leg trains
  under) — and ``final``. One prompt per run, because an alias means one version: shared across runs, ``final``
  would name whichever run ended last.
- The final checkpoint of a finished run is a **model version** of the registered model ``whale-<suite>-<model>``
  (one per suite and model, so the registry lists the runs of one task side by side), of the Logged Model (its
  ``model_id``, artifacts and source run), tags ``whale.run_id``, ``whale.model_id``, ``whale.val_score``,
  ``whale.test_score``, ``whale.harness_prompt``, and the alias ``final`` on the latest finished run's version
  (each version says which run it is).
- A suite split (``arith-val``, ``arith-test``) is an MLflow **dataset** (metadata only: suite, split, problem
  count, seed, suite config; the digest is MLflow's own over those): a run lists it as an input and the metrics
  logged on a Logged Model name it.
- A leg's candidates are a **table** artifact ``leaderboard.json`` (`MlflowClient.log_table`).

Raw proposals too long for a prompt version (MLflow keeps the text in a 100,000-character tag) are left to the
harness artifact, which holds every text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

PROMPT_SUFFIX = "-harness"
INCUMBENT_ALIAS = "incumbent"
FINAL_ALIAS = "final"
LEADERBOARD = "leaderboard.json"
_INCUMBENT_STATUSES = {"incumbent", "accepted", "trained-against"}
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.\-]")
_PROMPT_TEXT_MAX = 100_000  # mlflow.utils.validation.MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH
_TAG_MAX = 5000


def prompt_name(whale_run_id: str) -> str:
    """The prompt that holds a WHALE run's harness texts: ``<run-id>-harness`` (characters MLflow refuses -> ``_``)."""
    return _NAME_BAD.sub("_", whale_run_id)[:200] + PROMPT_SUFFIX


def model_name(suite: str, model: str) -> str:
    """The registered model of a suite and model: ``whale-arith-tiny`` (a model path contributes its last part)."""
    short = model.rstrip("/").rsplit("/", 1)[-1] or "model"
    return _NAME_BAD.sub("_", f"whale-{suite}-{short}")[:200]


def prompt_uri(name: str, version: int | str) -> str:
    return f"prompts:/{name}/{version}"


def score_text(score: float | None) -> str:
    return "none" if score is None or math.isnan(score) else f"{score:.4f}"


def find_prompt_version(client: Any, name: str, sha: str) -> Any | None:
    """The version of prompt ``name`` whose tag ``whale.sha`` is ``sha`` (None if the prompt or version is absent)."""
    from mlflow.exceptions import MlflowException

    token = None
    while True:
        try:
            page = client.search_prompt_versions(name, max_results=100, page_token=token)
        except MlflowException:  # no such prompt yet
            return None
        for pv in page:
            if pv.tags.get("whale.sha") == sha:
                return pv
        token = page.token
        if not token:
            return None


def ensure_prompt_version(
    client: Any,
    experiment_id: str,
    whale_run_id: str,
    sha: str,
    text: str,
    record: Mapping[str, Any],
) -> str | None:
    """Record a harness text as a version of the run's prompt (created on first use), with ``record``'s status,
    score, parent and reason as tags and the run's aliases moved (see the module docstring). Returns the version's
    ``prompts:/`` URI, or None for a text too long to be a prompt version."""
    from mlflow.exceptions import MlflowException
    from mlflow.prompt.constants import PROMPT_EXPERIMENT_IDS_TAG_KEY

    if len(text) > _PROMPT_TEXT_MAX:
        return None
    name = prompt_name(whale_run_id)
    if client.get_prompt(name) is None:
        try:
            client.create_prompt(
                name,
                description=f"The harness texts of WHALE run {whale_run_id}, one version each",
                tags={PROMPT_EXPERIMENT_IDS_TAG_KEY: f",{experiment_id},", "whale.run_id": whale_run_id},
            )
        except MlflowException:  # created meanwhile
            if client.get_prompt(name) is None:
                raise
    parent = record.get("parent")
    tags = {"whale.status": str(record["status"]), "whale.score": score_text(record.get("score"))}  # shown first
    if record.get("test_score") is not None:
        tags["whale.test_score"] = score_text(record["test_score"])
    tags |= {"whale.sha": sha, "whale.name": str(record.get("name") or sha[:12]), "whale.parent": parent or "none"}
    if record.get("reason"):
        tags["whale.reason"] = str(record["reason"])[:_TAG_MAX]
    if parent:
        found_parent = find_prompt_version(client, name, parent)
        if found_parent is not None:
            tags["whale.parent_prompt"] = prompt_uri(name, found_parent.version)
    pv = find_prompt_version(client, name, sha)
    if pv is None:
        summary = f"first recorded as {record['status']}, val score {tags['whale.score']}"
        pv = client.create_prompt_version(name, text, description=summary, tags=tags)
    else:
        for key, value in tags.items():
            if pv.tags.get(key) != value:
                client.set_prompt_version_tag(name, pv.version, key, value)
    if record["status"] in _INCUMBENT_STATUSES:
        client.set_prompt_alias(name, INCUMBENT_ALIAS, int(pv.version))
    elif record["status"] == FINAL_ALIAS:
        client.set_prompt_alias(name, FINAL_ALIAS, int(pv.version))
    return prompt_uri(name, pv.version)


def split_dataset(split: Mapping[str, Any]) -> Any:
    """An MLflow dataset (metadata only) for a suite split: ``{"suite": "arith", "split": "val", "n": 48,
    "seed": 0, "config": {...}}`` -> ``MetaDataset`` named ``arith-val``."""
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    source = CodeDatasetSource({str(k): v for k, v in split.items()})
    return MetaDataset(source, name=f"{split['suite']}-{split['split']}")  # type: ignore[abstract]


def log_split_input(client: Any, run_id: str, split: Mapping[str, Any]) -> Any:
    """List a suite split as an input dataset of ``run_id`` (context ``validation`` or ``test``; logged once per
    run); returns the MLflow dataset."""
    from mlflow.entities import DatasetInput, InputTag

    ds = split_dataset(split)
    run = client.get_run(run_id)
    have = run.inputs.dataset_inputs if run.inputs else []
    if not any(d.dataset.name == ds.name and d.dataset.digest == ds.digest for d in have):
        context = "validation" if split["split"] == "val" else str(split["split"])
        entity = DatasetInput(ds._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", context)])
        client.log_inputs(run_id, datasets=[entity])
    return ds


def log_leaderboard(client: Any, run_id: str, rows: Sequence[Mapping[str, Any]]) -> bool:
    """Store a leg's candidates as the table artifact ``leaderboard.json`` (columns from the first row); once per
    run: `MlflowClient.log_table` appends to an existing table, so a re-recorded leg keeps its first table.
    Returns whether it wrote."""
    if not rows or any(f.path == LEADERBOARD for f in client.list_artifacts(run_id)):
        return False
    columns = list(rows[0])
    client.log_table(run_id, data={c: [r.get(c) for r in rows] for c in columns}, artifact_file=LEADERBOARD)
    return True


def register_final(
    client: Any, name: str, model_id: str, run_id: str, tags: Mapping[str, str], description: str
) -> str:
    """Register a final checkpoint (Logged Model ``model_id``) as a version of ``name`` with the alias ``final``;
    the same model registered again keeps its version. Returns the version."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException:
        try:
            client.create_registered_model(name, description="Final checkpoints of WHALE runs on this suite and model")
        except MlflowException:  # created meanwhile
            client.get_registered_model(name)
    tags = {**tags, "whale.model_id": model_id}  # search_model_versions leaves ModelVersion.model_id empty
    found = [mv for mv in client.search_model_versions(f"name = '{name}'") if mv.tags.get("whale.model_id") == model_id]
    if found:
        version = str(found[0].version)
        for key, value in tags.items():
            client.set_model_version_tag(name, version, key, value)
    else:
        # the model's own artifact location and run, not ``models:/<id>``: MLflow's SQL registry resolves that URI
        # (and a model id without a run) through the process's default tracking store, not this client's
        model = client.get_logged_model(model_id)
        mv = client.create_model_version(
            name, model.artifact_location, run_id=model.source_run_id or run_id, tags=dict(tags),
            description=description, model_id=model_id,
        )  # fmt: skip
        version = str(mv.version)
    client.set_registered_model_alias(name, FINAL_ALIAS, version)
    # what `mlflow.register_model` adds: the Logged Model's page lists its model versions from this tag
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    linked = json.loads(client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
    entry = {"name": name, "version": version}
    if entry not in linked:
        client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps([*linked, entry])})
    return version
