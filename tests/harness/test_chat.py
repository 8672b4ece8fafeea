"""Chat harnesses on a real chat template (`small_llama_dir`: SmolLM2's template and special tokens, pad == eos):
the exact token ids a rollout feeds the model, demos as user/assistant turns, the reply prefix, left padding."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from whale_core.harness import Harness, HarnessError, RenderError
from whale_core.harness import chat as _chat
from whale_core.rollout import rollout
from whale_core.suites.arith import ArithSuite
from whale_core.suites.base import Problem

CHAT = r"""
whale_harness: 1
name: chat-sum
instruction: Add the two numbers. Reply with the number only.
messages:
  - {role: user, content: "{{ instruction }}\n{{ a }}+{{ b }}="}
fewshot: {k: 3, select: first}
decoding: {max_new_tokens: 6, stop: ["\n"]}
"""

PREFIX = r"""
whale_harness: 1
name: chat-prefix
instruction: Add the two numbers.
messages:
  - {role: system, content: "{{ instruction }}"}
  - {role: user, content: "{{ a }}+{{ b }}"}
  - {role: assistant, content: "{{ a }}+{{ b }}="}
fewshot: {k: 2, select: first}
decoding: {max_new_tokens: 6, stop: ["\n"]}
"""

POOL = [Problem(f"p{i}", {"a": str(i), "b": str(3 * i)}, str(4 * i)) for i in range(1, 9)]
PROBLEM = Problem("q", {"a": "12", "b": "35"}, "47")


@pytest.fixture(scope="module")
def policy(small_llama_dir: Path):  # type: ignore[no-untyped-def]
    from whale_core.models.policy import load_policy

    return load_policy(small_llama_dir, device="cpu")


def _render_ids(h: Harness, tok, problem: Problem = PROBLEM) -> tuple[str, list[int]]:  # type: ignore[no-untyped-def]
    text = h.render(problem, h.select_demos(problem, POOL, seed=0), tokenizer=tok)
    return text, _chat.prompt_ids(tok, [text], chat=True)[0]


def test_demos_are_user_assistant_turns_and_the_generation_prompt_is_last(policy) -> None:  # type: ignore[no-untyped-def]
    h = Harness.from_text(CHAT)
    msgs = _chat.chat_messages(
        [(m.role, m.content) for m in h.spec.messages or []], h.spec.instruction, PROBLEM, POOL[:3], h.encode_answer
    )
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 3 + ["user"]
    assert [m["content"] for m in msgs[1::2]] == ["4", "8", "12"]
    assert msgs[0]["content"] == "Add the two numbers. Reply with the number only.\n1+3="
    assert msgs[-1]["content"].endswith("\n12+35=")
    text, _ = _render_ids(h, policy.tokenizer)
    turns = text.split("<|im_start|>")[1:]
    roles = [t.split("\n", 1)[0] for t in turns]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "<|im_start|>assistant\n4<|im_end|>\n" in text
    assert text.endswith("12+35=<|im_end|>\n<|im_start|>assistant\n")


def test_token_ids_have_one_bos_where_the_template_puts_it(policy) -> None:  # type: ignore[no-untyped-def]
    tok = policy.tokenizer
    assert tok.bos_token == "<|im_start|>" and tok.pad_token_id == tok.eos_token_id
    h = Harness.from_text(CHAT)
    text, ids = _render_ids(h, tok)
    demos = h.select_demos(PROBLEM, POOL, seed=0)
    msgs = _chat.chat_messages([(m.role, m.content) for m in h.spec.messages or []], h.spec.instruction, PROBLEM,
                               demos, h.encode_answer)  # fmt: skip
    reference = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)
    assert ids == list(reference["input_ids"])  # exactly the template's own tokenization
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id
    assert ids.count(tok.bos_token_id) == text.count("<|im_start|>") == 2 + 2 * len(demos) + 1
    # what the rollout feeds the model: the same ids (its prompt_tokens count them)
    res = rollout(policy, h, ArithSuite(seed=0, sizes={"train": 8, "val": 8, "test": 8}), [PROBLEM], demo_pool=POOL)
    assert res.traces[0].prompt == text and res.traces[0].prompt_tokens == len(ids)


def test_prompt_ids_refuse_a_doubled_bos(policy) -> None:  # type: ignore[no-untyped-def]
    tok = policy.tokenizer
    with pytest.raises(RenderError, match="two bos"):
        _chat.prompt_ids(tok, ["<|im_start|><|im_start|>user\nhi<|im_end|>\n"], chat=True)
    # text mode keeps the tokenizer's own special tokens (this one adds none)
    assert _chat.prompt_ids(tok, ["1+2="], chat=False) == [tok("1+2=").input_ids]


def test_reply_prefix_is_continued_and_opens_each_demo_answer(policy) -> None:  # type: ignore[no-untyped-def]
    h = Harness.from_text(PREFIX)
    text, ids = _render_ids(h, policy.tokenizer)
    assert text == (
        "<|im_start|>system\nAdd the two numbers.<|im_end|>\n"
        "<|im_start|>user\n1+3<|im_end|>\n<|im_start|>assistant\n1+3=4<|im_end|>\n"
        "<|im_start|>user\n2+6<|im_end|>\n<|im_start|>assistant\n2+6=8<|im_end|>\n"
        "<|im_start|>user\n12+35<|im_end|>\n<|im_start|>assistant\n12+35="
    )
    assert ids[-1] != policy.tokenizer.eos_token_id


@pytest.mark.parametrize(
    ("messages", "ok"),
    [
        ("[{role: user, content: a}, {role: assistant, content: b}]", True),
        ("[{role: system, content: s}, {role: user, content: a}, {role: assistant, content: b}]", True),
        ("[{role: system, content: s}, {role: assistant, content: b}]", False),
        ("[{role: user, content: a}, {role: assistant, content: b}, {role: assistant, content: c}]", False),
        ("[{role: assistant, content: b}]", False),
    ],
)
def test_a_reply_prefix_must_follow_a_user_message(messages: str, ok: bool) -> None:
    text = f"whale_harness: 1\nmessages: {messages}\n"
    if ok:
        assert Harness.from_text(text).is_chat
    else:
        with pytest.raises(HarnessError) as info:
            Harness.from_text(text)
        assert info.value.field == "messages" and "user" in info.value.problem


def test_left_padded_batches_match_unpadded_single_prompts(policy) -> None:  # type: ignore[no-untyped-def]
    """pad == eos and left padding: in the rollout's batch of prompts of different lengths, each row's next-token
    logits equal those of its prompt generated alone (attention mask and positions respected: without the mask they
    differ by ~1e-2 on this model), and the greedy completions are the same."""
    import torch

    tok, model = policy.tokenizer, policy.model
    real = model.generate
    calls: list[dict] = []  # type: ignore[type-arg]

    def recording(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(kw)
        return real(*args, **kw)

    suite = ArithSuite(seed=0, max_digits=2, sizes={"train": 30, "val": 12, "test": 5})
    h = Harness.from_text(CHAT.replace("select: first", "select: random"))
    problems = list(suite.problems("val"))
    model.generate = recording
    try:
        batched = rollout(policy, h, suite, problems, batch_size=len(problems))
    finally:
        model.generate = real
    assert len(calls) == 1 and len({t.prompt_tokens for t in batched.traces}) > 1  # one batch, really padded
    kw = {**calls[0], "output_scores": True, "return_dict_in_generate": True}
    rows, gcfg = kw["input_ids"], kw["generation_config"]
    with torch.inference_mode():
        padded = real(**kw).scores[0]
        for t in batched.traces:
            ids = torch.tensor([_chat.prompt_ids(tok, [t.prompt], chat=True)[0]])
            width = ids.shape[1]
            r = next(r for r in range(rows.shape[0]) if rows[r, -width:].tolist() == ids[0].tolist())
            alone = real(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gcfg,
                         output_scores=True, return_dict_in_generate=True)  # fmt: skip
            assert torch.allclose(padded[r], alone.scores[0][0], atol=1e-4), t.problem_id
            text = tok.decode(alone.sequences[0, width:], skip_special_tokens=True)
            assert t.completions == [text.split("\n")[0]], t.problem_id


@pytest.mark.parametrize(
    "name", ["smollm2-arith-chat.yaml", "smollm2-arith-chat-prefix.yaml", "smollm2-arith-chat-prose.yaml"]
)
def test_shipped_chat_harness_examples_render_on_a_real_template(name: str, policy) -> None:  # type: ignore[no-untyped-def]
    h = Harness.from_file(Path(__file__).resolve().parents[2] / "docs" / "harnesses" / name)
    text, ids = _render_ids(h, policy.tokenizer)
    assert h.is_chat and ids[0] == policy.tokenizer.bos_token_id and "12+35" in text
    assert text.count("<|im_start|>assistant\n") == h.spec.fewshot.k + 1
    if h.spec.messages and h.spec.messages[-1].role == "assistant":
        assert text.endswith("<|im_start|>assistant\n12+35=")
        demos = re.findall(r"assistant\n(\d+)\+(\d+)=(\d+)<\|im_end\|>", text)
        assert len(demos) == h.spec.fewshot.k and all(int(a) + int(b) == int(c) for a, b, c in demos)
    else:
        assert text.endswith("<|im_start|>assistant\n")
