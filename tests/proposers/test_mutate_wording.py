"""The coupling check's wording: with ``wording="paraphrase"`` the `mutate` proposer describes answer encodings in
words the shipped tiny model's warm-up never used, and never writes the warm-up's own sentence."""

from __future__ import annotations

from typing import Any

import pytest

from whale_core.config import ConfigError, load_config
from whale_core.harness import Harness
from whale_core.legs.harness_config import make_proposer
from whale_core.proposers.mutate import MutateProposer, describe_encoding

WARMUP_WORDS = ("revers", "last digit first", "backwards")


def _instructions(seed_harness: Harness, make_ctx: Any, wording: str) -> list[str]:
    props = MutateProposer(seed=0, wording=wording).propose(make_ctx(seed_harness), 40)
    return [p.harness.spec.instruction for p in props if p.harness is not None]


def test_describe_encoding_in_both_wordings() -> None:
    assert describe_encoding(True, 0, "") == "Write the answer reversed (last digit first)."
    assert describe_encoding(True, 0, "", "paraphrase") == "Give the result in mirror order, ones digit leading."
    assert describe_encoding(False, 0, "", "paraphrase") is None
    both = describe_encoding(True, 4, " ", "paraphrase") or ""
    assert both.startswith("Give the result filled out with leading zeros to 4 places") and "spaces" in both


def test_paraphrase_never_writes_the_warmup_sentence(seed_harness: Harness, make_ctx: Any) -> None:
    default = _instructions(seed_harness, make_ctx, "default")
    para = _instructions(seed_harness, make_ctx, "paraphrase")
    assert any("last digit first" in t for t in default)
    assert len(para) == 40 and any("mirror order" in t for t in para)
    assert not [t for t in para if any(w in t.lower() for w in WARMUP_WORDS)]


def test_wording_is_validated_and_reaches_the_proposer() -> None:
    with pytest.raises(ValueError, match="wording must be one of default, paraphrase"):
        MutateProposer(wording="other")
    with pytest.raises(ConfigError, match="mutate_wording"):
        load_config(overrides=["search.mutate_wording=paraphrased"])
    cfg = load_config(overrides=["search.mutate_wording=paraphrase"])
    proposer = make_proposer(cfg.search, 0)
    assert isinstance(proposer, MutateProposer) and proposer.wording == "paraphrase"
    assert "wording='paraphrase'" in repr(proposer)
