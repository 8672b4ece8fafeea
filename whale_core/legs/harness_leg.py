"""The harness leg: with the policy frozen, propose candidate harnesses, score them, keep the best only if it wins.

One leg (`run_harness_leg`):

1. Score the incumbent on the largest validation subset (reused from the archive when this policy already scored it).
2. Build the proposer's context: suite description, format reference, the incumbent, the archive's top harnesses
   *as scored under the current policy*, recent rejections with reasons, and failing traces of the incumbent.
3. Ask the proposer for ``candidates`` texts. Invalid ones (bad YAML, unsafe template, prompt-weights violation,
   duplicates) are recorded as rejected with the reason; a dead proposer (`ProposerUnavailable`) is recorded and the
   leg ends with the incumbent unchanged — it never crashes a run.
4. Successive halving over nested prefixes of one fixed validation ordering (so every comparison is paired).
5. The round winner replaces the incumbent only if a paired test on the same problems says it is better by more
   than the noise (``z`` standard errors and ``min_delta``).

Every rollout is charged to the budget (``harness`` kind) and recorded as an evaluation in the archive, with its
traces on disk. Scores are cached per (harness sha, policy id): promoting a candidate to a larger subset only rolls
out the problems it has not seen (`whale_core.legs.scoring`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.legs.scoring import BudgetStop, RollMany, ScoreBlock, Scorer, score_block, validation_order
from whale_core.legs.selection import PairedResult, paired_test, pareto_front, successive_halving
from whale_core.proposers.base import (
    FORMAT_REFERENCE,
    ArchiveEntry,
    FailingTrace,
    Proposal,
    ProposalContext,
    Proposer,
    ProposerUnavailable,
    check_candidate,
)
from whale_core.records.archive import Archive
from whale_core.suites.base import Suite


class ServedConfig(BaseModel):
    """The ``served:`` proposer's knobs (a local model WHALE serves itself; `whale_core.proposers.served`)."""

    model_config = ConfigDict(extra="forbid")

    context_tokens: int = Field(2500, ge=200, description="prompt tokens per request, by the model's tokenizer")
    max_tokens: int = Field(400, ge=64, le=4096, description="reply tokens per request (one candidate each)")
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    timeout: float = Field(600.0, gt=0, description="seconds per request (a small model on a busy CPU is slow)")
    start_timeout: float = Field(300.0, gt=0, description="seconds for the server's first healthy answer")
    device: str = Field("cpu", description="the server's --device: cpu, cuda, cuda:0, auto")


class SearchConfig(BaseModel):
    """The harness leg's knobs. ``proposer`` is ``mutate`` (offline), ``served:DIR`` / ``served:NAME`` (a local chat
    model that WHALE serves and stops itself, see ``served``) or a litellm model string such as
    ``openai/gpt-4o-mini``, ``anthropic/claude-sonnet-4-5``, ``ollama/llama3`` (with ``api_base`` for an
    OpenAI-compatible server). API keys come from the environment only (``api_key_env`` names a custom variable)."""

    model_config = ConfigDict(extra="forbid")

    proposer: str = "mutate"
    api_base: str | None = None
    api_key_env: str | None = None
    candidates: int = Field(8, ge=1, le=64, description="candidates proposed per harness leg")
    rounds: list[int] = Field(default_factory=lambda: [40, 100, 200], description="successive-halving subset sizes")
    keep_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="share of candidates kept per halving round")
    z: float = Field(1.645, ge=0.0, description="standard errors a winner must clear (paired test)")
    min_delta: float = Field(0.0, ge=0.0, le=1.0)
    archive_top: int = Field(8, ge=0, le=100, description="prior harnesses shown to the proposer")
    failing_traces: int = Field(8, ge=0, le=100)
    context_tokens: int = Field(6000, ge=500)
    timeout: float = Field(60.0, gt=0)
    num_retries: int = Field(2, ge=0, le=10)
    max_ops: int = Field(2, ge=1, le=6, description="mutate: operators applied per candidate")
    served: ServedConfig = Field(default_factory=ServedConfig)

    @field_validator("rounds")
    @classmethod
    def _rounds_increasing(cls, v: list[int]) -> list[int]:
        if not v or any(n < 1 for n in v) or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError(
                "rounds must be a non-empty, strictly increasing list of positive sizes, e.g. [40, 100, 200]"
            )
        return v


def make_proposer(cfg: SearchConfig, seed: int) -> Proposer:
    """The proposer a config names."""
    if cfg.proposer == "mutate":
        from whale_core.proposers.mutate import MutateProposer

        return MutateProposer(seed=seed, max_ops=cfg.max_ops)
    if cfg.proposer.startswith("served:"):
        from whale_core.proposers.serve import resolve_served_model
        from whale_core.proposers.served import ServedProposer

        s = cfg.served
        return ServedProposer(
            resolve_served_model(cfg.proposer.removeprefix("served:")),
            temperature=s.temperature,
            timeout=s.timeout,  # no retries: a local server that timed out or died is not helped by asking again
            context_tokens=s.context_tokens,
            max_tokens=s.max_tokens,
            device=s.device,
            start_timeout=s.start_timeout,
        )
    if "/" not in cfg.proposer:
        raise ValueError(
            f"search.proposer {cfg.proposer!r}: use 'mutate', 'served:/path/to/hf-model-dir' (or served:NAME) or a "
            "litellm model string like 'openai/gpt-4o-mini'"
        )
    from whale_core.proposers.llm import LLMProposer

    return LLMProposer(
        model=cfg.proposer,
        api_base=cfg.api_base,
        timeout=cfg.timeout,
        num_retries=cfg.num_retries,
        context_tokens=cfg.context_tokens,
        api_key_env=cfg.api_key_env,
    )


@dataclass(frozen=True)
class CandidateOutcome:
    sha: str | None
    name: str | None
    status: str  # rejected | lost | accepted
    reason: str | None
    score: float | None = None
    n: int = 0
    prompt_tokens: float | None = None


@dataclass
class HarnessLegResult:
    incumbent_in: Harness
    incumbent_out: Harness
    accepted: bool
    incumbent_score: float
    winner_score: float | None
    paired: PairedResult | None
    candidates: list[CandidateOutcome]
    completions: int
    reason: str
    proposer_usage: dict[str, float] = field(default_factory=dict)

    def leaderboard(self) -> list[dict[str, Any]]:
        """Scored candidates and the incumbent, best first, with the score-vs-prompt-tokens Pareto flags."""
        scored = sorted((c for c in self.candidates if c.score is not None), key=lambda c: -(c.score or 0.0))
        flags = pareto_front([(c.score or 0.0, c.prompt_tokens or 0.0) for c in scored])
        return [
            {
                "sha": c.sha,
                "name": c.name,
                "status": c.status,
                "score": c.score,
                "n": c.n,
                "tokens": c.prompt_tokens,
                "pareto": flag,
            }
            for c, flag in zip(scored, flags, strict=True)
        ]


def archive_entries(
    archive: Archive, run_id: str, policy_id: str, *, exclude: str, top: int, as_of: datetime | None
) -> list[ArchiveEntry]:
    """What the proposer sees of the past: the ``top`` harnesses by validation score *under this policy* (largest
    subset per harness) and the latest ``top`` rejections with reasons — only records created before ``as_of``, so
    a resumed or rerun leg sees exactly what its first attempt saw."""

    def before(t: datetime) -> bool:
        return as_of is None or t.replace(tzinfo=None) < as_of.replace(tzinfo=None)

    best: dict[str, Any] = {}
    for ev in archive.evaluations(run_id, checkpoint_id=policy_id, split="val"):
        if before(ev.created) and ev.harness_sha != exclude:
            cur = best.get(ev.harness_sha)
            if cur is None or (ev.n, ev.created) > (cur.n, cur.created):
                best[ev.harness_sha] = ev
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


def _context(
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
) -> ProposalContext:
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
    )


def run_harness_leg(
    *,
    policy: Any,
    incumbent: Harness,
    suite: Suite,
    cfg: SearchConfig,
    archive: Archive,
    run_id: str,
    leg_id: int | None,
    iteration: int,
    seed: int,
    traces_dir: Path,
    batch_size: int = 64,
    budget: Budget | None = None,
    restrict_to: frozenset[str] | None = None,
    proposer: Proposer | None = None,
    roll_many: RollMany | None = None,
    policy_id: str | None = None,
    as_of: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> HarnessLegResult:
    """Run one harness leg (see the module docstring). Never raises for a bad candidate or a dead proposer."""
    say = progress or (lambda _msg: None)
    pid = policy_id or str(policy.policy_id)
    problems = validation_order(suite, seed)
    sizes = [n for n in cfg.rounds if n <= len(problems)] or [len(problems)]
    full = sizes[-1]
    traces_dir.mkdir(parents=True, exist_ok=True)

    def local_roll_many(jobs: list[tuple[Harness, int, int]]) -> list[ScoreBlock]:
        return [score_block(policy, h, suite, problems[i:j], batch_size=batch_size, seed=seed) for h, i, j in jobs]

    scorer = Scorer(roll_many or local_roll_many, len(problems), budget)
    proposer = proposer or make_proposer(cfg, seed)

    def record(h: Harness, n: int) -> None:
        scores = scorer.scores[h.sha][:n]
        path = traces_dir / f"{h.sha[:12]}-{pid[:16]}-val{n}.jsonl"
        _write_traces(path, scorer.traces[h.sha][:n])
        archive.record_evaluation(
            run_id=run_id,
            harness_sha=h.sha,
            checkpoint_id=pid,
            split="val",
            subset=f"first{n}@seed{seed}",
            score=sum(scores) / len(scores),
            n=n,
            completions=n * h.spec.inference.samples,
            prompt_tokens=int(sum(scorer.tokens[h.sha][:n])),
            completion_tokens=int(sum(t.get("completion_tokens", 0) for t in scorer.traces[h.sha][:n])),
            traces_path=str(path),
        )

    archive.put_harness(incumbent.sha, incumbent.text, incumbent.name, incumbent.parent)
    try:
        inc_scores = scorer.score(incumbent, full)
    except BudgetStop as stop:
        return HarnessLegResult(incumbent, incumbent, False, float("nan"), None, None, [], 0, str(stop))
    record(incumbent, full)
    inc_score = sum(inc_scores) / len(inc_scores)
    say(f"incumbent {incumbent.name} ({incumbent.sha[:8]}): {inc_score:.3f} on {full} val problems")

    ctx = _context(
        suite,
        incumbent,
        inc_score,
        full,
        scorer.prompt_tokens(incumbent.sha),
        scorer.traces[incumbent.sha],
        archive,
        run_id,
        pid,
        cfg,
        restrict_to,
        seed,
        iteration,
        as_of,
    )
    outcomes: list[CandidateOutcome] = []
    usage: dict[str, float] = {}
    try:
        proposals: list[Proposal] = proposer.propose(ctx, cfg.candidates)
    except ProposerUnavailable as exc:
        archive.add_decision(
            run_id=run_id, iteration=iteration, kind="proposer-unavailable", reason=str(exc), payload={}
        )
        return HarnessLegResult(
            incumbent, incumbent, False, inc_score, None, None, [], scorer.completions, f"proposer unavailable: {exc}"
        )

    valid: dict[str, Harness] = {}
    cand_ids: dict[str, int] = {}
    for p in proposals:
        for key, value in p.usage.items():
            usage[key] = usage.get(key, 0.0) + float(value)
        h = p.harness
        reason = p.reason
        if p.status == "valid" and h is not None and (h.sha in valid or h.sha == incumbent.sha):
            reason, h = "duplicate of another candidate or the incumbent", None
        if h is not None and restrict_to is not None:  # enforced here too: a custom proposer may ignore it
            checked = check_candidate(h.text, incumbent, restrict_to, p.proposer, parent=h.parent)
            if checked.status != "valid":
                reason, h = checked.reason, None
        if p.status != "valid" or h is None:
            if p.harness is not None:  # a valid harness rejected here (duplicate, restriction): keep its text
                archive.put_harness(p.harness.sha, p.harness.text, p.harness.name, p.harness.parent)
            archive.add_candidate(
                run_id=run_id,
                leg_id=leg_id,
                harness_sha=p.sha,
                parent_sha=incumbent.sha,
                proposer=p.proposer,
                status="rejected",
                reason=reason,
                text=p.text,
            )
            outcomes.append(CandidateOutcome(p.sha, None, "rejected", reason))
            continue
        archive.put_harness(h.sha, h.text, h.name, h.parent)
        cand_ids[h.sha] = archive.add_candidate(
            run_id=run_id,
            leg_id=leg_id,
            harness_sha=h.sha,
            parent_sha=h.parent,
            proposer=p.proposer,
            status="proposed",
            reason=None,
        ).id
        valid[h.sha] = h
    say(f"{len(valid)} valid candidate(s), {len(outcomes)} rejected")

    if not valid:
        return HarnessLegResult(
            incumbent,
            incumbent,
            False,
            inc_score,
            None,
            None,
            outcomes,
            scorer.completions,
            "no valid candidate",
            proposer_usage=usage,  # the proposer's tokens and time were spent all the same
        )

    stopped: str | None = None

    def score_fn(sha: str, n: int) -> list[float]:
        nonlocal stopped
        if stopped:
            have = scorer.scores.get(sha, [])[:n]
            return have + [0.0] * (n - len(have))
        try:
            return scorer.score(valid[sha], n)
        except BudgetStop as stop:
            stopped = str(stop)
            have = scorer.scores.get(sha, [])[:n]
            return have + [0.0] * (n - len(have))

    def prefetch(alive: list[str], n: int) -> None:
        nonlocal stopped
        if stopped:
            return
        try:
            scorer.ensure([valid[sha] for sha in alive], n)
        except BudgetStop as stop:
            stopped = str(stop)

    halving = successive_halving(list(valid), score_fn, sizes, keep_fraction=cfg.keep_fraction, prefetch=prefetch)
    winner = valid[halving.winner]
    n_win = min(len(scorer.scores.get(winner.sha, [])), full)
    for sha, h in valid.items():
        n = len(scorer.scores.get(sha, []))
        if n:
            record(h, n)
    paired = (
        paired_test(inc_scores[:n_win], scorer.scores[winner.sha][:n_win], z=cfg.z, min_delta=cfg.min_delta)
        if n_win
        else None
    )
    accepted = bool(paired and paired.accept and not stopped)
    for sha, h in valid.items():
        sc = scorer.scores.get(sha, [])
        status: Literal["accepted", "lost"] = "accepted" if accepted and sha == winner.sha else "lost"
        reason = paired.reason if (sha == winner.sha and paired) else "eliminated in successive halving"
        if stopped and not sc:
            reason = stopped
        archive.set_candidate_status(cand_ids[sha], status, reason)
        outcomes.append(
            CandidateOutcome(
                sha, h.name, status, reason, sum(sc) / len(sc) if sc else None, len(sc), scorer.prompt_tokens(sha)
            )
        )
    outcomes.insert(
        0,
        CandidateOutcome(
            incumbent.sha, incumbent.name, "incumbent", None, inc_score, full, scorer.prompt_tokens(incumbent.sha)
        ),
    )
    win_scores = scorer.scores[winner.sha][:n_win]
    why = (paired.reason if paired else "winner has no scores") + (f"; {stopped}" if stopped else "")
    archive.add_decision(
        run_id=run_id,
        iteration=iteration,
        kind="accept" if accepted else "reject",
        reason=why,
        payload={"winner": winner.sha, "incumbent": incumbent.sha},
    )
    return HarnessLegResult(
        incumbent_in=incumbent,
        incumbent_out=winner if accepted else incumbent,
        accepted=accepted,
        incumbent_score=inc_score,
        winner_score=sum(win_scores) / len(win_scores) if win_scores else None,
        paired=paired,
        candidates=outcomes,
        completions=scorer.completions,
        reason=why,
        proposer_usage=usage,
    )


def _write_traces(path: Path, traces: Sequence[dict[str, Any]]) -> None:
    import json

    with path.open("w") as fh:
        for t in traces:
            fh.write(json.dumps(t) + "\n")
