"""The harness leg's settings (`SearchConfig`, ``search:`` in a WHALE config) and the proposer they name."""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from whale_core.proposers.base import Proposer


class ServedConfig(BaseModel):
    """The ``served:`` proposer's knobs (a local model WHALE serves itself; `whale_core.proposers.served`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    context_tokens: int = Field(
        2500, ge=200, le=1_000_000, description="prompt tokens per request, by the model's tokenizer"
    )
    max_tokens: int = Field(400, ge=64, le=4096, description="reply tokens per request (one candidate each)")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature of the served model's replies")
    timeout: float = Field(
        600.0, gt=0, le=86_400, description="seconds per request (a small model on a busy CPU is slow)"
    )
    start_timeout: float = Field(300.0, gt=0, le=86_400, description="seconds for the server's first healthy answer")
    device: str = Field("cpu", description="the server's --device: cpu, cuda, cuda:0, auto")


class ProposerBudget(BaseModel):
    """``search.proposer_budget``: what an LLM proposer may spend in a run, in tokens (prompt + completion) and/or
    US dollars (litellm's cost; 0 for local models). Unset = no limit. Checked before every request."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tokens: int | None = Field(None, ge=1, description="proposer tokens (prompt + completion) per run")
    usd: float | None = Field(None, gt=0, description="proposer cost per run in USD (litellm's prices)")


class SearchConfig(BaseModel):
    """The harness leg's knobs. ``proposer`` is ``mutate`` or ``tpe`` (offline), ``served:DIR`` / ``served:NAME``
    (a local chat model that WHALE serves and stops itself, see ``served``) or a litellm model string such as
    ``openai/gpt-4o-mini``, ``anthropic/claude-sonnet-4-5``, ``ollama/llama3`` (with ``api_base`` for an
    OpenAI-compatible server). API keys come from the environment only (``api_key_env`` names a custom variable)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    proposer: str = Field(
        "mutate",
        description="mutate (offline edits), tpe (offline: Optuna's TPE over framing, stops, parse, demos, prefix, "
        "tokens, told the archive's scores), served:NAME|DIR (a local model WHALE serves) or a litellm model string",
    )
    api_base: str | None = Field(None, description="base URL of an OpenAI-compatible server (litellm proposers)")
    api_key_env: str | None = Field(
        None, description="environment variable holding the API key (default: the provider's own, e.g. OPENAI_API_KEY)"
    )
    candidates: int = Field(8, ge=1, le=64, description="candidates proposed per harness leg")
    rounds: list[int] = Field(default_factory=lambda: [40, 100, 200], description="successive-halving subset sizes")
    keep_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="share of candidates kept per halving round")
    z: float = Field(1.645, ge=0.0, le=100.0, description="standard errors a winner must clear (paired test)")
    min_delta: float = Field(0.0, ge=0.0, le=1.0, description="score a winner must gain over the incumbent, besides z")
    archive_top: int = Field(8, ge=0, le=100, description="prior harnesses shown to the proposer")
    revisit_top: int = Field(
        2,
        ge=0,
        le=50,
        description="after the policy changed, the archive's best harnesses (besides the seed and the earlier "
        "incumbents) re-scored as candidates under the new weights",
    )
    failing_traces: int = Field(8, ge=0, le=100, description="failing traces of the incumbent shown to the proposer")
    context_tokens: int = Field(
        6000, ge=500, le=1_000_000, description="token budget of the proposer's prompt (litellm proposers)"
    )
    timeout: float = Field(60.0, gt=0, le=86_400, description="seconds per proposer request before it counts as failed")
    num_retries: int = Field(2, ge=0, le=10, description="litellm retries per request (with backoff) before giving up")
    max_ops: int = Field(2, ge=1, le=6, description="mutate: operators applied per candidate")
    mutate_wording: Literal["default", "paraphrase"] = Field(
        "default",
        description="mutate: how instructions describe an answer encoding: default ('Write the answer reversed (last "
        "digit first).', the shipped tiny model's warm-up sentence) | paraphrase (words it never saw: the coupling "
        "check)",
    )
    mutate_space: Literal["classic", "structural"] = Field(
        "classic",
        description="mutate: classic (instruction, answer encoding, few-shot, decoding, samples, normalization steps) "
        "| structural (also the template's framing, stop strings, which number the parse takes, an answer prefix: "
        "the format fixes a new task needs; whale_core/proposers/structure.py)",
    )
    edit: Literal["auto", "whole", "component"] = Field(
        "auto",
        description="LLM proposers: whole (k complete harnesses in one reply: strong API models) | component (one "
        "harness component per request as JSON, merged into the incumbent: small models) | auto (component for "
        "served: models, whole for the rest)",
    )
    output: Literal["auto", "schema", "json", "fenced"] = Field(
        "auto",
        description="component edits: the reply format asked for: schema (JSON schema as response_format; enforced "
        "by WHALE's server for served: models) | json (JSON mode) | fenced (a ```json block) | auto (schema, stepping "
        "down when the provider refuses)",
    )
    selector: Literal["traces", "round-robin"] = Field(
        "traces",
        description="component edits: which component each request rewrites: traces (read from the failing "
        "traces: missed answers → parse/decoding/prompt first) | round-robin (seeded rotation)",
    )
    feedback_retries: int = Field(
        1, ge=0, le=3, description="component edits: times a rejected reply is fed back with its reason"
    )
    proposer_budget: ProposerBudget = Field(default_factory=ProposerBudget)
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

        return MutateProposer(seed=seed, max_ops=cfg.max_ops, wording=cfg.mutate_wording, space=cfg.mutate_space)
    if cfg.proposer == "tpe":
        from whale_core.proposers.sampler import TPEProposer

        return TPEProposer(seed=seed)
    if cfg.proposer.startswith("served:"):
        from whale_core.proposers.serve import resolve_served_model
        from whale_core.proposers.served import ServedProposer

        s, budget = cfg.served, cfg.proposer_budget
        return ServedProposer(
            resolve_served_model(cfg.proposer.removeprefix("served:")),
            temperature=s.temperature,
            timeout=s.timeout,  # no retries: a local server that timed out or died is not helped by asking again
            context_tokens=s.context_tokens,
            max_tokens=s.max_tokens,
            device=s.device,
            start_timeout=s.start_timeout,
            edit="whole" if cfg.edit == "whole" else "component",
            output=cfg.output,
            selector=cfg.selector,
            feedback_retries=cfg.feedback_retries,
            budget_tokens=budget.tokens,
        )
    if "/" not in cfg.proposer:
        raise ValueError(
            f"search.proposer {cfg.proposer!r}: use 'mutate', 'tpe', 'served:/path/to/hf-model-dir' (or served:NAME) "
            "or a litellm model string like 'openai/gpt-4o-mini'"
        )
    from whale_core.proposers.llm import LLMProposer

    return LLMProposer(
        model=cfg.proposer,
        api_base=cfg.api_base,
        timeout=cfg.timeout,
        num_retries=cfg.num_retries,
        context_tokens=cfg.context_tokens,
        api_key_env=cfg.api_key_env,
        edit="component" if cfg.edit == "component" else "whole",
        output=cfg.output,
        selector=cfg.selector,
        feedback_retries=cfg.feedback_retries,
        budget_tokens=cfg.proposer_budget.tokens,
        budget_usd=cfg.proposer_budget.usd,
    )
