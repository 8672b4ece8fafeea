"""The built-in tiny model: cache, reload, determinism per seed, atomic builds, tokenizer, warm-up formats."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from whale_core.harness import Harness
from whale_core.models import tiny, tiny_build, warmup
from whale_core.models.policy import load_policy
from whale_core.models.tiny import TinyRecipe, make_tokenizer
from whale_core.models.tiny_build import build_tiny_model
from whale_core.models.warmup import warmup_formats

# A recipe small enough to build in seconds (a few steps of a 1-layer model, tiny evaluation).
MICRO = TinyRecipe(
    steps=3, batch_size=4, hidden_size=32, intermediate_size=64, layers=1, heads=2, eval_n=4, eval_digits_n=2
)


def _weights(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_default_build_is_cached_and_reloads_identically(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tests.conftest import TEST_HOME

    assert tiny_model_dir == tiny.tiny_model_dir(TEST_HOME)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "recipe.json", "warmup_report.json"):
        assert (tiny_model_dir / name).is_file(), name
    assert TinyRecipe(**json.loads((tiny_model_dir / "recipe.json").read_text())) == TinyRecipe()

    def no_training(*a: Any, **k: Any) -> None:
        raise AssertionError("a cache hit must not train")

    monkeypatch.setattr(tiny_build, "_train", no_training)
    assert build_tiny_model(TEST_HOME) == tiny_model_dir  # cache hit
    a, b = load_policy("tiny", device="cpu", home=TEST_HOME), load_policy(tiny_model_dir, device="cpu")
    assert a.policy_id == b.policy_id and a.base_path == tiny_model_dir
    ids = a.tokenizer(["Add:\n12+34=", "What is the sum?\n5+6="], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(a.model(**ids).logits, b.model(**ids).logits)


def test_warmup_report_says_the_harness_matters(tiny_model_dir: Path) -> None:
    report = json.loads((tiny_model_dir / "warmup_report.json").read_text())
    three = report["three_digit"]
    assert all(v["n"] >= 500 for v in three.values())
    assert {"plain-p0-k0", "rev-p0-k0", "rev-p0-k2", "rev-p0-chat-k1"} <= set(three)
    # same weights, different harness (answer encoding + the instruction that announces it): far apart, and the
    # seed harness (plain) is not the model's best format, so a harness leg has something to find
    assert three["rev-p0-k0"]["accuracy"] - three["plain-p0-k0"]["accuracy"] > 0.1
    seed = report["by_digits"]["plain-p0-k0"]  # the arith seed harness
    assert seed["1"]["accuracy"] > seed["3"]["accuracy"] > seed["5"]["accuracy"]
    assert max(v["accuracy"] for v in three.values()) < 0.9  # weak on purpose: headroom for both legs
    assert seed["4"]["accuracy"] < 0.05 and seed["5"]["accuracy"] < 0.05
    for fmt in report["formats"].values():
        Harness.from_text(fmt["harness"])  # every format is a valid harness
    assert sum(f["weight"] for f in report["formats"].values()) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    import torch

    from whale_core.suites import load_suite

    a = build_tiny_model(tmp_path / "a", MICRO)
    b = build_tiny_model(tmp_path / "b", MICRO)
    assert a.name == b.name == f"tiny-{MICRO.hash()}"
    assert MICRO.model_copy(update={"seed": 1}).hash() != MICRO.hash()  # the seed is part of the cache key
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    other = MICRO.model_copy(update={"seed": 1})
    with tiny_build._deterministic(other.seed):
        suites = {"arith": load_suite("arith"), "sort": load_suite("sort")}
        model = tiny_build._train(other, make_tokenizer(), suites, None)
    wc = {k: v for k, v in model.state_dict().items() if k in wa}
    assert wc.keys() == wa.keys() and any(not torch.equal(wa[k], wc[k]) for k in wa)
    report = json.loads((a / "warmup_report.json").read_text())
    assert report["recipe_hash"] == MICRO.hash() and set(report["sort"]) == {"sort-k0"}


def test_killed_build_leaves_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def killed(*a: Any, **k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny_build, "_evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        build_tiny_model(tmp_path, MICRO)
    final = tiny.tiny_model_dir(tmp_path, MICRO)
    assert not final.exists()
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == []


def test_recipe_hash_tracks_every_field() -> None:
    assert TinyRecipe().hash() == TinyRecipe().hash()
    assert TinyRecipe(lr=1e-3).hash() != TinyRecipe().hash()
    assert TinyRecipe(plain_phrasings=("Add:",)).hash() != TinyRecipe().hash()
    with pytest.raises(ValueError):
        TinyRecipe(stepz=3)  # type: ignore[call-arg]


def test_tokenizer_is_char_level_with_chat_template(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    make_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "Add the two numbers.\n 12+34=~"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok("é").input_ids[1] == tok.unk_token_id
    assert tok.padding_side == "left" and tok.pad_token == "<pad>" and tok.eos_token == "<eos>"
    chat = [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "1+2="},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "4+5="},
    ]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == "<bos>Add.\n1+2=3\n4+5="


def test_warmup_formats_are_real_harnesses() -> None:
    recipe = TinyRecipe()
    formats = warmup_formats(recipe)
    assert abs(sum(f.weight for f in formats) - 1.0) < 1e-9
    by_name = {f.name: Harness.from_text(f.harness) for f in formats}
    n_chat = sum(1 for w in recipe.chat_k if w > 0)
    assert len(by_name) == 2 * 3 * (len(recipe.text_k) + n_chat) + len(recipe.sort_k)
    rev = by_name["rev-p1-k2"]
    assert rev.spec.answer.reverse and rev.spec.fewshot.k == 2 and "reversed" in rev.spec.instruction
    plain = by_name["plain-p0-k0"]
    assert not plain.spec.answer.reverse and plain.spec.instruction == "Add the two numbers."
    chat = by_name["rev-p0-chat-k4"]
    assert chat.is_chat and chat.spec.fewshot.k == 4 and chat.spec.answer.reverse
    assert {f.suite for f in formats} == {"arith", "sort"}
    assert sum(f.weight for f in formats if f.suite == "sort") == pytest.approx(recipe.sort_share)


def test_the_encoding_flip_a_proposer_writes_is_a_warmup_format() -> None:
    """The reversed p0 instruction is the seed's plus the sentence `mutate` writes for that encoding (documented)."""
    from whale_core.proposers.mutate import describe_encoding, op_answer_encoding
    from whale_core.suites import load_suite

    seed = Harness.from_text(load_suite("arith").seed_harness)
    rev = {f.name: Harness.from_text(f.harness) for f in warmup_formats(TinyRecipe())}["rev-p0-k0"]
    assert rev.spec.instruction == f"{seed.spec.instruction} {describe_encoding(True, 0, '')}"
    spec = yaml.safe_load(seed.text)  # what `mutate` edits

    class Reverse(random.Random):
        def choice(self, seq):  # type: ignore[no-untyped-def,override]
            return "reverse" if "reverse" in seq else super().choice(seq)

    assert op_answer_encoding(spec, Reverse(0))
    assert spec["instruction"] == rev.spec.instruction and spec["answer"]["reverse"] is True


def test_training_sequences_label_every_answer() -> None:
    from whale_core.suites import load_suite

    arith = load_suite("arith")
    tok = make_tokenizer()
    h = Harness.from_text(arith.seed_harness).evolve(fewshot={"k": 2}, answer={"reverse": True})
    p, d1, d2 = arith.problems("train")[:3]
    ids, labels = warmup.sequence(h, p, [d1, d2], tok)
    text = h.render(p, [d1, d2]) + p.answer[::-1]
    assert ids == [*tok(text).input_ids, tok.eos_token_id]
    labelled = "".join(tok.convert_ids_to_tokens(t) if t >= 0 else "_" for t in labels)
    expected = "".join(
        "_" * (len(h.render(q, [])) + (1 if i == 0 else 0)) + q.answer[::-1] + ("\n" if i < 2 else "<eos>")
        for i, q in enumerate([d1, d2, p])
    )
    assert labelled == expected
    chat = h.evolve(messages=warmup.CHAT_MESSAGES)
    ids, labels = warmup.sequence(chat, p, [d1, d2], tok)
    assert tok.decode(ids).startswith("<bos>Add the two numbers.\n")
    assert sum(t >= 0 for t in labels) == sum(len(q.answer) + 1 for q in (d1, d2, p))


def test_training_never_draws_held_out_problems() -> None:
    import random

    from whale_core.suites import load_suite

    recipe = TinyRecipe(eval_n=50, eval_digits_n=20, digit_weights={2: 1.0})
    suites = {"arith": load_suite("arith"), "sort": load_suite("sort")}
    exclude = tiny_build._exclusions(recipe, suites)
    val_ids = {p.id for p in suites["arith"].problems("val")}
    assert val_ids <= exclude and {p.id for p in tiny_build._eval_problems(recipe, 2)} <= exclude
    assert len(tiny_build._eval_problems(recipe, 2)) == 20 and len(tiny_build._eval_problems(TinyRecipe(), 1)) == 100
    # with every 2-digit pair but one excluded, every drawn problem is that one
    keep = "arith:10+10"
    everything = frozenset(f"arith:{a}+{b}" for a in range(10, 100) for b in range(10, 100)) - {keep}
    fmt = [f for f in warmup_formats(recipe) if f.name == "plain-p0-k0"]
    h = [Harness.from_text(fmt[0].harness)]
    tok = make_tokenizer()
    seqs = warmup.examples(recipe, fmt, h, suites, tok, random.Random(0), 5, everything)
    assert {tok.decode(ids, skip_special_tokens=True) for ids, _ in seqs} == {"Add the two numbers.\n10+10=20"}
