"""Answer encoding and the parse pipeline, including time-limited regexes."""

from __future__ import annotations

import pytest

from whale_core.harness import AnswerParseError, Harness, regexes
from whale_core.harness import parse as hparse
from whale_core.suites.base import Problem


def _h(answer: str = "{}", parse: str = "[]", stop: str = "[]") -> Harness:
    return Harness.from_text(
        f"whale_harness: 1\ntemplate: 'x'\nanswer: {answer}\nparse: {parse}\ndecoding: {{stop: {stop}}}\n"
    )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("pad", [0, 5])
@pytest.mark.parametrize("sep", ["", ",", " "])
def test_encode_parse_round_trip(reverse, pad, sep):
    h = _h(answer=f"{{reverse: {str(reverse).lower()}, pad: {pad}, sep: '{sep}'}}")
    for gold in ["0", "7", "42", "-42", "1200", "-1005", "100000"]:
        written = h.encode_answer(gold)
        assert written.startswith("-") == gold.startswith("-")
        assert h.parse_answer(written + "\n") == gold, (gold, written)


def test_encoding_examples():
    assert _h("{reverse: true, pad: 4, sep: ','}").encode_answer("-42") == "-2,4,0,0"
    assert _h("{pad: 4}").encode_answer("42") == "0042"
    assert _h("{sep: ' '}").encode_answer("123") == "1 2 3"
    assert _h("{reverse: true}").encode_answer("120") == "021"
    assert _h("{pad: 3}").parse_answer("000") == "0"
    assert _h("{pad: 4}").parse_answer("00.5") == "0.5"
    assert _h().parse_answer("007") == "007"  # no padding: leading zeros are part of the answer


def test_stop_and_regex_pipeline():
    h = _h("{reverse: true}", r"[{regex: '^\s*(-?[0-9]+)'}]", r'["\n", "=="]')
    assert h.parse_answer(" 975\n123") == "579"
    assert h.parse_answer("-21==99\n") == "-12"
    with pytest.raises(AnswerParseError) as info:
        h.parse_answer("\n975")  # cut at the stop first: nothing left
    assert "no match" in info.value.reason
    assert _h(parse=r"[{regex: '[0-9]+'}]").parse_answer("ab 12 cd 34") == "12"  # no group: the whole match


@pytest.mark.parametrize(
    ("parse", "completion", "expected"),
    [
        ("[{strip: true}]", "  12 ", "12"),
        ("[{strip: '#*'}]", "**12##", "12"),
        ("[{remove: ' '}]", "1 2 3", "123"),
        ("[{reverse: true}]", "123", "321"),
        ("[{lower: true}]", "AbC", "abc"),
        ("[{upper: true}]", "AbC", "ABC"),
        ("[{first_line: true}]", "\n\n first\nsecond\n", "first"),
        ("[{last_line: true}]", "first\nlast\n\n", "last"),
        ("[{int: true}]", " +0001,234_567 ", "1234567"),
        ("[{int: true}]", "-007", "-7"),
        ("[{int: true}]", "-0", "0"),
        ("[{last_line: true}, {regex: '= *(\\S+)'}, {int: true}]", "work\n3+4 = 0,007", "7"),
    ],
)
def test_parse_steps(parse, completion, expected):
    assert _h(parse=parse).parse_answer(completion) == expected


@pytest.mark.parametrize(
    ("parse", "completion", "needle"),
    [
        ("[]", "   \n ", "empty"),
        ("[{int: true}]", "12a", "not an integer"),
        ("[{int: true}]", "-", "not an integer"),
        ("[{first_line: true}]", "\n \n", "no non-blank line"),
        ("[{regex: 'x(y)?'}]", "x", "first group is empty"),
        ("[{remove: '1'}]", "111", "empty"),
    ],
)
def test_parse_failures(parse, completion, needle):
    with pytest.raises(AnswerParseError) as info:
        _h(parse=parse).parse_answer(completion)
    assert needle in info.value.reason


def test_regex_timeout_at_run_time_is_a_parse_error():
    # This pattern is rejected at validation; here it is run directly to show the run-time guard does not hang.
    evil = "(a|aa)+$"
    with pytest.raises(AnswerParseError) as info:
        hparse.parse_completion("a" * 64 + "!", [("regex", evil)], [], False, 0, "", timeout=0.05)
    assert "timed out" in info.value.reason and info.value.reason.startswith("parse[0]")


def test_probe_catches_slow_regex_the_static_check_misses(monkeypatch):
    monkeypatch.setattr(regexes, "_static_problem", lambda items, inside_large: None)
    problem = regexes.check_pattern("(a|aa)+$")
    assert problem is not None and "too slow" in problem
    assert regexes.check_pattern(r"^\s*(-?[0-9]+)") is None


# ------------------------------------------------------------------------- number / after steps (issue 35's parses)
SEQ = Problem("s", {"question": "What number comes next? 16, 17, 18, 19, ?"}, "20")


@pytest.mark.parametrize(
    ("parse", "completion", "expected"),
    [
        ("[{number: first}]", " 16, 17, 18, 19, 20, 21", "16"),
        ("[{number: last}]", " so it is 7, no: 9.5\n", "9.5"),
        ("[{number: new}]", " 16, 17, 18, 19, 20, 21", "20"),  # the echo of the question skipped
        ("[{number: new}]", " -19 then 22", "-19"),  # '-19' is not what the problem wrote ('19')
        ("[{after: 'answer is'}, {number: first}]", " 3 + 4, so the answer is 7 (not 3)", "7"),
        ("[{after: '='}]", "2+2 = 4", "4"),
    ],
)
def test_number_and_after_steps(parse: str, completion: str, expected: str) -> None:
    assert _h(parse=parse).parse_answer(completion, SEQ) == expected


def test_number_new_without_a_problem_skips_nothing_and_never_reads_the_answer() -> None:
    h = _h(parse="[{number: new}]")
    assert h.parse_answer(" 16, 17, 20") == "16"
    blind = Problem("s", SEQ.fields, "withheld")
    assert h.parse_answer(" 16, 17, 18, 19, 20", blind) == h.parse_answer(" 16, 17, 18, 19, 20", SEQ) == "20"


@pytest.mark.parametrize(
    ("parse", "completion", "needle"),
    [
        ("[{number: new}]", " 16, 17, 18", "no number that is not in the problem"),
        ("[{number: last}]", " none here", "number: no number"),
        ("[{after: 'answer is'}]", " 7", "'answer is' is not in"),
    ],
)
def test_number_and_after_failures(parse: str, completion: str, needle: str) -> None:
    with pytest.raises(AnswerParseError) as info:
        _h(parse=parse).parse_answer(completion, SEQ)
    assert needle in str(info.value)


@pytest.mark.parametrize("step", ["{number: middle}", "{number: 1}", "{after: ''}", f"{{after: '{'x' * 33}'}}"])
def test_bad_number_and_after_steps_name_the_field(step: str) -> None:
    from whale_core.harness import HarnessError

    with pytest.raises(HarnessError) as info:
        _h(parse=f"[{step}]")
    assert "parse" in str(info.value)
