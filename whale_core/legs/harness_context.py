"""What a harness leg shows its proposer: the incumbent, the archive's past under this policy, failing traces."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from whale_core.harness import Harness
from whale_core.legs.harness_config import SearchConfig
from whale_core.proposers.base import FORMAT_REFERENCE, ArchiveEntry, FailingTrace, ProposalContext
from whale_core.records.archive import Archive
from whale_core.suites.base import Suite


def archive_entries(
    archive: Archive, run_id: str, policy_id: str, *, exclude: str, top: int, as_of: datetime | None
) -> list[ArchiveEntry]:
    """What the proposer sees of the past: the ``top`` harnesses by validation score *under this policy* (largest
    subset per harness) and the latest ``top`` rejections with reasons — only records created before ``as_of``, so
    a resumed or rerun leg sees exactly what its first attempt saw."""

    def before(t: datetime) -> bool:
        return as_of is None or t.replace(tzinfo=None) < as_of.replace(tzinfo=None)

    best = archive.best_evaluations(run_id, checkpoint_id=policy_id, split="val", as_of=as_of, exclude=exclude)
    cands = [c for c in archive.candidates(run_id) if before(c.created)]
    status = {c.harness_sha: c.status for c in cands if c.harness_sha}
    ranked = sorted(best.values(), key=lambda ev: (-ev.score, ev.harness_sha))[:top]
    entries: list[ArchiveEntry] = []
    for ev in ranked:
        h = archive.find_harness(ev.harness_sha)
        if h is not None:
            entries.append(
                ArchiveEntry(
                    ev.harness_sha,
                    h.text,
                    ev.score,
                    ev.n,
                    status.get(ev.harness_sha, "evaluated"),
                    None,
                    h.parent_sha,
                    ev.prompt_tokens / max(ev.n, 1),
                )
            )
    rejected = [c for c in cands if c.status == "rejected"][-top:] if top else []
    for rej in rejected:
        entries.append(
            ArchiveEntry(rej.harness_sha or "", rej.text or "", None, 0, "rejected", rej.reason, rej.parent_sha, None)
        )
    return entries


def proposer_spent(archive: Archive, run_id: str, as_of: datetime | None) -> dict[str, float]:
    """What the proposer spent in the run's harness legs that finished before ``as_of`` (their ``proposer_*``
    metrics, summed; `whale_core.proposers.spend`)."""
    total: dict[str, float] = {}
    for leg in archive.legs(run_id):
        if leg.kind != "harness" or leg.finished is None:
            continue
        if as_of is not None and leg.finished.replace(tzinfo=None) >= as_of.replace(tzinfo=None):
            continue
        for key, value in leg.metrics.items():
            if key.startswith("proposer_") and isinstance(value, int | float):
                name = key.removeprefix("proposer_")
                total[name] = total.get(name, 0.0) + float(value)
    return total


def proposal_context(
    suite: Suite,
    incumbent: Harness,
    inc_score: float,
    inc_n: int,
    inc_tokens: float | None,
    inc_traces: Sequence[dict[str, Any]],
    archive: Archive,
    run_id: str,
    policy_id: str,
    cfg: SearchConfig,
    restrict_to: frozenset[str] | None,
    seed: int,
    iteration: int,
    as_of: datetime | None,
    *,
    origin: Harness | None = None,
) -> ProposalContext:
    """The proposer's context: the suite, the format reference, the incumbent with its score, `archive_entries`,
    up to ``cfg.failing_traces`` of the incumbent's failing traces (shuffled by seed and iteration) and the run's
    seed harness (``origin``, when it is not the incumbent)."""
    entries = archive_entries(archive, run_id, policy_id, exclude=incumbent.sha, top=cfg.archive_top, as_of=as_of)
    failing = [t for t in inc_traces if float(t["score"]) < 1.0]
    random.Random(f"traces-{seed}-{iteration}").shuffle(failing)
    traces = [
        FailingTrace(
            problem_id=str(t["problem_id"]),
            prompt=str(t["prompt"]),
            completion=t["completions"][0] if t["completions"] else "",
            parsed=t["answer"],
            gold=str(t["gold"]),
            error=t["error"],
        )
        for t in failing[: cfg.failing_traces]
    ]
    inc_entry = ArchiveEntry(
        incumbent.sha, incumbent.text, inc_score, inc_n, "incumbent", None, incumbent.parent, inc_tokens
    )
    return ProposalContext(
        suite_description=suite.description,
        format_reference=FORMAT_REFERENCE,
        incumbent=inc_entry,
        archive=entries,
        failing_traces=traces,
        restrict_to=restrict_to,
        seed=seed,
        iteration=iteration,
        origin=None if origin is None or origin.sha == incumbent.sha else origin.text,
        proposer_spent=proposer_spent(archive, run_id, as_of),
    )
