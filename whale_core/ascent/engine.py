"""Block ascent: the algorithm of a WHALE run, in one place.

    initial val ─► [ decide ─► leg.run ─► val of the leg's pair ─► record ] × N ─► closing revisit ─► best pair

`BlockAscent` owns the loop. It depends on no orchestrator: the calls that must be cached and retried reach it
through `whale_core.ascent.calls.Calls` (Prefect tasks in ``flows/``, plain calls in `whale_core.ascent.local`), and
every record goes through one `whale_core.records.recorder.Recorder`. The rules, each written once:

- **Next leg or stop**: `whale_core.ascent.decider.Decider` (the scheduler, then the stop conditions: iteration cap,
  budget spent, no progress per leg kind; a leg the budget cannot pay for becomes the other kind). Each stop is a
  ``stop`` decision with its reason; each leg a ``switch``/``continue`` decision.
- **A leg's seeds**: the weights leg trains with `whale_core.seeds.weights_leg_seed` of the run seed and the
  iteration; the harness leg's proposer is seeded with `whale_core.seeds.proposer_seed`.
- **The evaluation after each leg**: the val score of the pair the leg ends with, on the run's first
  ``rollout.val_problems`` val problems (the same problems every time, so every two scores are paired), charged to the
  leg's kind; a leg that changed nothing keeps its start's score.
- **A regressed weights leg**: its pair loses to the pair it started from on val by more than the noise (the paired
  test, ``search.z``): recorded as a ``regressed`` decision.
- **What the next leg starts from**: ``schedule.continue_from`` — ``last`` (the pair the previous leg ended with)
  or ``best`` (the best pair visited so far). See docs/results.md for the measurement behind the default.
- **Revisit under new weights**: a harness's score belongs to (harness, policy). A harness leg re-scores, as
  candidates of its first halving round, the run's seed harness, its earlier incumbents and the archive's
  ``search.revisit_top`` best harnesses — those not yet scored under the leg's policy (so: after a weights leg).
- **Closing revisit and best pair**: when the run ends with weights no harness leg has searched under, the same
  harnesses are evaluated with them on val (``eval`` budget: like the final test, it steers no search); the run's
  result is the best pair by val score it visited (ties: the later), never simply the last.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from whale_core import progress, seeds
from whale_core.ascent.calls import Calls, Evaluation, ProposedText, Site, TrainJob
from whale_core.ascent.decider import AscentView, BudgetSpent, Decider, IterationCap, Next, NoProgress, Stop
from whale_core.legs.budget import Budget
from whale_core.legs.costs import min_completions, reserve_after
from whale_core.legs.harness_leg import HarnessLeg, HarnessLegOptions, HarnessLegResult
from whale_core.legs.leg import Leg, LegKind, LegResult, LegStart
from whale_core.legs.population import population_harnesses, probe_of
from whale_core.legs.schedule import LegOutcome, mode_legs, mode_restriction
from whale_core.legs.scoring import ScoreBlock
from whale_core.legs.selection import paired_test
from whale_core.legs.weights_leg import WeightsLeg
from whale_core.proposers.base import Proposal, ProposalContext
from whale_core.records.portable import to_home
from whale_core.records.refs import HarnessRef, PolicyRef

if TYPE_CHECKING:
    from whale_core.config import WhaleConfig
    from whale_core.harness import Harness
    from whale_core.records.archive import LegRecord
    from whale_core.records.recorder import Recorder
    from whale_core.suites.base import Suite


@dataclass(frozen=True)
class Pair:
    """A (policy, harness) pair with its val score and per-problem val scores; ``after``: the iteration whose leg
    it came out of (-1: the initial pair; the last iteration + 1: the closing revisit)."""

    policy: PolicyRef
    harness: HarnessRef
    metric: float
    scores: tuple[float, ...] = ()
    after: int = -1

    def same(self, other: Pair) -> bool:
        return (self.policy, self.harness) == (other.policy, other.harness)


@dataclass
class AscentResult:
    """What a block ascent reached: the initial, best and last pairs, every pair it evaluated on val (in order),
    the finished legs, the budget, and the full result of each harness leg (its leaderboard)."""

    initial: Pair
    best: Pair
    last: Pair
    visited: list[Pair]
    history: list[LegOutcome]
    budget: Budget
    harness_legs: list[HarnessLegResult] = field(default_factory=list)
    stop: str | None = None


def best_pair(visited: Sequence[Pair]) -> Pair:
    """The best pair by val score; ties go to the later one."""
    best = visited[0]
    for p in visited[1:]:
        if p.metric >= best.metric:
            best = p
    return best


class _CallsProposer:
    """The harness leg's `Proposer`: `Calls.propose`, its texts handed to the leg's one validity gate."""

    def __init__(self, calls: Calls, name: str, seed: int, site: Site) -> None:
        self.calls, self.name, self.seed, self.site = calls, name, seed, site

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        out = self.calls.propose(context, k, self.seed, self.site)
        return [_proposal(t) for t in out]


def _proposal(t: ProposedText) -> Proposal:
    status: Literal["valid", "rejected"] = "valid" if t.status == "valid" else "rejected"
    return Proposal(t.text, None, status, t.reason, t.proposer, usage=dict(t.usage), parent=t.parent)


class BlockAscent:
    """One run's block ascent (see the module docstring). ``base``: the untrained policy; ``seed_harness``: the
    harness the run starts from; ``rerun_from``/``generation``: the iteration ``whale rerun`` recomputes and its
    generation (its calls refresh; the others come back as stored)."""

    def __init__(
        self,
        cfg: WhaleConfig,
        calls: Calls,
        recorder: Recorder,
        *,
        suite: Suite,
        run_dir: Path,
        base: PolicyRef,
        seed_harness: HarnessRef,
        rerun_from: int | None = None,
        generation: int = 0,
    ) -> None:
        self.cfg, self.calls, self.rec, self.suite = cfg, calls, recorder, suite
        self.run_id, self.run_dir, self.base, self.seed_harness = recorder.run_id, run_dir, base, seed_harness
        self.rerun_from, self.generation = rerun_from, generation
        self.budget = Budget.from_config(cfg.budget)
        self.history: list[LegOutcome] = []
        self.visited: list[Pair] = []
        self.harness_results: list[HarnessLegResult] = []
        self.incumbents: list[HarnessRef] = []  # every harness the run has held as incumbent, oldest first
        kinds = mode_legs(cfg.mode)
        self.decider = Decider(
            cfg.mode,
            [
                IterationCap(cfg.max_legs),
                BudgetSpent(kinds, self.runnable),
                NoProgress(kinds, cfg.schedule.stop_patience, cfg.schedule.min_delta),
            ],
            self._schedule,
            self.runnable,
        )
        self.last: Pair | None = None  # the pair the last leg ended with

    # ------------------------------------------------------------------------------------------------ the run
    def runnable(self, kind: LegKind, budget: Budget) -> bool:
        """Whether a leg of ``kind`` can do anything with what ``budget`` has left (`min_completions`)."""
        return budget.remaining(kind) >= min_completions(self.cfg, kind)

    def run(self) -> AscentResult:
        """The whole ascent: the initial evaluation, legs until a stop, the closing revisit; the best pair."""
        state = self._initial()
        stop: str | None = None
        for i in range(self.cfg.max_legs + 1):
            nxt = self.decider.next(AscentView(self.history, self.budget, i, self.visited[0].metric))
            if isinstance(nxt, Stop):
                self.rec.decide(i, "stop", nxt.reason, {"budget": self.budget.to_dict()})
                stop = nxt.reason
                break
            state = self._leg(i, nxt, state)
        self._closing_revisit(len(self.history))
        return self._result(stop)

    def one_leg(self, kind: LegKind, *, measure: bool = True) -> AscentResult:
        """A single leg of ``kind`` from the seed pair (``whale search``, ``whale train``). ``measure``: evaluate
        the pair on val before and after (off: the leg's own scoring is all there is)."""
        state = self._initial() if measure else self._unmeasured()
        if not measure:
            self.visited.append(state)
        self._leg(0, Next(kind, f"one {kind} leg", False), state, measure=measure)
        return self._result(None)

    def _initial(self) -> Pair:
        self.rec.harness(self.seed_harness.load())  # every harness a checkpoint names is in the archive
        ev = self._val(self.base, self.seed_harness, Site("rollout-init"), "eval")
        self.rec.run_start(ev.score, ev.completions)
        pair = Pair(self.base, self.seed_harness, ev.score, ev.scores, -1)
        self.visited.append(pair)
        self.incumbents.append(self.seed_harness)
        return pair

    def _unmeasured(self) -> Pair:
        self.rec.harness(self.seed_harness.load())
        self.incumbents.append(self.seed_harness)
        return Pair(self.base, self.seed_harness, math.nan, (), -1)

    def _result(self, stop: str | None) -> AscentResult:
        return AscentResult(
            self.visited[0], best_pair(self.visited), self.last or self.visited[0], list(self.visited),
            list(self.history), self.budget, self.harness_results, stop,
        )  # fmt: skip

    def _schedule(self, history: Sequence[LegOutcome]) -> Any:
        i = len(history)
        return self.calls.schedule(history, Site(f"plateau-check-iter{i}", i, self.rerun_from == i))

    def _val(self, policy: PolicyRef, harness: HarnessRef, site: Site, kind: str) -> Evaluation:
        """The pair on the run's val problems; its completions charged to ``kind`` (what is left of it)."""
        ev = self.calls.rollout(policy, harness, "val", self.cfg.rollout.val_problems, site)
        self.budget.charge_up_to(kind, ev.completions)
        return ev

    # ------------------------------------------------------------------------------------------------ one leg
    def _leg(self, i: int, nxt: Next, start: Pair, *, measure: bool = True) -> Pair:
        """Iteration ``i`` as the orchestrator's unit (`Calls.iteration`); returns the pair the next leg starts from."""
        return self.calls.iteration(i, nxt.leg, lambda: self._iteration(i, nxt, start, measure))

    def _iteration(self, i: int, nxt: Next, start: Pair, measure: bool) -> Pair:
        kind, refresh = nxt.leg, self.rerun_from == i
        generation = self.generation if refresh else 0
        done = None if refresh else self._done_leg(i, kind, start)
        rec = self.rec.for_leg(replay=done is not None)
        as_of = rec.close_attempts(i, kind, refresh=refresh, generation=generation)
        rec.decide(i, "switch" if nxt.switched else "continue", nxt.reason, {"leg": kind})
        row = rec.start_leg(
            i, kind, harness_in=start.harness.sha, checkpoint_in=start.policy.checkpoint_id, done=done,
            link=self.calls.link(),
        )  # fmt: skip
        as_of = as_of or row.started
        spent_before, t0 = self.budget.spent, time.monotonic()
        leg_start = LegStart(
            self.run_id, i, start.policy, start.harness, start.metric, self.budget, row.id, as_of,
            revisit=self._revisit(start, as_of) if kind == "harness" else (),
        )  # fmt: skip
        try:
            leg = self._make_leg(i, kind, start, rec, refresh, generation, as_of, len(leg_start.revisit))
            res = leg.run(leg_start)
            if isinstance(leg, HarnessLeg) and leg.result is not None:
                self.harness_results.append(leg.result)
            after = self._after(i, start, res, refresh) if measure else Pair(res.policy, res.harness, math.nan)
        except Exception as exc:
            rec.leg_failed(f"{type(exc).__name__}: {exc}", self.budget.spent - spent_before)
            raise
        used = self.budget.spent - spent_before
        metrics = {"val_score": after.metric, "val_score_before": start.metric, "budget_used": float(used)}
        if kind == "harness":  # a weights leg accepts nothing: no metric rather than a -1
            metrics["accepted"] = float(bool(res.accepted))
            # the proposer's spend, kept with the leg: the run's proposer budget and the report read it back
            metrics |= {k: float(v) for k, v in res.metrics.items() if k.startswith("proposer_")}
        if kind == "weights" and measure:
            self._regression(rec, i, start, after)
        rec.leg_done(
            row.id, i, budget_used=used, harness_sha=res.harness.sha, checkpoint_id=res.policy.checkpoint_id,
            metrics=metrics, rollouts=self.budget.spent,
        )  # fmt: skip
        self.calls.leg_done(i, kind, row.id, start.policy.checkpoint_id)
        progress.leg_result(
            i, kind, start.metric, after.metric, time.monotonic() - t0,
            accepted=res.harness.sha[:12] if res.accepted else None,
            candidates=int(res.metrics["candidates"]) if "candidates" in res.metrics else None,
        )  # fmt: skip
        accepted = res.accepted if kind == "harness" else None
        self.history.append(LegOutcome(i, kind, after.metric, accepted, start.metric))
        if not after.same(start):
            self.visited.append(after)
        self.last = after
        if res.harness.sha not in {h.sha for h in self.incumbents}:
            self.incumbents.append(res.harness)
        return best_pair(self.visited) if self.cfg.schedule.continue_from == "best" else after

    def _after(self, i: int, start: Pair, res: LegResult, refresh: bool) -> Pair:
        """The pair the leg ends with, evaluated on val (its start's score when the leg changed nothing)."""
        pair = Pair(res.policy, res.harness, start.metric, start.scores, i)
        if pair.same(start):
            return Pair(start.policy, start.harness, start.metric, start.scores, start.after)
        ev = self._val(res.policy, res.harness, Site(f"rollout-val-iter{i}", i, refresh), res.kind)
        return Pair(res.policy, res.harness, ev.score, ev.scores, i)

    def _regression(self, rec: Recorder, i: int, start: Pair, after: Pair) -> None:
        """Record a weights leg whose pair lost on val by more than the noise (paired test at ``search.z``)."""
        if not start.scores or len(start.scores) != len(after.scores):
            return
        lost = paired_test(after.scores, start.scores, z=self.cfg.search.z)
        if lost.accept:
            why = (
                f"weights leg lost on val: {after.metric:.4f} after vs {start.metric:.4f} before "
                f"(delta {-lost.delta:+.4f}, z {lost.z_score:.2f} > {self.cfg.search.z}, n {lost.n})"
            )
            rec.decide(i, "regressed", why, {"checkpoint": after.policy.checkpoint_id})

    def _done_leg(self, i: int, kind: str, start: Pair) -> LegRecord | None:
        """This iteration's leg as the archive holds it done with the same inputs (a resumed run replays it)."""
        for leg in self.rec.store.legs(self.run_id):
            if (leg.iteration, leg.kind, leg.status) == (i, kind, "done") and (
                leg.incumbent_harness_in == start.harness.sha and leg.checkpoint_in == start.policy.checkpoint_id
            ):
                return leg
        return None

    # ------------------------------------------------------------------------------------------------ the legs
    def _make_leg(
        self, i: int, kind: LegKind, start: Pair, rec: Recorder, refresh: bool, generation: int, as_of: datetime,
        revisits: int,
    ) -> Leg:  # fmt: skip
        if kind == "weights":
            return self._weights_leg(i, start, rec, refresh, generation, as_of)
        return self._harness_leg(i, start, rec, refresh, revisits)

    def _weights_leg(
        self, i: int, start: Pair, rec: Recorder, refresh: bool, generation: int, as_of: datetime
    ) -> WeightsLeg:
        cfg = self.cfg
        weights = cfg.weights.model_copy(update={"seed": seeds.weights_leg_seed(cfg.seed, i)})
        population = tuple(self._population(start.harness, as_of))
        out_dir = self.run_dir / f"iter-{i:02d}-weights" / f"gen-{generation}"
        site = Site(f"grpo-update-iter{i}", i, refresh)

        def train(policy: PolicyRef, harness: HarnessRef, cap: int) -> Any:
            job = TrainJob(self.base, policy, harness, weights, cap, to_home(out_dir), generation, population)
            return self.calls.train(job, site)

        return WeightsLeg(
            self.base, self.suite, weights, out_dir, population=population, reserve=reserve_after(cfg),
            recorder=rec, train=train,
        )  # fmt: skip

    def _population(self, incumbent: HarnessRef, as_of: datetime) -> list[HarnessRef]:
        """The mitigation's extra harnesses for a weights leg (``weights.population``; empty when off), from the
        run's evaluations before ``as_of``."""
        pop = self.cfg.weights.population
        if pop.k <= 0:
            return []
        probe = probe_of(self.suite, "train", 16, self.cfg.seed)
        members = population_harnesses(
            self.rec.store, self.run_id, incumbent.load(), pop.k, as_of=as_of, probe=probe,
            min_score_ratio=pop.min_score_ratio,
        )  # fmt: skip
        return [HarnessRef.of(m) for m in members[1:]]

    def _harness_leg(self, i: int, start: Pair, rec: Recorder, refresh: bool, revisits: int) -> HarnessLeg:
        cfg = self.cfg
        totals: dict[str, list[float]] = {}  # per harness: [sum of scores, problems scored] for the progress line
        n_total = cfg.search.candidates + 1 + revisits  # the proposals, the incumbent, the revisited harnesses

        def roll_many(jobs: list[tuple[Harness, int, int]]) -> list[ScoreBlock]:
            blocks = self.calls.score(start.policy, jobs, Site(f"score-harness-iter{i}", i, refresh))
            for (h, _a, _b), block in zip(jobs, blocks, strict=True):
                t = totals.setdefault(h.sha, [0.0, 0.0])
                t[0], t[1] = t[0] + sum(block.scores), t[1] + len(block.scores)
                best = max((a / n for a, n in totals.values() if n), default=None)
                progress.candidate_scored(i, len(totals), max(n_total, len(totals)), best)
            return blocks

        options = HarnessLegOptions(
            cfg.search, cfg.seed, self.run_dir / "traces", cfg.rollout.batch_size, mode_restriction(cfg.mode),
            origin=self.seed_harness.load(),
        )  # fmt: skip
        proposer = _CallsProposer(
            self.calls, cfg.search.proposer, seeds.proposer_seed(cfg.seed, i),
            Site(f"propose-harness-iter{i}", i, refresh),
        )  # fmt: skip
        return HarnessLeg(options, self.suite, rec, proposer=proposer, roll_many=roll_many)

    # ------------------------------------------------------------------------------------------------ revisits
    def _revisit_set(self, policy: PolicyRef, exclude: str, as_of: datetime | None) -> list[HarnessRef]:
        """The seed harness, the earlier incumbents (latest first) and the archive's ``search.revisit_top`` best
        harnesses by val score, less ``exclude`` and those already scored under ``policy`` (before ``as_of``)."""
        store = self.rec.store
        scored = set(store.best_evaluations(self.run_id, checkpoint_id=policy.checkpoint_id, as_of=as_of))
        scored |= {p.harness.sha for p in self.visited if p.policy == policy}
        out: dict[str, HarnessRef] = {}
        for h in [self.seed_harness, *reversed(self.incumbents)]:
            if h.sha != exclude and h.sha not in scored:
                out.setdefault(h.sha, h)
        top = self.cfg.search.revisit_top
        if top:
            best = store.best_evaluations(self.run_id, as_of=as_of)
            ranked = sorted(best.values(), key=lambda ev: (-ev.score, ev.harness_sha))
            for ev in ranked:
                if top <= 0:
                    break
                sha = ev.harness_sha
                if sha == exclude or sha in scored or sha in out:
                    continue
                rec = store.find_harness(sha)
                if rec is not None:
                    out[sha] = HarnessRef(sha, rec.text, rec.parent_sha)
                    top -= 1
        return list(out.values())

    def _revisit(self, start: Pair, as_of: datetime | None) -> tuple[HarnessRef, ...]:
        return tuple(self._revisit_set(start.policy, start.harness.sha, as_of))

    def _closing_revisit(self, i: int) -> None:
        """After the last leg: when its policy was trained after the last harness leg (no harness leg searched
        under it), evaluate the revisit set with it on val (``eval`` budget) so the best pair can be one of them."""
        last = self.last
        if last is None:
            return
        searched = any(o.leg == "harness" and o.iteration > self._trained_at(last.policy) for o in self.history)
        if searched or last.policy == self.base:
            return
        for h in self._revisit_set(last.policy, last.harness.sha, None):
            ev = self._val(last.policy, h, Site(f"rollout-revisit-{h.sha[:12]}", i), "eval")
            self.visited.append(Pair(last.policy, h, ev.score, ev.scores, i))

    def _trained_at(self, policy: PolicyRef) -> int:
        """The iteration whose weights leg produced ``policy`` (-1: the base)."""
        for p in self.visited:
            if p.policy == policy:
                return p.after
        return -1
