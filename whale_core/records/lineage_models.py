"""The checkpoint half of the MLflow mirror (`whale_core.records.lineage.Lineage` inherits it): every checkpoint a
Logged Model of the leg's run — tagged with the harness it was trained against (and linked to that harness's prompt
version), its parent checkpoint as the leg's model input — and the run's final checkpoint a registered model version.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def _q(value: str, what: str) -> str:
    """Quote a value for an MLflow filter string (which has no escape for quotes: refuse them)."""
    if "'" in value or "\\" in value:
        raise ValueError(f"{what} {value!r} contains a quote or backslash; it cannot be used in an MLflow filter")
    return f"'{value}'"


def _all_pages(page: Callable[[str | None], Any], max_results: int | None) -> list[Any]:
    """Every item of a paged MLflow search (``page(token)`` returns a list with a ``.token`` for the next page),
    stopping early once ``max_results`` are in."""
    out: list[Any] = []
    token = None
    while True:
        got = page(token)
        out.extend(got)
        token = got.token
        if not token or (max_results and len(out) >= max_results):
            return out


class CheckpointMirror:
    """Checkpoints as MLflow Logged Models. The host class (`Lineage`) provides ``client``, ``experiment_id``,
    `harness_prompt` and `_whale_run_id`."""

    client: Any
    experiment_id: str

    def harness_prompt(self, whale_run_id: str, sha: str) -> str | None:
        raise NotImplementedError

    def _whale_run_id(self, run_id: str) -> str:
        raise NotImplementedError

    def log_checkpoint(
        self,
        run_id: str,
        checkpoint_dir: Path,
        *,
        checkpoint_id: str,
        harness_sha: str,
        parent_checkpoint_id: str | None,
        step: int | None = None,
    ) -> str:
        """Store a checkpoint directory as a Logged Model of ``run_id``; returns the model id.

        Tags: ``whale.checkpoint_id``, ``whale.harness_sha`` (the harness it was trained against), ``whale.run_id``,
        ``whale.parent_checkpoint_id`` (absent for a root checkpoint), ``whale.step``, ``whale.harness_prompt`` (the
        ``prompts:/`` URI of that harness when it was logged, also linked with MLflow's prompt-model link, which the
        model page shows as a link); the same as model params (the UI shows those; the root's parent param is
        ``"none"``). The parent checkpoint's Logged Model is ``run_id``'s model input. Idempotent by checkpoint id:
        a READY model with that tag is returned as is; a PENDING one (upload interrupted) is uploaded again.
        """
        from mlflow.entities import LoggedModelInput, LoggedModelOutput

        checkpoint_dir = Path(checkpoint_dir)
        if not checkpoint_dir.is_dir():
            raise FileNotFoundError(f"checkpoint directory {checkpoint_dir} does not exist")
        found = self._search_models({"whale.checkpoint_id": checkpoint_id}, max_results=1)
        if found and str(found[0].status) == "READY":
            return str(found[0].model_id)
        parent_model = self.model_id_of(parent_checkpoint_id) if parent_checkpoint_id else None
        if parent_model is not None:
            self.client.log_inputs(run_id, models=[LoggedModelInput(parent_model)])
        if found:
            model_id = str(found[0].model_id)
        else:
            whale_run_id = self.client.get_run(run_id).data.tags.get("whale.run_id", "")
            tags = {
                "whale.checkpoint_id": checkpoint_id,
                "whale.harness_sha": harness_sha,
                "whale.run_id": whale_run_id,
                "whale.step": str(step if step is not None else 0),
            }
            if parent_checkpoint_id:
                tags["whale.parent_checkpoint_id"] = parent_checkpoint_id
            prompt = self.harness_prompt(whale_run_id, harness_sha) if whale_run_id else None
            if prompt:
                tags["whale.harness_prompt"] = prompt
            model = self.client.create_logged_model(
                self.experiment_id,
                name=_model_name(checkpoint_id),
                source_run_id=run_id,
                tags=tags,
                # the MLflow UI's logged-model page lists params (not tags): mirror the lineage there too
                params={**tags, "whale.parent_checkpoint_id": parent_checkpoint_id or "none"},
                model_type="whale-checkpoint",
            )
            model_id = str(model.model_id)
            if prompt:
                self._link_prompt(model_id, prompt)
        self.client.log_model_artifacts(model_id, str(checkpoint_dir))
        self.client.finalize_logged_model(model_id, "READY")
        self.client.log_outputs(run_id, [LoggedModelOutput(model_id, int(step or 0))])
        return model_id

    def _link_prompt(self, model_id: str, prompt: str) -> None:
        """MLflow's prompt-model link (the ``mlflow.linkedPrompts`` tag the UI renders as a link), written through
        this client: `MlflowClient.link_prompt_version_to_model` writes to the process's default tracking store."""
        from mlflow.tracing.constant import TraceTagKey
        from mlflow.tracing.utils.prompt import update_linked_prompts_tag

        version = self.client.load_prompt(prompt)
        current = self.client.get_logged_model(model_id).tags.get(TraceTagKey.LINKED_PROMPTS)
        self.client.set_logged_model_tags(
            model_id, {TraceTagKey.LINKED_PROMPTS: update_linked_prompts_tag(current, [version])}
        )

    def model_id_of(self, checkpoint_id: str) -> str | None:
        """The Logged Model id of a checkpoint (None when it was never logged, e.g. the base model)."""
        found = self._search_models({"whale.checkpoint_id": checkpoint_id}, max_results=1)
        return str(found[0].model_id) if found else None

    def register_final(self, parent_run_id: str, model_id: str, tags: Mapping[str, str]) -> str:
        """The run's final checkpoint: an output of the run's own MLflow run (listed on its page) and a version of
        the registered model ``whale-<suite>-<model>`` (the run's ``whale.suite``/``whale.model`` tags) with the
        alias ``final`` (`mlflow_registry.register_final`). Returns the version."""
        from mlflow.entities import LoggedModelOutput

        from whale_core.records import mlflow_registry

        run = self.client.get_run(parent_run_id)
        outputs = run.outputs.model_outputs if run.outputs else []
        if not any(o.model_id == model_id for o in outputs):
            self.client.log_outputs(parent_run_id, [LoggedModelOutput(model_id, 0)])
        suite, model = run.data.tags.get("whale.suite", "suite"), run.data.tags.get("whale.model", "model")
        name = mlflow_registry.model_name(suite, model)
        whale_run_id = self._whale_run_id(parent_run_id)
        return mlflow_registry.register_final(
            self.client, name, model_id, parent_run_id, {"whale.run_id": whale_run_id, **tags},
            f"Final checkpoint of WHALE run {whale_run_id}",
        )  # fmt: skip

    def _search_models(self, match: Mapping[str, str], max_results: int | None = None) -> list[Any]:
        filt = " AND ".join(f"tags.`{k}` = {_q(v, k)}" for k, v in match.items())

        def page(token: str | None) -> Any:
            return self.client.search_logged_models(
                [self.experiment_id], filter_string=filt, max_results=max_results or 100,
                order_by=[{"field_name": "creation_time", "ascending": True}], page_token=token,
            )  # fmt: skip

        return _all_pages(page, max_results)

    def checkpoints_of(self, whale_run_id: str) -> list[Any]:
        """The checkpoints (``mlflow.entities.LoggedModel``, with ``.tags``) of a WHALE run, oldest first."""
        return self._search_models({"whale.run_id": whale_run_id})

def _model_name(checkpoint_id: str) -> str:
    """A Logged Model name for a checkpoint: ``ckpt-<id>`` with the characters MLflow refuses replaced."""
    name = checkpoint_id if checkpoint_id.startswith("ckpt") else f"ckpt-{checkpoint_id}"
    return re.sub(r"[/:.%\"'\s]", "-", name)[:200]
