"""Harness text: validation errors name the field, canonical text and sha, parent pointer, evolve, pickling."""

from __future__ import annotations

import pickle

import pytest

from whale_core.harness import AnswerParseError, Harness, HarnessError, sha256_text

PLAIN = r"""
whale_harness: 1
name: plain-sum
instruction: Add the two numbers.
template: "{{ instruction }}\n{{ a }}+{{ b }}="
fewshot: {k: 2, select: random, separator: "\n"}
answer: {reverse: false, pad: 0, sep: ""}
parse: [{regex: '^\s*(-?[0-9]+)'}]
decoding: {temperature: 0.0, top_p: 1.0, max_new_tokens: 8, stop: ["\n"]}
inference: {samples: 1, aggregate: majority}
"""

CANONICAL = """whale_harness: 1
name: plain-sum
instruction: Add the two numbers.
template: |-
  {{ instruction }}
  {{ a }}+{{ b }}=
fewshot:
  k: 2
  select: random
  separator: "\\n"
answer:
  reverse: false
  pad: 0
  sep: ''
parse:
- regex: ^\\s*(-?[0-9]+)
decoding:
  temperature: 0.0
  top_p: 1.0
  max_new_tokens: 8
  stop:
  - "\\n"
inference:
  samples: 1
  aggregate: majority
"""

# The same harness written differently: block style, other key order, comments, other quoting, defaults omitted.
PLAIN_REFORMATTED = r"""
# a comment
inference:
  aggregate: "majority"    # default spelled out
decoding:
  stop:
    - "\n"
  max_new_tokens: 8
whale_harness: 1

name: 'plain-sum'
template: |-
  {{ instruction }}
  {{ a }}+{{ b }}=
instruction: "Add the two numbers."
parse:
  - regex: "^\\s*(-?[0-9]+)"
  - reverse: false          # a no-op step
fewshot:
  k: 2
"""


def _err(text: str) -> HarnessError:
    with pytest.raises(HarnessError) as info:
        Harness.from_text(text)
    return info.value


def test_valid_round_trip(tmp_path):
    h = Harness.from_text(PLAIN)
    assert h.text == CANONICAL
    assert h.sha == sha256_text(CANONICAL)
    assert h.name == "plain-sum" and h.parent is None and not h.is_chat
    assert h.spec.fewshot.k == 2 and h.spec.decoding.stop == ["\n"] and h.spec.inference.aggregate == "majority"
    again = Harness.from_text(h.text)
    assert again.text == h.text and again.sha == h.sha and again == h and hash(again) == hash(h)
    path = tmp_path / "h.yaml"
    path.write_text(PLAIN)
    assert Harness.from_file(path).sha == h.sha


def test_minimal_harness_fills_defaults():
    h = Harness.from_text("whale_harness: 1\ntemplate: '{{ q }}'\n")
    s = h.spec
    assert (s.name, s.instruction, s.fewshot.k, s.answer.reverse, s.parse) == ("unnamed", "", 0, False, [])
    assert (s.decoding.temperature, s.decoding.top_p, s.decoding.max_new_tokens, s.decoding.stop) == (0.0, 1.0, 32, [])
    assert (s.inference.samples, s.inference.aggregate) == (1, "majority")
    assert "max_new_tokens: 32" in h.text


def test_error_is_value_error_with_field_and_message():
    e = _err(PLAIN.replace("k: 2", "k: 99"))
    assert isinstance(e, ValueError)
    assert e.field == "fewshot.k"
    assert e.problem == "must be <= 16 (got 99)"
    assert str(e) == "harness field 'fewshot.k': must be <= 16 (got 99)"
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.field, e2.problem, str(e2)) == (e.field, e.problem, str(e))
    p = pickle.loads(pickle.dumps(AnswerParseError("no digits")))
    assert p.reason == "no digits"


BASE = "whale_harness: 1\ntemplate: '{{ a }}'\n"


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        ("a: [", "", "invalid YAML"),
        ("- 1\n- 2\n", "", "mapping"),
        ("just text", "", "mapping"),
        ("x: &a [1]\ny: *a\n", "", "aliases"),
        ("template: x\n", "whale_harness", "required"),
        ("whale_harness: 2\ntemplate: x\n", "whale_harness", "version 2"),
        ("whale_harness: true\ntemplate: x\n", "whale_harness", "integer"),
        (BASE + "colour: red\n", "colour", "valid keys: whale_harness, name, instruction, template"),
        (BASE + "fewshot: {kk: 1}\n", "fewshot.kk", "valid keys: k, select, separator"),
        (BASE + "parse: [{eval: x}]\n", "parse[0].eval", "valid keys: regex, strip, remove"),
        (BASE + "template: b\n", "template", "duplicate key"),
        (BASE + "fewshot: {k: '2'}\n", "fewshot.k", "valid integer"),
        (BASE + "fewshot: {k: -1}\n", "fewshot.k", ">= 0"),
        (BASE + "fewshot: {select: best}\n", "fewshot.select", "'random', 'first' or 'similar'"),
        (BASE + "fewshot: 3\n", "fewshot", "FewShot"),
        (BASE + "answer: {reverse: 1}\n", "answer.reverse", "valid boolean"),
        (BASE + "answer: {pad: 33}\n", "answer.pad", "<= 32"),
        (BASE + "answer: {sep: ' -- '}\n", "answer.sep", "too long"),
        (BASE + "answer: {sep: '0'}\n", "answer.sep", "digits"),
        (BASE + "decoding: {temperature: 2.5}\n", "decoding.temperature", "<= 2.0"),
        (BASE + "decoding: {temperature: hot}\n", "decoding.temperature", "valid number"),
        (BASE + "decoding: {top_p: 0}\n", "decoding.top_p", "> 0.0"),
        (BASE + "decoding: {max_new_tokens: 513}\n", "decoding.max_new_tokens", "<= 512"),
        (BASE + "decoding: {max_new_tokens: 0}\n", "decoding.max_new_tokens", ">= 1"),
        (BASE + "decoding: {stop: [a, b, c, d, e]}\n", "decoding.stop", "too many items: 5 (max 4)"),
        (BASE + "decoding: {stop: ['" + "x" * 17 + "']}\n", "decoding.stop[0]", "too long: 17 chars (max 16)"),
        (BASE + "decoding: {stop: ['']}\n", "decoding.stop[0]", "too short"),
        (BASE + "inference: {samples: 33}\n", "inference.samples", "<= 32"),
        (BASE + "inference: {samples: 0}\n", "inference.samples", ">= 1"),
        (BASE + "inference: {aggregate: mean}\n", "inference.aggregate", "'majority' or 'first'"),
        (BASE + "name: 'has space'\n", "name", "must match"),
        (BASE + "name: " + "n" * 81 + "\n", "name", "too long: 81 chars (max 80)"),
        (BASE + "name: 12\n", "name", "valid string"),
        (BASE + "instruction: " + "i" * 2001 + "\n", "instruction", "too long: 2001 chars (max 2000)"),
        ("whale_harness: 1\ntemplate: " + "t" * 4001 + "\n", "template", "too long: 4001 chars (max 4000)"),
        ("whale_harness: 1\nmessages: [{role: user, content: " + "c" * 4001 + "}]\n", "messages[0].content", "4001"),
        ("whale_harness: 1\nmessages: [{role: robot, content: x}]\n", "messages[0].role", "'system', 'user'"),
        ("whale_harness: 1\nmessages: [{role: user}]\n", "messages[0].content", "required"),
        ("whale_harness: 1\nmessages: []\n", "messages", "too few items"),
        (BASE + "parse: [" + ", ".join(["{strip: true}"] * 33) + "]\n", "parse", "too many items: 33 (max 32)"),
        (BASE + "parse: [{strip: true, lower: true}]\n", "parse[0]", "one-key mapping"),
        (BASE + "parse: [{strip: 5}]\n", "parse[0].strip", "true/false or a string"),
        (BASE + "parse: [{remove: ''}]\n", "parse[0].remove", "too short"),
        (BASE + "parse: [strip]\n", "parse[0]", "ParseStep"),
        (BASE + "parent: nope\n", "parent", "sha256"),
        ("whale_harness: 1\nname: x\n", "template", "exactly one of 'template' or 'messages'"),
        (BASE + "messages: [{role: user, content: x}]\n", "template", "exactly one"),
        ("whale_harness: 1\nmessages: [{role: system, content: a}, {role: assistant, content: b}]", "messages", "last"),
        (
            "whale_harness: 1\nmessages: [{role: user, content: a}, {role: system, content: b},"
            " {role: user, content: c}]\n",
            "messages",
            "system messages may only come first",
        ),
        ("whale_harness: 1\ntemplate: '{{ a '\n", "template", "syntax error"),
    ],
)
def test_invalid_harness_names_the_field(text, field, needle):
    e = _err(text)
    assert e.field == field, str(e)
    assert needle in e.problem, str(e)


def test_oversize_text():
    e = _err(BASE + "# " + "x" * (16 * 1024) + "\n")
    assert e.field == "" and "too large" in e.problem and "16384" in e.problem


SSTI = [
    "{{ ''.__class__ }}",
    "{{ x.__init__ }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ x['__class__'] }}",
    "{{ x|attr('__class__') }}",
    "{{ x.upper() }}",
    "{{ lipsum() }}",
    "{{ range(10**9) }}",
    "{{ 9**9**9 }}",
    "{{ 'a' * 1000000000 }}",
    "{{ '%999999999d' % 1 }}",
    "{{ x|map('upper')|list }}",
    "{{ x|join(attribute='__class__') }}",
    "{% if x is callable %}1{% endif %}",
    "{% import 'os' as os %}",
    "{% from 'x' import y %}",
    "{% include 'secrets.txt' %}",
    "{% extends 'base.html' %}",
    "{% macro m() %}x{% endmacro %}",
    "{% set x %}a{% endset %}",
    "{% filter upper %}a{% endfilter %}",
    "{% with y = 1 %}{{ y }}{% endwith %}",
    "{% block b %}x{% endblock %}",
    "{{ _private }}",
    "{% for a in x %}{% for b in x %}{% for c in x %}.{% endfor %}{% endfor %}{% endfor %}",
    "{% for a in x recursive %}{{ a }}{% endfor %}",
]


@pytest.mark.parametrize("source", SSTI)
def test_unsafe_template_rejected_at_parse_time(source):
    quoted = source.replace("'", "''")
    e = _err(f"whale_harness: 1\ntemplate: '{quoted}'\n")
    assert e.field == "template" and "unsafe template" in e.problem, str(e)
    e = _err(f"whale_harness: 1\nmessages: [{{role: system, content: hi}}, {{role: user, content: '{quoted}'}}]\n")
    assert e.field == "messages[1].content" and "unsafe template" in e.problem, str(e)


@pytest.mark.parametrize(
    "pattern",
    ["(a+)+", "(a*)*", "(.*)*", "(a|aa)+", "(a|a?)+$", "(a.|ab)+", r"(\w+\s?)+$", "(x+x+)+y", r"^(\d+)*$", "((a+)b)*"],
)
def test_catastrophic_regex_rejected(pattern):
    quoted = pattern.replace("'", "''")
    e = _err(f"{BASE}parse: [{{strip: true}}, {{regex: '{quoted}'}}]\n")
    assert e.field == "parse[1].regex", str(e)
    assert "catastrophic" in e.problem


@pytest.mark.parametrize(("pattern", "needle"), [("(", "does not compile"), (r"\p{L}+", "Python's `re` dialect")])
def test_bad_regex_rejected(pattern, needle):
    e = _err(f"{BASE}parse: [{{regex: '{pattern}'}}]\n")
    assert e.field == "parse[0].regex" and needle in e.problem


def test_everyday_regexes_accepted():
    for pattern in [
        r"^\s*(-?[0-9]+)",
        r"(-?\d+)\s*$",
        r"answer is (-?\d+)",
        r"(?:\d{1,3},)*\d+$",
        r"(\d|,)+",
        "(ab|ac)+",
    ]:
        h = Harness.from_text(f"{BASE}parse: [{{regex: '{pattern}'}}]\n")
        assert h.spec.parse[0].step == ("regex", pattern)


def test_formatting_does_not_change_sha():
    assert Harness.from_text(PLAIN_REFORMATTED).sha == Harness.from_text(PLAIN).sha


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Add the two numbers.", "Add the numbers."),
        ("k: 2", "k: 3"),
        ("reverse: false", "reverse: true"),
        ("select: random", "select: first"),
        ("max_new_tokens: 8", "max_new_tokens: 9"),
        ("'^\\s*(-?[0-9]+)'", "'^\\s*([0-9]+)'"),
    ],
)
def test_semantic_edits_change_sha(old, new):
    assert old in PLAIN
    assert Harness.from_text(PLAIN.replace(old, new)).sha != Harness.from_text(PLAIN).sha


def test_parent_is_metadata_not_hashed():
    h = Harness.from_text(PLAIN)
    p = "a" * 64
    child = Harness.from_text(f"parent: {p}\n" + PLAIN)
    assert child.parent == p and child.sha == h.sha and "parent" not in child.text
    assert Harness.from_text(PLAIN, parent="b" * 64).parent == "b" * 64
    assert Harness.from_text(f"parent: {p}\n" + PLAIN, parent="b" * 64).parent == "b" * 64  # argument wins
    back = Harness.from_text(child.document())
    assert back.parent == p and back.sha == h.sha


def test_pickle_and_equality():
    h = Harness.from_text(PLAIN, parent="c" * 64)
    h2 = pickle.loads(pickle.dumps(h))
    assert h2 == h and h2.text == h.text and h2.parent == h.parent and h2.spec == h.spec
    assert len({h, h2, Harness.from_text(PLAIN)}) == 1
    assert h != Harness.from_text(PLAIN.replace("k: 2", "k: 1"))


def test_evolve_sets_parent_merges_and_validates():
    h = Harness.from_text(PLAIN)
    h2 = h.evolve(fewshot={"k": 4}, answer={"reverse": True}, instruction="Sum them.")
    assert h2.parent == h.sha and h2.sha != h.sha
    assert h2.spec.fewshot.k == 4 and h2.spec.fewshot.select == "random"  # merged, not replaced
    assert h2.spec.answer.reverse and h2.spec.instruction == "Sum them."
    assert h2.spec.parse == h.spec.parse
    with pytest.raises(HarnessError) as info:
        h.evolve(fewshot={"k": 99})
    assert info.value.field == "fewshot.k"
    with pytest.raises(HarnessError) as info:
        h.evolve(template="{{ ''.__class__ }}")
    assert info.value.field == "template"
    chat = h.evolve(messages=[{"role": "user", "content": "{{ a }}+{{ b }}="}])
    assert chat.is_chat and chat.spec.template is None
    assert h.evolve(decoding=None).spec.decoding.max_new_tokens == 32  # None restores the default
    assert h.evolve().sha == h.sha


def test_diff():
    h = Harness.from_text(PLAIN)
    d = h.diff(h.evolve(fewshot={"k": 4}))
    assert "-  k: 2\n" in d and "+  k: 4\n" in d and d.startswith("--- plain-sum@")
    assert h.diff(h) == ""


def test_odd_characters_survive_canonical_round_trip():
    odd = "a\x85b\u2028c\rd \n  e\t\n"
    h = Harness.from_text(BASE).evolve(instruction=odd, fewshot={"separator": "\x85\n"})
    again = Harness.from_text(h.text)
    assert again.sha == h.sha and again.spec.instruction == odd and again.spec.fewshot.separator == "\x85\n"


def test_noop_parse_steps_are_dropped():
    a = Harness.from_text(BASE + "parse: [{strip: true}, {reverse: false}, {int: false}]\n")
    b = Harness.from_text(BASE + "parse: [{strip: true}]\n")
    assert a.sha == b.sha and len(a.spec.parse) == 1
