"""Co-overfitting, measured: the robustness matrix (final checkpoints x a harness set, test split only), and the
population option that is meant to mitigate it (`whale_core.legs.population`).

WHALE trains the weights against one incumbent harness, so a checkpoint may only work through that harness. The
matrix scores every model (the base model and each run's final checkpoint) through every harness of a set:

- ``seed``: the suite's seed harness (where every run started);
- ``final``: each run's final incumbent (a model's *own* harness is its run's final one; the base's is the seed);
- ``top``: the best val-scored harnesses each run's harness legs found (the archive's top-k);
- ``heldout``: harnesses no run ever saw — generic `mutate` edits of the seed harness drawn with a seed no run uses
  (`HELDOUT_SEED`) and generic instruction paraphrases — filtered against every harness the runs' archive holds.

Columns are distinct by what the *model* sees (`input_signature`: the rendered prompts of a probe of problems, the
decoding and the inference settings), not by sha: a mutate edit that only adds a no-op parse step has a new sha but
feeds the model exactly the seed's inputs, so it is neither a separate "top" column nor a "held-out" harness. The
population (mitigation) is filtered the same way, or it would train on the incumbent's prompts under another name.

Every cell is a rollout on the first ``n`` problems of the **test split** (`matrix_problems` asserts it); the per-model
summary is the own-harness score, the mean over the other harnesses ("cross-harness"), and the drop between them.
Evaluation is injected (``evaluate``) so the flow routes it through the cached ``rollout`` task; the default calls
`whale_core.rollout.rollout` directly.

Mitigation: training the weights leg on a population of harnesses (`whale_core.legs.population`; it also holds
the `Probe`, `input_signature` and `best_val_harnesses` this module reuses).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from whale_core.harness import Harness, HarnessError
from whale_core.legs.population import Probe, best_val_harnesses, input_signature
from whale_core.suites.base import Problem

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from whale_core.records.archive import Archive

HELDOUT_SEED = 7_919_000  # no run uses it: runs seed the mutate proposer with cfg.seed + iteration
HarnessKind = Literal["seed", "final", "top", "heldout"]
PARAPHRASES: tuple[str, ...] = (
    "Task: {instruction}",
    "{instruction} Reply with the answer only.",
    "Read the problem. {instruction}",
)


class RobustnessConfig(BaseModel):
    """The robustness matrix of ``whale compare``: which harnesses, how many test problems."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = True
    top_k: int = Field(2, ge=0, le=20, description="best val-scored harnesses taken from each run's archive")
    max_top: int = Field(8, ge=0, le=100, description="cap on 'top' columns over all runs (best first)")
    heldout_mutants: int = Field(3, ge=0, le=20, description="generic mutate edits of the seed harness no run saw")
    paraphrases: int = Field(2, ge=0, le=len(PARAPHRASES), description="instruction paraphrases of the seed harness")
    test_problems: int = Field(200, ge=1, description="first N problems of the test split per cell")


# ------------------------------------------------------------------------------------------------------ problems
def matrix_problems(suite: Any, n: int) -> list[Problem]:
    """The first ``n`` problems of the test split; asserts none of them is a train or val problem."""
    test = list(suite.problems("test"))[:n]
    others = {p.id for split in ("train", "val") for p in suite.problems(split)}
    leaked = [p.id for p in test if p.id in others]
    if leaked:
        raise AssertionError(f"robustness matrix: test problems {leaked[:5]} also appear in train/val")
    return test


# ----------------------------------------------------------------------------------------------------- harnesses
@dataclass(frozen=True)
class MatrixHarness:
    label: str
    kind: HarnessKind
    harness: Harness


@dataclass(frozen=True)
class MatrixModel:
    """A row: ``policy`` is whatever ``evaluate`` needs (a `Policy`, or a `PolicyRef` in the flow)."""

    label: str
    run_id: str | None
    policy: Any
    own_harness: str  # sha of the harness the model's run ended with (the seed harness for the base model)


def shas_seen(archive: Archive, run_ids: Iterable[str]) -> set[str]:
    """Every harness sha the runs proposed, evaluated or held as incumbent (what "used in training" means)."""
    seen: set[str] = set()
    for rid in run_ids:
        seen |= {c.harness_sha for c in archive.candidates(rid) if c.harness_sha}
        seen |= {e.harness_sha for e in archive.evaluations(rid)}
        for leg in archive.legs(rid):
            seen |= {s for s in (leg.incumbent_harness_in, leg.incumbent_harness_out) if s}
    return seen


def heldout_harnesses(
    seed_harness: Harness,
    n_mutants: int,
    n_paraphrases: int,
    exclude: Iterable[str],
    seed: int = HELDOUT_SEED,
    probe: Probe | None = None,
    exclude_inputs: Iterable[str] = (),
) -> list[MatrixHarness]:
    """Generic variants of the seed harness: `mutate` edits (proposer seed ``seed``) and instruction paraphrases
    (`PARAPHRASES`). Skipped: shas in ``exclude``, and with a ``probe`` any harness whose `input_signature` is in
    ``exclude_inputs`` or equals the seed's or another held-out one's."""
    from whale_core.proposers.base import ArchiveEntry, ProposalContext
    from whale_core.proposers.mutate import MutateProposer

    skip = set(exclude) | {seed_harness.sha}
    seen_inputs = set(exclude_inputs) | ({input_signature(seed_harness, probe)} if probe else set())
    out: list[MatrixHarness] = []

    def fresh(h: Harness) -> bool:
        if h.sha in skip:
            return False
        skip.add(h.sha)
        if probe is not None:
            sig = input_signature(h, probe)
            if sig in seen_inputs:
                return False
            seen_inputs.add(sig)
        return True

    entry = ArchiveEntry(seed_harness.sha, seed_harness.text, None, 0, "incumbent", None, None, None)
    ctx = ProposalContext("", "", entry, [], [], None, seed, 0)
    if n_mutants:
        for p in MutateProposer(seed=seed, max_ops=2).propose(ctx, 8 * n_mutants):
            if len(out) < n_mutants and p.harness is not None and fresh(p.harness):
                out.append(MatrixHarness(f"heldout-mut{len(out) + 1}", "heldout", p.harness))
    instruction = seed_harness.spec.instruction or ""
    for i, pattern in enumerate(PARAPHRASES[:n_paraphrases]):
        try:
            h = seed_harness.evolve(instruction=pattern.format(instruction=instruction).strip())
        except HarnessError:
            continue
        if fresh(h):
            out.append(MatrixHarness(f"heldout-para{i + 1}", "heldout", h))
    return out


def harness_set(
    archive: Archive,
    run_ids: Sequence[str],
    final_harnesses: Sequence[tuple[str, str]],
    seed_harness: Harness,
    cfg: RobustnessConfig,
    probe: Probe | None = None,
) -> list[MatrixHarness]:
    """The matrix's columns: seed, each run's final harness (``final_harnesses``: (label, sha)), the runs' top-k
    (at most ``cfg.max_top``, best first) and the held-out ones. Deduplicated by sha, first kind wins; with a
    ``probe`` also by `input_signature` (a run's final harness always stays: it is a model's own column), and a
    held-out harness must differ in its inputs from every harness the runs saw."""
    cols: list[MatrixHarness] = [MatrixHarness("seed", "seed", seed_harness)]
    have = {seed_harness.sha}
    inputs: set[str] = {input_signature(seed_harness, probe)} if probe else set()
    for label, sha in final_harnesses:
        if sha not in have:
            have.add(sha)
            h = Harness.from_text(archive.get_harness(sha).text)
            cols.append(MatrixHarness(f"final:{label}", "final", h))
            inputs |= {input_signature(h, probe)} if probe else set()
    tops: list[tuple[float, str]] = []
    for rid in run_ids:
        tops += [(score, sha) for sha, score in best_val_harnesses(archive, rid, cfg.top_k, exclude=have)]
    for _score, sha in sorted(tops, key=lambda t: (-t[0], t[1])):
        if sha in have or sum(c.kind == "top" for c in cols) >= cfg.max_top:
            continue
        have.add(sha)
        h = Harness.from_text(archive.get_harness(sha).text)
        if probe is not None:
            sig = input_signature(h, probe)
            if sig in inputs:
                continue
            inputs.add(sig)
        cols.append(MatrixHarness(f"top{sum(c.kind == 'top' for c in cols) + 1}", "top", h))
    seen = shas_seen(archive, run_ids)
    seen_inputs: set[str] = set(inputs)
    if probe is not None:
        for sha in seen - have:
            try:
                seen_inputs.add(input_signature(Harness.from_text(archive.get_harness(sha).text), probe))
            except (HarnessError, LookupError):
                continue
    cols += heldout_harnesses(
        seed_harness, cfg.heldout_mutants, cfg.paraphrases, exclude=seen | have, probe=probe,
        exclude_inputs=seen_inputs,
    )  # fmt: skip
    return cols


# -------------------------------------------------------------------------------------------------------- matrix
Evaluate = Callable[[MatrixModel, MatrixHarness, list[Problem]], float]


@dataclass(frozen=True)
class ModelRobustness:
    label: str
    own: float | None  # score through its own harness (None if that harness is not a column)
    cross: float  # mean over the other columns
    drop: float | None  # own - cross
    heldout: float | None  # mean over held-out columns


@dataclass(frozen=True)
class RobustnessMatrix:
    models: list[str]
    harnesses: list[str]
    kinds: list[str]
    scores: list[list[float]]  # [model][harness]
    own: list[int | None]  # column index of each model's own harness
    n: int  # test problems per cell

    def summary(self) -> list[ModelRobustness]:
        out = []
        for i, label in enumerate(self.models):
            row, j = self.scores[i], self.own[i]
            others = [v for k, v in enumerate(row) if k != j]
            cross = statistics.fmean(others) if others else float("nan")
            held = [v for k, v in enumerate(row) if self.kinds[k] == "heldout"]
            own = row[j] if j is not None else None
            drop = own - cross if own is not None else None
            out.append(ModelRobustness(label, own, cross, drop, statistics.fmean(held) if held else None))
        return out


def compute_matrix(
    models: Sequence[MatrixModel], harnesses: Sequence[MatrixHarness], suite: Any, n: int, evaluate: Evaluate
) -> RobustnessMatrix:
    """Score every model through every harness on the first ``n`` test problems (see `matrix_problems`)."""
    problems = matrix_problems(suite, n)
    index = {h.harness.sha: j for j, h in enumerate(harnesses)}
    scores = [[float(evaluate(m, h, problems)) for h in harnesses] for m in models]
    return RobustnessMatrix(
        models=[m.label for m in models],
        harnesses=[h.label for h in harnesses],
        kinds=[h.kind for h in harnesses],
        scores=scores,
        own=[index.get(m.own_harness) for m in models],
        n=len(problems),
    )


def rollout_evaluate(suite: Any, batch_size: int = 64, seed: int = 0) -> Evaluate:
    """An ``evaluate`` that calls `rollout()` in process (``MatrixModel.policy`` is a loaded `Policy`)."""
    from whale_core.rollout import rollout

    def evaluate(model: MatrixModel, harness: MatrixHarness, problems: list[Problem]) -> float:
        res = rollout(model.policy, harness.harness, suite, problems, batch_size=batch_size, seed=seed, split="test")
        return float(res.score)

    return evaluate


def heatmap_figure(m: RobustnessMatrix) -> Figure:
    """Models (rows) x harnesses (columns), test score per cell; own-harness cells boxed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=(max(6.0, 0.9 * len(m.harnesses) + 3), max(3.0, 0.45 * len(m.models) + 2)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(m.scores, cmap="viridis", vmin=0.0, vmax=max(1e-6, max(max(r) for r in m.scores)), aspect="auto")
    for i, row in enumerate(m.scores):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.5 else "black")
        own = m.own[i]
        if own is not None:
            ax.add_patch(Rectangle((own - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    ax.set_xticks(range(len(m.harnesses)), [f"{h}\n({k})" for h, k in zip(m.harnesses, m.kinds, strict=True)],
                  rotation=45, ha="right", fontsize=7)  # fmt: skip
    ax.set_yticks(range(len(m.models)), m.models, fontsize=7)
    ax.set_title(f"robustness: test score (n={m.n}) per model x harness; red box = own harness", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig


def matrix_markdown(m: RobustnessMatrix) -> str:
    """The per-model summary table and the full matrix, as Markdown."""
    lines = ["## Robustness (co-overfitting) matrix", "",
             f"Every cell: the model through the harness on the first {m.n} **test** problems. Cross-harness = mean "
             "over the other harnesses; drop = own − cross.", "",
             "| model | own harness | cross-harness mean | drop | held-out mean |",
             "|---|---|---|---|---|"]  # fmt: skip

    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:.4f}"

    for r in m.summary():
        lines.append(f"| {r.label} | {f(r.own)} | {f(r.cross)} | {f(r.drop)} | {f(r.heldout)} |")
    lines += ["", "| model | " + " | ".join(f"{h} ({k})" for h, k in zip(m.harnesses, m.kinds, strict=True)) + " |",
              "|---" * (len(m.harnesses) + 1) + "|"]  # fmt: skip
    for label, row in zip(m.models, m.scores, strict=True):
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines)
