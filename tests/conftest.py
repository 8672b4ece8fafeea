"""Shared test set-up: an isolated project home and the offline environment, set before anything heavy imports.

Tests use ``$WHALE_TEST_HOME`` (default ``<repo>/.whale-test``) as the project home so that the tiny model built once
is reused by later test sessions on the same machine (its cache key is the recipe hash, so a changed recipe rebuilds),
and ``<test home>/cache`` as the machine cache (``$WHALE_CACHE_DIR``: database templates).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_HOME = Path(os.environ.get("WHALE_TEST_HOME", REPO / ".whale-test")).resolve()
os.environ["WHALE_HOME"] = str(TEST_HOME)
# Database templates (whale_core.records.db_templates) go to the test home, not the user's ~/.cache: the session's first
# new home migrates and saves them, every later one starts from a copy (tests/records/test_db_templates.py tests both
# paths).
os.environ["WHALE_CACHE_DIR"] = str(TEST_HOME / "cache")

from whale_core.env import setup_offline_env  # noqa: E402

setup_offline_env(TEST_HOME)


# ----------------------------------------------------------------------------------------- models (shared fixtures)
# `tiny_model_dir` / `tiny_policy`: the default built-in tiny model (built once per test home, then cached across
# sessions by its recipe hash). `micro_model_dir` / `micro_policy`: a random-init ~40k-parameter char-level Llama with
# the tiny model's tokenizer, for tests that only need *a* model (fast, no build). `small_llama_dir`: a random-init
# Llama with a BPE tokenizer and a chat template (tests/small_llama.py), for real-model code paths.

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from whale_core.models.tiny_build import build_tiny_model

    return build_tiny_model(TEST_HOME)


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from whale_core.models.policy import load_policy

    return load_policy(tiny_model_dir, device="cpu")


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from whale_core.models.tiny import make_tokenizer

    path = tmp_path_factory.mktemp("micro-model")
    tok = make_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def micro_policy(micro_model_dir: Path):  # type: ignore[no-untyped-def]
    from whale_core.models.policy import load_policy

    return load_policy(micro_model_dir, device="cpu")


@pytest.fixture(scope="session")
def small_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real-shaped small causal LM: byte-level BPE, SmolLM2's special tokens and chat template, pad == eos, random
    init (tests/small_llama.py). For code paths that must work on real instruct models, not just the tiny one."""
    from small_llama import build_small_llama

    return build_small_llama(tmp_path_factory.mktemp("small-llama"))


@pytest.fixture(autouse=True)
def _no_silent_cache_key_failures():  # type: ignore[no-untyped-def]
    """Prefect disables caching silently when a cache key cannot be computed: fail the test instead."""
    from tasks.cache import KEY_FAILURES

    KEY_FAILURES.clear()
    yield
    assert not KEY_FAILURES, f"cache keys could not be computed: {KEY_FAILURES}"
