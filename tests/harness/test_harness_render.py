"""Rendering (text and chat modes, sandbox at run time) and few-shot demo selection."""

from __future__ import annotations

import pytest

from whale_core.harness import Harness, HarnessError, RenderError
from whale_core.suites.base import Problem

TEXT = r"""
whale_harness: 1
name: rev-sum
instruction: Add.
template: "{{ instruction }} {{ a }}+{{ b }}="
fewshot: {k: 2, select: first, separator: "\n"}
answer: {reverse: true}
"""

CHAT = r"""
whale_harness: 1
name: chat-sum
instruction: You add numbers.
messages:
  - {role: system, content: "{{ instruction }}"}
  - {role: user, content: "{{ a }}+{{ b }}="}
fewshot: {k: 2, select: first}
answer: {pad: 4}
"""

POOL = [Problem(f"p{i}", {"a": i, "b": 10 * i}, str(11 * i)) for i in range(1, 30)]


class FakeChatTokenizer:
    """Just enough of a tokenizer for chat mode: records its inputs and formats messages."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, str]], bool, bool]] = []

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        self.calls.append((messages, tokenize, add_generation_prompt))
        body = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return body + ("<assistant>" if add_generation_prompt else "")


def test_text_mode_with_demos_exact():
    h = Harness.from_text(TEXT)
    problem = Problem("q", {"a": 12, "b": 34}, "46")
    demos = h.select_demos(problem, POOL, seed=0)
    assert [d.id for d in demos] == ["p1", "p2"]
    assert h.render(problem, demos) == "Add. 1+10=11\nAdd. 2+20=22\nAdd. 12+34="
    demos2 = h.select_demos(POOL[3], POOL, seed=0)  # p4 with first-3 pool: unaffected
    assert h.render(problem, [POOL[5]]) == "Add. 6+60=66\nAdd. 12+34="
    assert h.encode_answer("123") == "321"
    assert [d.id for d in demos2] == ["p1", "p2"]
    assert h.render(problem, []) == "Add. 12+34="


def test_first_skips_the_problem_itself():
    h = Harness.from_text(TEXT)
    assert [d.id for d in h.select_demos(POOL[0], POOL, seed=0)] == ["p2", "p3"]
    assert [d.id for d in h.select_demos(POOL[1], POOL, seed=0)] == ["p1", "p3"]


def test_random_demos_deterministic_and_exclude_problem():
    h = Harness.from_text(TEXT.replace("select: first", "select: random").replace("k: 2", "k: 5"))
    for problem in POOL[:10]:
        a = h.select_demos(problem, POOL, seed=7)
        assert a == h.select_demos(problem, POOL, seed=7)
        assert len(a) == 5 and len({d.id for d in a}) == 5 and problem.id not in {d.id for d in a}
    by_seed = {tuple(d.id for d in h.select_demos(POOL[0], POOL, seed=s)) for s in range(5)}
    by_problem = {tuple(d.id for d in h.select_demos(p, POOL, seed=7)) for p in POOL[:5]}
    assert len(by_seed) > 1 and len(by_problem) > 1
    small = POOL[:3]
    for problem in small:
        got = h.select_demos(problem, small, seed=1)
        assert sorted(d.id for d in got) == sorted(p.id for p in small if p.id != problem.id)


def test_k_zero_gives_no_demos():
    h = Harness.from_text(TEXT.replace("k: 2", "k: 0"))
    assert h.select_demos(POOL[0], POOL, seed=0) == []


def test_missing_field_is_a_clear_render_error():
    h = Harness.from_text(TEXT)
    with pytest.raises(RenderError) as info:
        h.render(Problem("bad-1", {"a": 1}, "1"), [])
    e = info.value
    assert isinstance(e, HarnessError) and e.field == "template"
    assert "'bad-1'" in e.problem and "'b' is undefined" in e.problem and "problem fields: a" in e.problem


def test_runtime_sandbox_filters_and_output_cap():
    h = Harness.from_text(
        "whale_harness: 1\ntemplate: \"{{ xs|join(' ') }}|{{ s|upper|reverse }}|{{ s|length }}|{{ n|default(7) }}\"\n"
    )
    assert h.render(Problem("q", {"xs": [1, 2, 3], "s": "ab", "n": None}, "0"), []) == "1 2 3|BA|2|None"
    loop = Harness.from_text(
        "whale_harness: 1\ntemplate: '{% for a in xs %}{% for b in xs %}{{ s }}{% endfor %}{% endfor %}'\n"
    )
    with pytest.raises(RenderError) as info:
        loop.render(Problem("big", {"xs": list(range(300)), "s": "x" * 10}, "0"), [])
    assert "exceeds" in info.value.problem


def test_chat_mode_with_fake_tokenizer_exact():
    h = Harness.from_text(CHAT)
    tok = FakeChatTokenizer()
    problem = Problem("q", {"a": 5, "b": 6}, "11")
    out = h.render(problem, h.select_demos(problem, POOL, seed=0), tokenizer=tok)
    assert out == (
        "<system>You add numbers.</system>"
        "<user>1+10=</user><assistant>0011</assistant>"
        "<user>2+20=</user><assistant>0022</assistant>"
        "<user>5+6=</user><assistant>"
    )
    assert tok.calls[0][1:] == (False, True)


def test_chat_mode_needs_a_tokenizer():
    h = Harness.from_text(CHAT)
    with pytest.raises(RenderError) as info:
        h.render(Problem("q", {"a": 5, "b": 6}, "11"), [])
    assert info.value.field == "messages" and "tokenizer" in info.value.problem


def test_chat_mode_with_real_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split
    from transformers import PreTrainedTokenizerFast

    chars = list("0123456789+=<>/ abcdefghijklmnopqrstuvwxyzAY.\n")
    vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    core = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = Split("", behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]")
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    h = Harness.from_text(CHAT)
    problem = Problem("q", {"a": 5, "b": 6}, "11")
    out = h.render(problem, [POOL[0]], tokenizer=tok)
    assert out == "<system>You add numbers.\n<user>1+10=\n<assistant>0011\n<user>5+6=\n<assistant>"
    decoded = tok.decode(tok(out)["input_ids"])
    assert isinstance(decoded, str) and decoded.replace(" ", "") == out.replace(" ", "")


def test_similar_demos_share_the_problem_shape_first():
    h = Harness.from_text(TEXT.replace("select: first", "select: similar").replace("k: 2", "k: 3"))
    pool = [Problem(f"q{a}-{b}", {"a": a, "b": b}, str(a + b)) for a in (3, 7, 12, 45, 123, 456) for b in (5, 40, 789)]
    problem = Problem("x", {"a": 61, "b": 22}, "83")  # shape 99|99: the only exact matches are 12+40 and 45+40
    got = h.select_demos(problem, pool, seed=0)
    assert sorted((d.fields["a"], d.fields["b"]) for d in got[:2]) == [(12, 40), (45, 40)]
    third = got[2].fields  # then the nearest total length: 4 digits in all (1 + 3 or 3 + 1 here)
    assert len(str(third["a"])) + len(str(third["b"])) == 4 and got == h.select_demos(problem, pool, seed=0)
    same = pool[4]  # a pool problem never gets itself as a demo
    assert same.id not in {d.id for d in h.select_demos(same, pool, seed=0)}


def test_prefix_follows_the_rendered_prompt_in_both_modes_and_only_when_set_enters_the_text() -> None:
    h = Harness.from_text(TEXT)
    with_prefix = h.evolve(prefix=" The answer is")
    problem = Problem("q", {"a": 12, "b": 34}, "46")
    assert with_prefix.render(problem, []) == "Add. 12+34= The answer is"
    assert "prefix" not in h.text and "prefix: ' The answer is'" in with_prefix.text
    assert Harness.from_text(with_prefix.text).sha == with_prefix.sha != h.sha
    assert with_prefix.evolve(prefix="").sha == h.sha  # a harness without a prefix keeps its old text and sha
    chat = Harness.from_text(CHAT).evolve(prefix="Result:")
    out = chat.render(Problem("q", {"a": 5, "b": 6}, "11"), [], tokenizer=FakeChatTokenizer())
    assert out.endswith("<user>5+6=</user><assistant>Result:")
    with pytest.raises(HarnessError) as info:
        h.evolve(prefix="x" * 201)
    assert "prefix" in str(info.value)
