"""The `tpe` proposer: Optuna's TPE sampler over the structural space, told every harness the archive has scored.

`mutate` draws edits at random; this proposer *learns where scores were high*. It sees a harness as a point in a
small categorical space (`SPACE`), one dimension per group of fields, so that a point and a harness map to each
other one to one (given the run's seed harness, ``context.origin``):

- ``framing``: the seed's own template (``keep``) or one of `structure.FRAMINGS` around the seed's core (QA,
  bare QA, "Q:/A:", plain text to continue); chat harnesses keep their messages;
- ``stop``: one stop string (newline, blank line, ",", ";", " ", ".") or none;
- ``pick``: which part of the completion is the answer: the seed's own parse (``keep``) or one of
  `structure.pick_options` (first/last/new number, after a cue, first line, first word);
- ``k``: few-shot demos, 0-4; ``prefix``: none or one of `structure.PREFIXES` and the step-by-step prefix;
- ``tokens``: ``max_new_tokens`` 8, 16, 32 or 128.

Each ``propose`` rebuilds an in-memory Optuna study from ``context.archive`` — every entry that maps back to a point
(`describe`) and has a score under the current policy is a finished trial with that score — and asks the sampler
for ``k`` new points; a resumed run therefore proposes exactly what an uninterrupted one would (the archive is the
sampler's memory; nothing is pickled). The sampler's seed is derived from (``seed``, ``context.seed``,
``context.iteration``, the incumbent's and the archive's shas), so a run is deterministic. Until ``n_startup``
scored points exist the proposer is in its startup phase: coverage first (`structure.bundles`, the seed's framings
as coherent bundles and the seed with demos, those not yet scored, at most half of ``k``), then the sampler's
random startup draws.

Limits, measured and stated: within one harness leg the sampler learns nothing between its ``k`` candidates (the
leg asks once, then scores); TPE's ``constant_liar`` spreads them. Its advantage, if any, is across legs — a
`whale run` with several harness legs, or a resumed search — not inside one `whale search`. In prompt-weights
mode (only the instruction may change) the space is empty and it proposes nothing. Other fields (instruction,
answer encoding, temperature, samples) stay as the seed has them.
"""

from __future__ import annotations

import copy
import hashlib
import time
import warnings
from typing import Any

import yaml

from whale_core.harness import Harness, HarnessError
from whale_core.proposers.base import Proposal, ProposalContext, check_candidate, empty_usage
from whale_core.proposers.structure import (
    PREFIXES,
    REASON_PREFIX,
    _set_pick,
    bundles,
    frame,
    pick_options,
    template_core,
)

__all__ = ["SPACE", "TPEProposer", "build", "describe"]

Spec = dict[str, Any]
Point = dict[str, str]

_PICKS: dict[str, list[dict[str, Any]]] = {
    "first": [{"number": "first"}],
    "last": [{"number": "last"}],
    "new": [{"number": "new"}],
    "after-answer-is": [{"after": "answer is"}, {"number": "first"}],
    "after-equals": [{"after": "="}, {"number": "first"}],
    "first-line": [{"first_line": True}],
    "first-word": [{"regex": r"^\s*(\S+)"}],
}
assert sorted(map(str, _PICKS.values())) == sorted(map(str, pick_options()))  # one space with `mutate`'s operators
_STOPS: dict[str, list[str]] = {
    "newline": ["\n"], "blank-line": ["\n\n"], "comma": [","], "semicolon": [";"], "space": [" "], "period": ["."],
    "none": [],
}  # fmt: skip
_PREFIXES: dict[str, str] = {"none": "", **{p.strip(" ").lower().replace(" ", "-"): p for p in PREFIXES if p}}
_PREFIXES["step-by-step"] = REASON_PREFIX

SPACE: dict[str, tuple[str, ...]] = {
    "framing": ("keep", "qa", "qa-bare", "q-a", "plain"),
    "stop": tuple(_STOPS),
    "pick": ("keep", *_PICKS),
    "k": ("0", "1", "2", "3", "4"),
    "prefix": tuple(_PREFIXES),
    "tokens": ("8", "16", "32", "128"),
}
"""The sampler's dimensions and their choices (all strings: Optuna's categorical values)."""


def _pick_steps(spec: Spec) -> list[dict[str, Any]]:
    keys = ("number", "after", "first_line", "regex")
    return [s for s in spec.get("parse") or [] if any(k in s for k in keys)]


def build(origin: Spec, point: Point) -> Spec | None:
    """The seed harness ``origin`` moved to ``point``; None when the point does not apply (a framing other than
    ``keep`` for a chat harness or a template whose core is not found)."""
    spec = copy.deepcopy(origin)
    if point["framing"] != "keep":
        template = spec.get("template")
        core = template_core(template) if isinstance(template, str) else None
        if core is None:
            return None
        spec["template"] = frame(core, point["framing"])
    decoding = spec["decoding"]
    decoding["stop"] = list(_STOPS[point["stop"]])
    decoding["max_new_tokens"] = int(point["tokens"])
    if point["pick"] != "keep":
        _set_pick(spec, copy.deepcopy(_PICKS[point["pick"]]))
    spec["fewshot"]["k"] = int(point["k"])
    prefix = _PREFIXES[point["prefix"]]
    if prefix:
        spec["prefix"] = prefix
    else:
        spec.pop("prefix", None)
    return spec


def _sha(spec: Spec) -> str | None:
    try:
        return Harness.from_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)).sha
    except HarnessError:
        return None


def describe(origin: Spec, harness: Harness) -> Point | None:
    """The point of `SPACE` that ``build(origin, point)`` turns into ``harness`` (same sha), or None when the harness
    lies outside the space (e.g. an edited instruction)."""
    spec = yaml.safe_load(harness.text)
    framing = "keep"
    if spec.get("template") != origin.get("template"):
        core = template_core(origin["template"]) if isinstance(origin.get("template"), str) else None
        names = [f for f in SPACE["framing"][1:] if core is not None and frame(core, f) == spec.get("template")]
        if not names:
            return None
        framing = names[0]
    stops = [name for name, stop in _STOPS.items() if stop == spec["decoding"]["stop"]]
    picks = [name for name, steps in _PICKS.items() if steps == _pick_steps(spec)]
    prefixes = [name for name, p in _PREFIXES.items() if p == spec.get("prefix", "")]
    k, tokens = str(spec["fewshot"]["k"]), str(spec["decoding"]["max_new_tokens"])
    if not stops or not prefixes or k not in SPACE["k"] or tokens not in SPACE["tokens"]:
        return None
    for pick in [*picks, "keep"]:  # the seed's own parse may also be one of the named picks
        point = {"framing": framing, "stop": stops[0], "pick": pick, "k": k, "prefix": prefixes[0], "tokens": tokens}
        built = build(origin, point)
        if built is not None and _sha(built) == harness.sha:
            return point
    return None


class TPEProposer:
    """Offline proposer: Optuna's TPE sampler over `SPACE`, told the archive's scores (see the module docstring).
    ``n_startup``: scored points before TPE's model is used (until then: coverage bundles, then random draws)."""

    name = "tpe"

    def __init__(self, seed: int = 0, n_startup: int = 8, max_attempts_per_candidate: int = 20) -> None:
        if n_startup < 1:
            raise ValueError(f"TPEProposer: n_startup must be >= 1 (got {n_startup})")
        self.seed = seed
        self.n_startup = n_startup
        self.max_attempts_per_candidate = max_attempts_per_candidate

    def __repr__(self) -> str:
        return f"TPEProposer(seed={self.seed}, n_startup={self.n_startup})"

    def _sampler_seed(self, context: ProposalContext) -> int:
        key = "|".join(
            [
                str(self.seed),
                str(context.seed),
                str(context.iteration),
                context.incumbent.sha,
                *sorted(entry.sha for entry in context.archive),
            ]
        )
        return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16)

    def history(self, context: ProposalContext) -> list[tuple[Point, float]]:
        """The archive's scored harnesses that lie in `SPACE`, as (point, score), in a fixed order (by sha)."""
        origin = yaml.safe_load(context.origin or context.incumbent.text)
        out = []
        for entry in sorted(context.archive, key=lambda e: e.sha):
            if entry.score is None or entry.status == "rejected":
                continue
            try:
                point = describe(origin, Harness.from_text(entry.text))
            except HarnessError:
                continue
            if point is not None:
                out.append((point, float(entry.score)))
        return out

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        """Up to ``k`` valid, distinct candidates; never raises for a bad candidate."""
        import optuna

        start = time.perf_counter()
        if k <= 0 or (context.restrict_to is not None and "template" not in context.restrict_to):
            return []
        origin = yaml.safe_load(context.origin or context.incumbent.text)
        incumbent = Harness.from_text(context.incumbent.text, parent=context.incumbent.parent)
        seen = {context.incumbent.sha, incumbent.sha} | {entry.sha for entry in context.archive}
        out: list[Proposal] = []

        def add(spec: Spec | None) -> None:
            if spec is None:
                return
            text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
            p = check_candidate(text, incumbent, context.restrict_to, proposer=self.name, parent=incumbent.sha)
            if p.harness is not None and p.harness.sha not in seen:
                seen.add(p.harness.sha)
                out.append(p)

        history = self.history(context)
        if len(history) < self.n_startup:  # startup: coverage first, as `mutate`'s structural space does
            for spec in bundles(origin):
                if len(out) >= max(1, k // 2):
                    break
                add(spec)
        distributions: dict[str, optuna.distributions.BaseDistribution] = {
            name: optuna.distributions.CategoricalDistribution(c) for name, c in SPACE.items()
        }
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self._sampler_seed(context), n_startup_trials=self.n_startup, multivariate=True,
                constant_liar=True,
            )  # fmt: skip
            study = optuna.create_study(direction="maximize", sampler=sampler)
            for point, score in history:
                study.add_trial(optuna.trial.create_trial(params=point, distributions=distributions, value=score))
            for _ in range(k * self.max_attempts_per_candidate):
                if len(out) >= k:
                    break
                trial = study.ask(distributions)
                before = len(out)
                add(build(origin, {name: str(v) for name, v in trial.params.items()}))
                if len(out) == before:  # a duplicate or a point that does not apply: not a result
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
        latency = time.perf_counter() - start
        for proposal in out:
            proposal.usage.update(empty_usage() | {"latency_s": latency / len(out)})
        return out
