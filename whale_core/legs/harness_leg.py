"""The harness leg: with the policy frozen, propose candidate harnesses, score them, keep the best only if it wins.

One leg (`HarnessLeg`, the `Leg` of this kind; its settings are a `HarnessLegOptions`; `run_harness_leg` is the same
leg called with keyword arguments):

1. Score the incumbent on the largest validation subset (reused from the archive when this policy already scored it).
2. Build the proposer's context: suite description, format reference, the incumbent, the archive's top harnesses
   *as scored under the current policy*, recent rejections with reasons, and failing traces of the incumbent.
3. Ask the proposer for ``candidates`` texts. Invalid ones (bad YAML, unsafe template, prompt-weights violation,
   duplicates) are recorded as rejected with the reason; a dead proposer (`ProposerUnavailable`) is recorded and the
   leg ends with the incumbent unchanged — it never crashes a run.
4. Successive halving over nested prefixes of one fixed validation ordering (so every comparison is paired). The
   harnesses the leg is asked to revisit (``LegStart.revisit``: under a new policy, the run's seed harness, its earlier
   incumbents and the archive's best, `whale_core.ascent`) join the proposals as candidates of the first round —
   a harness's score belongs to (harness, policy), so one that lost under earlier weights may win under these.
5. The round winner replaces the incumbent only if a paired test on the same problems says it is better by more
   than the noise (``z`` standard errors and ``min_delta``).
6. When the budget cuts the halving short, the leg judges what it did score: the top candidate of the deepest round
   whose candidates were all scored is tested against the incumbent on the problems it was scored on, at a stricter
   threshold (``z`` Bonferroni-corrected over that round's candidates, since it was picked among them on few
   problems). A clear winner is then kept instead of thrown away with the rounds the budget could not pay for; when
   not even the first round was scored, the leg ends with the incumbent.

Every proposal goes through one gate here, `check_candidate` (whatever the proposer checked itself). Every rollout
is charged to the budget (``harness`` kind) and recorded as an evaluation in the archive, with its traces on disk.
Scores are cached per (harness sha, policy id): promoting a candidate to a larger subset only rolls out the
problems it has not seen (`whale_core.legs.scoring`). Records go through the leg's `Recorder`: the archive
as the leg goes, the MLflow mirror of the leg in one call at its end.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

from whale_core.harness import Harness
from whale_core.legs.budget import Budget
from whale_core.legs.harness_config import SearchConfig, ServedConfig, make_proposer
from whale_core.legs.harness_context import proposal_context
from whale_core.legs.leg import LegKind, LegResult, LegStart
from whale_core.legs.scoring import BudgetStop, RollMany, ScoreBlock, Scorer, score_block, validation_order
from whale_core.legs.selection import PairedResult, paired_test, pareto_front, successive_halving
from whale_core.proposers.base import Proposal, ProposalContext, Proposer, ProposerUnavailable, check_candidate
from whale_core.proposers.spend import ProposerBudgetSpent, usage_line
from whale_core.records.archive import Archive
from whale_core.records.recorder import LoggedCandidate, Recorder
from whale_core.records.refs import HarnessRef
from whale_core.suites.base import Suite

__all__ = [
    "CandidateOutcome",
    "HarnessLeg",
    "HarnessLegOptions",
    "HarnessLegResult",
    "SearchConfig",
    "ServedConfig",
    "make_proposer",
    "run_harness_leg",
]


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

    def metrics(self) -> dict[str, float]:
        """The leg's own figures (logged on its MLflow run)."""
        return {
            "candidates": float(sum(c.status != "incumbent" for c in self.candidates)),
            "rejected": float(sum(c.status == "rejected" for c in self.candidates)),
            "winner_score": float(self.winner_score if self.winner_score is not None else -1.0),
            "incumbent_score": float(self.incumbent_score),
            **{f"proposer_{k}": float(v) for k, v in sorted(self.proposer_usage.items()) if self._asked},
        }

    @property
    def _asked(self) -> bool:
        """Whether an LLM proposer made requests (offline proposers spend nothing: no ``proposer_*`` metrics)."""
        return bool(self.proposer_usage.get("requests"))

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


@dataclass(frozen=True)
class HarnessLegOptions:
    """A harness leg's settings: the ``search:`` config, the run's seed, where its traces go, the rollout batch
    size, the fields a candidate may change (``{"instruction"}`` in prompt-weights mode; None: any), and the run's
    seed harness (``origin``: shown to the proposer, whose undo moves put fields back to it; None: the incumbent)."""

    search: SearchConfig
    seed: int
    traces_dir: Path
    batch_size: int = 64
    restrict_to: frozenset[str] | None = None
    origin: Harness | None = None


class HarnessLeg:
    """The harness leg as a `Leg` (see the module docstring). ``roll_many`` scores blocks of validation problems
    (default: in this process, with ``policy``); ``proposer`` defaults to the one ``options.search`` names."""

    kind: LegKind = "harness"

    def __init__(
        self,
        options: HarnessLegOptions,
        suite: Suite,
        recorder: Recorder,
        *,
        proposer: Proposer | None = None,
        roll_many: RollMany | None = None,
        policy: Any = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.options, self.suite, self.recorder = options, suite, recorder
        self.proposer = proposer or make_proposer(options.search, options.seed)
        self.roll_many, self.policy = roll_many, policy
        self.say = progress or (lambda _msg: None)
        self.result: HarnessLegResult | None = None  # the last `search`'s full result (its leaderboard)

    def run(self, start: LegStart) -> LegResult:
        """One leg from ``start``: ends with the incumbent, or the candidate that beat it (``accepted``)."""
        res = self.search(
            run_id=start.run_id,
            iteration=start.iteration,
            incumbent=start.harness.load(),
            policy_id=start.policy.checkpoint_id,
            budget=start.budget,
            leg_id=start.leg_id,
            as_of=start.as_of,
            revisit=[r.load() for r in start.revisit],
        )
        harness = HarnessRef.of(res.incumbent_out) if res.accepted else start.harness
        return LegResult("harness", start.policy, harness, res.completions, res.accepted, res.reason, res.metrics())

    def search(
        self,
        *,
        run_id: str,
        iteration: int,
        incumbent: Harness,
        policy_id: str,
        budget: Budget | None = None,
        leg_id: int | None = None,
        as_of: datetime | None = None,
        revisit: Sequence[Harness] = (),
    ) -> HarnessLegResult:
        """One leg with its full result (every candidate's outcome). Never raises for a bad candidate or a dead
        proposer. ``revisit``: harnesses scored as candidates besides the proposals. Ends with the leg's MLflow
        mirror (`Recorder.harness_leg`)."""
        if leg_id is not None:
            self.recorder.leg_id = leg_id
        attempt = _Attempt(self, run_id, iteration, incumbent, policy_id, budget, as_of, revisit)
        res = attempt.run()
        inc = HarnessRef(incumbent.sha, incumbent.text, incumbent.parent)
        inc_tokens = next((c.prompt_tokens for c in res.candidates if c.status == "incumbent"), None)
        self.recorder.harness_leg(
            iteration, inc, incumbent.name, res.incumbent_score, attempt.logged(res), res.metrics(), inc_tokens
        )
        self.result = res
        return res


class _Attempt:
    """One harness leg's working state: the scorer, the valid candidates, what the archive holds of them."""

    def __init__(
        self,
        leg: HarnessLeg,
        run_id: str,
        iteration: int,
        incumbent: Harness,
        policy_id: str,
        budget: Budget | None,
        as_of: datetime | None,
        revisit: Sequence[Harness],
    ) -> None:
        self.leg, self.opts, self.suite = leg, leg.options, leg.suite
        self.cfg = self.opts.search
        self.rec = leg.recorder
        self.archive = leg.recorder.archive  # reads
        self.run_id, self.iteration, self.incumbent, self.pid = run_id, iteration, incumbent, policy_id
        self.as_of, self.revisit = as_of, list(revisit)
        self.problems = validation_order(self.suite, self.opts.seed)
        self.sizes = [n for n in self.cfg.rounds if n <= len(self.problems)] or [len(self.problems)]
        self.full = self.sizes[-1]
        self.scorer = Scorer(leg.roll_many or self._local_roll_many, len(self.problems), budget)
        self.valid: dict[str, Harness] = {}
        self.cand_ids: dict[str, int] = {}
        self.outcomes: list[CandidateOutcome] = []
        self.usage: dict[str, float] = {}
        # the leg's proposals in proposal order, as the archive holds them: [harness_sha, text, parent, status, reason]
        self.rows: list[list[Any]] = []
        self.stopped: str | None = None
        self.cut: tuple[int, int] | None = None  # on a budget-cut leg: (deepest fully scored round, its candidates)

    def _local_roll_many(self, jobs: list[tuple[Harness, int, int]]) -> list[ScoreBlock]:
        pol, seed, batch = self.leg.policy, self.opts.seed, self.opts.batch_size
        return [score_block(pol, h, self.suite, self.problems[i:j], batch_size=batch, seed=seed) for h, i, j in jobs]

    def _result(self, reason: str, inc_score: float, *, usage: bool = True) -> HarnessLegResult:
        """A leg that ends with the incumbent before any paired test."""
        inc = self.incumbent
        return HarnessLegResult(
            inc, inc, False, inc_score, None, None, self.outcomes, self.scorer.completions, reason,
            proposer_usage=self.usage if usage else {},
        )  # fmt: skip

    def run(self) -> HarnessLegResult:
        inc = self.incumbent
        self.opts.traces_dir.mkdir(parents=True, exist_ok=True)
        self.rec.harness(inc)
        try:
            inc_scores = self.scorer.score(inc, self.full)
        except BudgetStop as stop:
            return HarnessLegResult(inc, inc, False, float("nan"), None, None, [], 0, str(stop))
        self._record(inc, self.full)
        inc_score = sum(inc_scores) / len(inc_scores)
        self.leg.say(f"incumbent {inc.name} ({inc.sha[:8]}): {inc_score:.3f} on {self.full} val problems")
        try:
            proposals = self.leg.proposer.propose(self._context(inc_score), self.cfg.candidates)
        except ProposerUnavailable as exc:  # the run's proposer budget spent, or the proposer down
            kind = "proposer-budget-spent" if isinstance(exc, ProposerBudgetSpent) else "proposer-unavailable"
            self.leg.recorder.decide(self.iteration, kind, str(exc), {})
            return self._result(f"{kind.replace('-', ' ')}: {exc}", inc_score, usage=False)
        self._add_revisits()
        self._screen(proposals)
        spent = f"; proposer: {usage_line(self.usage)}" if self.usage.get("requests") else ""
        self.leg.say(f"{len(self.valid)} valid candidate(s), {len(self.outcomes)} rejected{spent}")
        if not self.valid:  # the proposer's tokens and time were spent all the same
            return self._result("no valid candidate", inc_score)
        winner = self._halve()
        return self._judge(winner, inc_scores, inc_score)

    def _record(self, h: Harness, n: int) -> None:
        """Store ``h``'s evaluation on the first ``n`` validation problems (and its traces)."""
        sc = self.scorer
        scores = sc.scores[h.sha][:n]
        path = self.opts.traces_dir / f"{h.sha[:12]}-{self.pid[:16]}-val{n}.jsonl"
        _write_traces(path, sc.traces[h.sha][:n])
        self.rec.evaluation(
            harness_sha=h.sha,
            checkpoint_id=self.pid,
            split="val",
            subset=f"first{n}@seed{self.opts.seed}",
            score=sum(scores) / len(scores),
            n=n,
            completions=n * h.spec.inference.samples,
            prompt_tokens=int(sum(sc.tokens[h.sha][:n])),
            completion_tokens=int(sum(t.get("completion_tokens", 0) for t in sc.traces[h.sha][:n])),
            traces_path=str(path),
        )

    def _context(self, inc_score: float) -> ProposalContext:
        inc, sc = self.incumbent, self.scorer
        return proposal_context(
            self.suite, inc, inc_score, self.full, sc.prompt_tokens(inc.sha), sc.traces[inc.sha], self.archive,
            self.run_id, self.pid, self.cfg, self.opts.restrict_to, self.opts.seed, self.iteration, self.as_of,
            origin=self.opts.origin,
        )  # fmt: skip

    def _add_revisits(self) -> None:
        """The harnesses to revisit under this policy, as candidates (proposer ``revisit``), before the proposals:
        a proposal identical to one of them is then a duplicate."""
        for h in self.revisit:
            if h.sha == self.incumbent.sha or h.sha in self.valid:
                continue
            self.rec.harness(h)
            self.cand_ids[h.sha] = self.rec.candidate(h.sha, h.parent, "revisit", "proposed", None)
            self.rows.append([h.sha, h.text, h.parent, "proposed", ""])
            self.valid[h.sha] = h

    def _screen(self, proposals: Sequence[Proposal]) -> None:
        """The one gate: every proposal's text goes through `check_candidate` (parse, validate, a change, the mode's
        restriction). Invalid ones, duplicates and restriction violations are recorded as rejected (with the reason),
        the rest as proposed; the latter become ``valid``."""
        inc, restrict = self.incumbent, self.opts.restrict_to
        for p in proposals:
            for key, value in p.usage.items():
                self.usage[key] = self.usage.get(key, 0.0) + float(value)
            checked = p
            if p.status == "valid" and p.text:
                parent = p.parent or (p.harness.parent if p.harness is not None else None)
                checked = check_candidate(p.text, inc, restrict, p.proposer, parent=parent)
            h, reason = checked.harness, checked.reason
            if h is not None and h.sha in self.valid:
                reason, h = "duplicate of another candidate or the incumbent", None
            if checked.status != "valid" or h is None:
                # a harness this gate rejected (a duplicate, the restriction) keeps its sha and canonical text; a
                # proposal its proposer rejected keeps its raw text only
                kept = checked.harness or (_parsed(p) if p.status == "valid" else None)
                if kept is not None:
                    self.rec.harness(kept)
                sha = kept.sha if kept is not None else None
                text = kept.text if kept is not None else checked.text
                self.rec.candidate(sha, inc.sha, p.proposer, "rejected", reason, text=text)
                self.rows.append([sha, text, inc.sha, "rejected", reason or ""])
                self.outcomes.append(CandidateOutcome(sha, None, "rejected", reason))
                continue
            self.rec.harness(h)
            self.cand_ids[h.sha] = self.rec.candidate(h.sha, h.parent, p.proposer, "proposed", None)
            self.rows.append([h.sha, h.text, h.parent, "proposed", ""])
            self.valid[h.sha] = h

    def _pad(self, sha: str, n: int) -> list[float]:
        have = self.scorer.scores.get(sha, [])[:n]
        return have + [0.0] * (n - len(have))

    def _halve(self) -> Harness:
        """Successive halving over the valid candidates; a spent budget ends the scoring (``stopped``) and the rest
        count as zeros. Stores every candidate's evaluation; returns the round winner."""

        def score_fn(sha: str, n: int) -> list[float]:
            if self.stopped:
                return self._pad(sha, n)
            try:
                return self.scorer.score(self.valid[sha], n)
            except BudgetStop as stop:
                self.stopped = str(stop)
                return self._pad(sha, n)

        def prefetch(alive: list[str], n: int) -> None:
            if self.stopped:
                return
            try:
                self.scorer.ensure([self.valid[sha] for sha in alive], n)
            except BudgetStop as stop:
                self.stopped = str(stop)

        halving = successive_halving(
            list(self.valid), score_fn, self.sizes, keep_fraction=self.cfg.keep_fraction, prefetch=prefetch
        )
        for sha, h in self.valid.items():
            n = len(self.scorer.scores.get(sha, []))
            if n:
                self._record(h, n)
        if self.stopped:  # the padded zeros of the unpaid rounds must not pick the winner
            for rnd in reversed(halving.rounds):
                if all(len(self.scorer.scores.get(c, [])) >= rnd.size for c in rnd.ranking):
                    self.cut = (rnd.index, len(rnd.ranking))
                    return self.valid[rnd.ranking[0]]
        return self.valid[halving.winner]

    def _cut_z(self, k: int) -> float:
        """``z`` for a winner picked among ``k`` candidates: the one-sided level ``1 - Phi(z)`` divided by ``k``."""
        if k <= 1:
            return self.cfg.z
        alpha = (1.0 - NormalDist().cdf(self.cfg.z)) / k
        return max(self.cfg.z, NormalDist().inv_cdf(1.0 - alpha))

    def _judge(self, winner: Harness, inc_scores: list[float], inc_score: float) -> HarnessLegResult:
        """The paired test of the winner against the incumbent; every candidate's final status; the decision."""
        inc, sc, stopped = self.incumbent, self.scorer, self.stopped
        n_win = min(len(sc.scores.get(winner.sha, [])), self.full)
        z = self._cut_z(self.cut[1]) if stopped and self.cut else self.cfg.z
        paired = (
            paired_test(inc_scores[:n_win], sc.scores[winner.sha][:n_win], z=round(z, 3), min_delta=self.cfg.min_delta)
            if n_win
            else None
        )
        accepted = bool(paired and paired.accept and (not stopped or self.cut))
        if stopped and self.cut:  # say how the cut leg was judged
            r, k = self.cut
            stopped += f"; judged on halving round {r + 1} ({k} candidates, z Bonferroni-corrected to {z:.2f})"
        final: dict[str, tuple[str, str]] = {}
        for sha, h in self.valid.items():
            scores = sc.scores.get(sha, [])
            status: Literal["accepted", "lost"] = "accepted" if accepted and sha == winner.sha else "lost"
            reason = paired.reason if (sha == winner.sha and paired) else "eliminated in successive halving"
            if stopped and not scores:
                reason = stopped
            elif sha == winner.sha and paired and paired.accept and not accepted:
                reason = f"not judged, the budget cut the first round: {stopped}"
            self.rec.candidate_status(self.cand_ids[sha], status, reason)
            final[sha] = (status, reason)
            mean = sum(scores) / len(scores) if scores else None
            self.outcomes.append(
                CandidateOutcome(sha, h.name, status, reason, mean, len(scores), sc.prompt_tokens(sha))
            )
        for row in self.rows:
            if row[3] == "proposed":
                row[3], row[4] = final[row[0]]
        self.outcomes.insert(
            0, CandidateOutcome(inc.sha, inc.name, "incumbent", None, inc_score, self.full, sc.prompt_tokens(inc.sha))
        )
        win_scores = sc.scores.get(winner.sha, [])[:n_win]  # none when the budget ran out before its turn
        why = (paired.reason if paired else "winner has no scores") + (f"; {stopped}" if stopped else "")
        self.leg.recorder.decide(
            self.iteration, "accept" if accepted else "reject", why, {"winner": winner.sha, "incumbent": inc.sha}
        )
        return HarnessLegResult(
            incumbent_in=inc,
            incumbent_out=winner if accepted else inc,
            accepted=accepted,
            incumbent_score=inc_score,
            winner_score=sum(win_scores) / len(win_scores) if win_scores else None,
            paired=paired,
            candidates=self.outcomes,
            completions=sc.completions,
            reason=why,
            proposer_usage=self.usage,
        )

    def logged(self, res: HarnessLegResult) -> list[LoggedCandidate]:
        """The leg's proposals as its MLflow mirror records them: proposal order, final status, the score its
        outcome reports (by sha; the last outcome of a sha wins) with its mean prompt tokens, proposals without any text
        left out."""
        scores = {c.sha: c.score for c in res.candidates if c.sha}
        tokens = {c.sha: c.prompt_tokens for c in res.candidates if c.sha}
        out: list[LoggedCandidate] = []
        for harness_sha, text, parent, status, reason in self.rows:
            if not text:
                continue
            sha = harness_sha or hashlib.sha256(text.encode()).hexdigest()
            out.append(LoggedCandidate(sha, text, parent, status, scores.get(sha), reason, tokens.get(sha)))
        return out


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
    """`HarnessLeg` in one call with keyword arguments, its records in ``archive`` (no MLflow mirror)."""
    options = HarnessLegOptions(cfg, seed, traces_dir, batch_size, restrict_to)
    leg = HarnessLeg(
        options, suite, Recorder(archive, run_id=run_id), proposer=proposer, roll_many=roll_many, policy=policy,
        progress=progress,
    )  # fmt: skip
    pid = policy_id or str(policy.policy_id)
    return leg.search(
        run_id=run_id, iteration=iteration, incumbent=incumbent, policy_id=pid, budget=budget, leg_id=leg_id,
        as_of=as_of,
    )  # fmt: skip


def _parsed(p: Proposal) -> Harness | None:
    """The harness a proposal's text parses into (whatever the gate's verdict), or None."""
    if p.harness is not None:
        return p.harness
    try:
        return Harness.from_text(p.text, parent=p.parent) if p.text else None
    except Exception:  # not a harness: nothing to keep but the raw text
        return None


def _write_traces(path: Path, traces: Sequence[dict[str, Any]]) -> None:
    with path.open("w") as fh:
        for t in traces:
            fh.write(json.dumps(t) + "\n")
