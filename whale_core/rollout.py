"""Rollouts: (policy, harness, problems) -> completions, parsed answers, scores, traces and token counts. Batched.

`rollout()` renders every problem through the harness (few-shot demos from the train split), tokenizes, sorts the
prompts by length (so a batch pads little), generates ``inference.samples`` completions per problem in batches of
``batch_size`` rows with left padding, ends each completion by the stop rule the weights leg shares
(`whale_core.stops`: end tokens, then a cut before the earliest stop string), parses it with the harness, aggregates
the samples (``majority`` vote over parsed answers, ties broken by first occurrence; or ``first``) and scores the
answer with the suite.

Decoding comes only from ``harness.spec.decoding`` (a fresh ``GenerationConfig``: the model's own generation
defaults, such as a repetition penalty, are ignored; only its EOS ids are kept, by the stop rule): temperature 0 is
greedy, else sampling with ``top_p`` and no top-k, seeded by ``seed`` per batch (the global torch RNG is forked, so
callers' RNG state is untouched). Sampled completions therefore depend on the batch composition; greedy ones do not
(up to float ties).

Failure isolation: a problem that fails to render, whose prompt is too long for the model, whose completion does not
parse, or whose scorer raises, scores 0 with the reason in ``Trace.error``; only systemic faults (a broken model or
tokenizer, out of memory) raise.

Simplified, and why:
- greedy decoding with ``samples > 1`` generates once and repeats the completion (the samples would be identical);
  ``RolloutResult.completions`` counts what was actually generated, which is what the budget charges.
- ``Trace.prompt_tokens`` is the prompt length once (not times samples); ``completion_tokens`` sums over the
  completions actually generated, each counted up to and including its end-of-sequence or stop token.
- chat-mode prompts come from the tokenizer's chat template, which emits its own special tokens, so they are
  tokenized without adding special tokens; text-mode prompts get the tokenizer's usual ones (e.g. a BOS).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core.harness import AnswerParseError, Harness
from whale_core.harness import chat as _chat
from whale_core.seeds import batch_seed
from whale_core.stops import end_token_ids, finish, multi_token_stops
from whale_core.suites.base import Problem, Suite

if TYPE_CHECKING:
    from whale_core.models.handle import Policy

__all__ = ["RolloutResult", "Trace", "aggregate", "rollout"]

Progress = Callable[[int, int], None]


@dataclass
class Trace:
    """One problem's rollout. ``score`` is the suite's score of the aggregated ``answer`` (0 on any error)."""

    problem_id: str
    prompt: str
    completions: list[str]
    parsed: list[str | None]
    answer: str | None
    gold: str
    score: float
    sample_scores: list[float]
    error: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclass
class RolloutResult:
    """All traces of one rollout plus totals. ``score`` is the mean trace score (0 when there are no problems)."""

    harness_sha: str
    policy_id: str
    split: str
    traces: list[Trace]
    score: float
    n: int
    completions: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def scores(self) -> list[float]:
        """Per-problem scores, in the order the problems were given."""
        return [t.score for t in self.traces]

    def summary(self) -> dict[str, Any]:
        """Everything but the traces (a small record for logs, archives and task results)."""
        out = asdict(self)
        out.pop("traces")
        return out

    def write_jsonl(self, path: str | Path) -> Path:
        """One JSON object per trace (with ``harness_sha``, ``policy_id`` and ``split`` added); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        head = {"harness_sha": self.harness_sha, "policy_id": self.policy_id, "split": self.split}
        with path.open("w", encoding="utf-8") as f:
            for t in self.traces:
                f.write(json.dumps({**head, **asdict(t)}, ensure_ascii=False) + "\n")
        return path


def aggregate(parsed: Sequence[str | None], how: str) -> str | None:
    """``majority``: the most common non-None answer, ties broken by first occurrence; ``first``: the first sample's
    answer. ``None`` when there is nothing to aggregate."""
    if how == "first":
        return parsed[0] if parsed else None
    if how != "majority":
        raise ValueError(f"unknown aggregate {how!r}: expected 'majority' or 'first'")
    counts = Counter(p for p in parsed if p is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(p for p in parsed if p is not None and counts[p] == best)


def _safe_score(suite: Suite, answer: str | None, problem: Problem) -> tuple[float, str | None]:
    try:
        value = float(suite.score(answer, problem))
    except Exception as exc:
        return 0.0, f"scorer raised {type(exc).__name__}: {exc}"
    return min(1.0, max(0.0, value)), None


@dataclass
class _Prompts:
    """The rendered prompts of a rollout, their token ids (None where the problem already failed) and the errors."""

    texts: list[str]
    ids: list[list[int] | None]
    errors: list[str | None]


def _prompts(
    policy: Policy, harness: Harness, problems: Sequence[Problem], pool: Sequence[Problem], seed: int
) -> _Prompts:
    """Render every problem (demos drawn from ``pool``) and tokenize it; a render failure, an empty prompt or one too
    long for the model's window is that problem's error."""
    spec, tok = harness.spec, policy.tokenizer
    max_pos = getattr(getattr(policy.model, "config", None), "max_position_embeddings", None)
    n = len(problems)
    prompts: list[str] = [""] * n
    prompt_ids: list[list[int] | None] = [None] * n
    errors: list[str | None] = [None] * n
    for i, p in enumerate(problems):
        try:
            demos = harness.select_demos(p, pool, seed)
            prompts[i] = harness.render(p, demos, tokenizer=tok)
        except Exception as exc:
            errors[i] = f"render: {exc}"
    ok = [i for i in range(n) if errors[i] is None]
    if ok:
        enc = _chat.prompt_ids(tok, [prompts[i] for i in ok], chat=harness.is_chat)
        for i, ids in zip(ok, enc, strict=True):
            if max_pos is not None and len(ids) + spec.decoding.max_new_tokens > max_pos:
                errors[i] = f"prompt too long: {len(ids)} tokens + {spec.decoding.max_new_tokens} new > {max_pos}"
            elif not ids:
                errors[i] = "render: empty prompt"
            else:
                prompt_ids[i] = list(ids)
    return _Prompts(prompts, prompt_ids, errors)


Row = tuple[int, int]  # (problem index, sample index)


def _generate(
    policy: Policy,
    harness: Harness,
    prompt_ids: Sequence[list[int] | None],
    rows: Sequence[Row],
    batch_size: int,
    seed: int,
    progress: Progress | None,
) -> tuple[dict[Row, str], dict[Row, int]]:
    """Generate one completion per row, ``batch_size`` rows per ``generate`` call (left-padded; sampled batches
    seeded by `whale_core.seeds.batch_seed`), each ended by the stop rule: its text and token count per row."""
    import torch
    from transformers import GenerationConfig

    spec, tok, model = harness.spec, policy.tokenizer, policy.model
    greedy = spec.decoding.temperature == 0.0
    stops = list(spec.decoding.stop)
    eos_ids = end_token_ids(tok, model, [stops])  # the stop rule training shares (whale_core.stops)
    multi_stops = multi_token_stops(tok, stops)
    gcfg = GenerationConfig(
        max_new_tokens=spec.decoding.max_new_tokens,
        do_sample=not greedy,
        temperature=spec.decoding.temperature if not greedy else None,
        top_p=spec.decoding.top_p if not greedy else None,
        top_k=0 if not greedy else None,
        num_beams=1,
        pad_token_id=tok.pad_token_id,
        eos_token_id=eos_ids or None,
        stop_strings=multi_stops or None,
    )
    texts: dict[Row, str] = {}
    ntoks: dict[Row, int] = {}
    total_rows = len(rows)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    fork_devices = [policy.device] if policy.device.type == "cuda" else []
    with torch.inference_mode(), torch.random.fork_rng(devices=fork_devices):
        for b, start in enumerate(range(0, total_rows, batch_size)):
            batch = rows[start : start + batch_size]
            seqs = [prompt_ids[i] or [] for i, _ in batch]
            width = max(len(s) for s in seqs)
            input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for r, s in enumerate(seqs):
                input_ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
                mask[r, width - len(s) :] = 1
            if not greedy:
                torch.manual_seed(batch_seed(seed, b))
            extra = {"tokenizer": tok} if multi_stops else {}
            out = model.generate(
                input_ids=input_ids.to(policy.device),
                attention_mask=mask.to(policy.device),
                generation_config=gcfg,
                **extra,
            )
            new = out[:, width:].tolist()
            for r, row in enumerate(batch):
                texts[row], ntoks[row] = finish(tok, new[r], eos_ids, stops)
            if progress is not None:
                progress(min(start + batch_size, total_rows), total_rows)
    return texts, ntoks


def _trace(
    harness: Harness, suite: Suite, p: Problem, prompt: str, completions: list[str], prompt_tokens: int, ctoks: int
) -> Trace:
    """One problem's trace: parse each completion, aggregate, score the answer and each sample (failures are the
    trace's error, never raised)."""
    parsed: list[str | None] = []
    first_error: str | None = None
    for c in completions:
        try:
            parsed.append(harness.parse_answer(c, p))
        except AnswerParseError as exc:
            parsed.append(None)
            first_error = first_error or f"parse: {exc}"
        except Exception as exc:  # a harness parse step misbehaving is still this example's failure
            parsed.append(None)
            first_error = first_error or f"parse: {type(exc).__name__}: {exc}"
    answer = aggregate(parsed, harness.spec.inference.aggregate)
    sample_scores: list[float] = []
    score_error: str | None = None
    for a in parsed:
        sc, err = _safe_score(suite, a, p) if a is not None else (0.0, None)
        sample_scores.append(sc)
        score_error = score_error or err
    score, err = _safe_score(suite, answer, p)
    error = err or score_error or (first_error if answer is None else None)
    return Trace(
        p.id,
        prompt,
        completions,
        parsed,
        answer,
        p.answer,
        0.0 if err else score,
        sample_scores,
        error,
        prompt_tokens,
        ctoks,
    )


def rollout(
    policy: Policy,
    harness: Harness,
    suite: Suite,
    problems: Sequence[Problem],
    *,
    demo_pool: Sequence[Problem] | None = None,
    batch_size: int = 64,
    seed: int = 0,
    split: str = "val",
    progress: Progress | None = None,
) -> RolloutResult:
    """Roll ``harness`` out with ``policy`` on ``problems`` and score with ``suite`` (see the module docstring).

    ``batch_size`` counts generated rows (problems x samples) per ``generate`` call. ``demo_pool`` defaults to
    ``suite.problems("train")``. ``progress(done, total)`` is called after each batch, in completions.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    t0 = time.perf_counter()
    spec = harness.spec
    greedy = spec.decoding.temperature == 0.0
    samples = spec.inference.samples
    gen_per_problem = 1 if greedy else samples
    pool: Sequence[Problem] = ()
    if spec.fewshot.k > 0:
        pool = demo_pool if demo_pool is not None else suite.problems("train")
    enc = _prompts(policy, harness, problems, pool, seed)
    prompt_ids = enc.ids

    # Rows: (problem index, sample index); longest prompts first so each batch pads little.
    n = len(problems)
    rows = [(i, j) for i in range(n) if prompt_ids[i] is not None for j in range(gen_per_problem)]
    rows.sort(key=lambda r: -len(prompt_ids[r[0]] or ()))
    texts, ntoks = _generate(policy, harness, prompt_ids, rows, batch_size, seed, progress)

    traces: list[Trace] = []
    for i, p in enumerate(problems):
        if enc.errors[i] is not None:
            traces.append(Trace(p.id, enc.texts[i], [], [], None, p.answer, 0.0, [], enc.errors[i], 0, 0))
            continue
        gen = [texts[(i, j)] for j in range(gen_per_problem)]
        completions = gen * samples if greedy else gen
        ctoks = sum(ntoks[(i, j)] for j in range(gen_per_problem))
        traces.append(_trace(harness, suite, p, enc.texts[i], completions, len(prompt_ids[i] or ()), ctoks))
    return RolloutResult(
        harness_sha=harness.sha,
        policy_id=policy.policy_id,
        split=split,
        traces=traces,
        score=sum(t.score for t in traces) / n if n else 0.0,
        n=n,
        completions=len(rows),
        prompt_tokens=sum(t.prompt_tokens for t in traces),
        completion_tokens=sum(t.completion_tokens for t in traces),
        seconds=time.perf_counter() - t0,
    )
