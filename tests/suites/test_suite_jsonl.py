"""The `jsonl` suite: the real GSM8K sample, splits of tiny files, matching, errors with line numbers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from whale_core.suites import SPLITS, Problem, SuiteConfig, SuiteError, load_suite
from whale_core.suites.jsonl import JsonlSuite, SplitFractions, split_counts, to_number

GSM8K = str(Path(__file__).resolve().parents[1] / "data" / "gsm8k-sample.jsonl")


def _write(tmp_path: Path, lines: list[str], name: str = "data.jsonl") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_gsm8k_sample() -> None:
    suite = load_suite(SuiteConfig(name="jsonl", path=GSM8K, seed=0))
    splits = {s: suite.problems(s) for s in SPLITS}
    assert sum(len(v) for v in splits.values()) == 14
    assert all(len(v) >= 1 for v in splits.values())
    ids = [p.id for v in splits.values() for p in v]
    assert len(set(ids)) == 14
    by_id = {p.id: p for v in splits.values() for p in v}
    first = json.loads(Path(GSM8K).read_text().splitlines()[0])
    assert by_id["line-1"].answer == "18" and by_id["line-1"].fields == {"question": first["question"]}
    assert by_id["line-3"].answer == "70000"
    assert isinstance(suite, JsonlSuite) and suite.match == "numeric"
    assert suite.score("$70,000", by_id["line-3"]) == 1.0
    assert suite.score("18.0", by_id["line-1"]) == 1.0
    assert suite.score("18.5", by_id["line-1"]) == 0.0
    assert suite.score(None, by_id["line-1"]) == 0.0
    assert suite.score("eighteen", by_id["line-1"]) == 0.0
    assert "gsm8k-sample.jsonl" in suite.description and "`question`" in suite.description
    assert not any(f" {p.answer} " in f" {suite.description} " for p in by_id.values())
    assert "{{ question }}" in suite.seed_harness and "Answer:" in suite.seed_harness
    # deterministic per seed; another seed shuffles differently
    again = load_suite(SuiteConfig(name="jsonl", path=GSM8K, seed=0))
    other = load_suite(SuiteConfig(name="jsonl", path=GSM8K, seed=1))
    assert [p.id for p in again.problems("train")] == [p.id for p in splits["train"]]
    assert [p.id for p in other.problems("train")] != [p.id for p in splits["train"]]


def test_split_counts_keep_every_split_non_empty() -> None:
    default = SplitFractions()
    assert split_counts(3, default) == {"train": 1, "val": 1, "test": 1}
    assert split_counts(14, default) == {"train": 8, "val": 3, "test": 3}
    skewed = SplitFractions(train=1, val=5, test=5)
    for n in range(3, 30):
        counts = split_counts(n, skewed)
        assert sum(counts.values()) == n and min(counts.values()) >= 1
    with pytest.raises(SuiteError, match="at least 3"):
        split_counts(2, default)


def test_options_exact_match_fields_and_sizes_cap(tmp_path: Path) -> None:
    rows = [{"q": f"capital {i}", "ctx": "geo", "label": f"City {i}", "junk": i} for i in range(10)]
    path = _write(tmp_path, [json.dumps(r) for r in rows])
    cfg = SuiteConfig.model_validate(
        {
            "name": "jsonl",
            "path": path,
            "sizes": {"train": 2, "val": 100, "test": 100},
            "options": {"question_fields": ["q", "ctx"], "answer_field": "label", "fractions": {"train": 1}},
        }
    )
    suite = load_suite(cfg)
    assert isinstance(suite, JsonlSuite) and suite.match == "exact"
    assert len(suite.problems("train")) == 2
    p = suite.problems("val")[0]
    assert set(p.fields) == {"q", "ctx"}
    assert suite.score("  " + p.answer.replace(" ", "   "), p) == 1.0
    assert suite.score(p.answer.lower(), p) == 0.0
    assert "q: {{ q }}" in suite.seed_harness and "ctx: {{ ctx }}" in suite.seed_harness


def test_numeric_match_and_to_number() -> None:
    assert to_number("$1,000.0") == to_number("1000")
    assert to_number("42.") == 42 and to_number("-3") == -3 and to_number("50%") == 50
    assert to_number("abc") is None and to_number("1.2.3") is None and to_number(None) is None
    suite = JsonlSuite(GSM8K, match="numeric")
    p = Problem(id="x", fields={}, answer="1,234")
    assert suite.score("1234", p) == 1.0 and suite.score("garbage", p) == 0.0


def test_duplicates_dropped_and_blank_lines_skipped(tmp_path: Path) -> None:
    lines = ['{"question": "a", "answer": "1"}', "", '{"question": "a", "answer": "2"}']
    lines += [f'{{"question": "q{i}", "answer": "{i}"}}' for i in range(3)]
    suite = JsonlSuite(_write(tmp_path, lines))
    problems = [p for s in SPLITS for p in suite.problems(s)]
    assert len(problems) == 4
    assert {p.id for p in problems} == {"line-1", "line-4", "line-5", "line-6"}


@pytest.mark.parametrize(
    ("lines", "pattern"),
    [
        (
            ['{"question": "a", "answer": "1"}', "{not json", '{"question": "b", "answer": "2"}'],
            r"data\.jsonl:2: not valid JSON",
        ),
        (['{"question": "a", "answer": "1"}', "[1, 2]"], r":2: expected a JSON object"),
        (['{"question": "a", "answer": "1"}', '{"question": "b"}'], r":2: missing field\(s\) \['answer'\]"),
        (['{"question": "a", "answer": "1"}', '{"question": "b", "answer": null}'], r":2: field 'answer' must be"),
        (['{"question": "a", "answer": "1"}', '{"question": "b", "answer": "2"}'], r"need[s]? at least 3"),
        ([""], "no problems"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, lines: list[str], pattern: str) -> None:
    with pytest.raises(SuiteError, match=pattern):
        JsonlSuite(_write(tmp_path, lines))


def test_missing_file_and_bad_field_name(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="data file not found"):
        JsonlSuite(tmp_path / "absent.jsonl")
    lines = [f'{{"the question": "q{i}", "answer": "{i}"}}' for i in range(3)]
    with pytest.raises(SuiteError, match="question_fields"):
        JsonlSuite(_write(tmp_path, lines))


def test_invalid_utf8_and_lone_surrogates_name_file_and_line(tmp_path: Path) -> None:
    """Before: a 0xff byte raised UnicodeDecodeError; a ``\\udc80`` JSON escape loaded as a lone surrogate that
    later failed every UTF-8 write (SQLite, traces)."""
    good = [f'{{"question": "q{i} é", "answer": "{i}"}}' for i in range(4)]
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(("\n".join(good[:2]) + "\n").encode() + b'{"question": "\xff", "answer": "9"}\n')
    with pytest.raises(SuiteError, match=r"bytes\.jsonl:3: not valid UTF-8 \(byte 0xff at offset \d+\)"):
        JsonlSuite(str(path))
    lines = [*good[:3], '{"question": "x\\udc80y", "answer": "7"}']
    with pytest.raises(SuiteError, match=r"data\.jsonl:4: a string holds a lone surrogate \(\"\\udc80\"\)"):
        JsonlSuite(_write(tmp_path, lines))
    paired = [*good, '{"question": "\\ud83d\\ude00", "answer": "5"}']  # a valid pair (an emoji) is fine
    suite = JsonlSuite(_write(tmp_path, paired, name="ok.jsonl"))
    assert any(p.fields["question"] == "\U0001f600" for s in ("train", "val", "test") for p in suite.problems(s))


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_data_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path: Path, kind: str) -> None:
    """Issue 30, item 12: a FIFO as ``--data`` hung with no output; ``/dev/zero`` grew to 20.8 GB and was OOM-killed.
    The one rule for a file a user names (`whale_core.user_files`): a regular file, read with a size bound."""
    path = {"fifo": tmp_path / "pipe.jsonl", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(SuiteError, match=r"is a (FIFO|character device|directory), not a regular file"):
        load_suite(SuiteConfig(name="jsonl", path=str(path)))


def test_a_data_file_over_the_bound_is_refused_after_reading_the_bound(tmp_path: Path, monkeypatch: Any) -> None:
    import whale_core.suites.jsonl as jsonl

    big = tmp_path / "big.jsonl"
    big.write_text('{"q": "1+1", "answer": "2"}\n' * 100)
    monkeypatch.setattr(jsonl, "MAX_DATA_BYTES", 1000)
    with pytest.raises(SuiteError, match="is larger than 1,000 bytes"):
        load_suite(SuiteConfig(name="jsonl", path=str(big)))
