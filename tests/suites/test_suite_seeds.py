"""Every built-in suite's seed harness parses, renders one of its problems, and reads back a gold answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from whale_core.harness import AnswerParseError, Harness
from whale_core.suites import SuiteConfig, load_suite

SMALL = {"train": 20, "val": 5, "test": 5}
GSM8K = str(Path(__file__).resolve().parents[1] / "data" / "gsm8k-sample.jsonl")


def _configs(tmp_path: Path) -> list[SuiteConfig]:
    exact = tmp_path / "capitals.jsonl"
    exact.write_text("\n".join(f'{{"country": "C{i}", "hint": "h", "answer": "City {i}"}}' for i in range(6)) + "\n")
    return [
        SuiteConfig.model_validate({"name": "arith", "sizes": SMALL}),
        SuiteConfig.model_validate({"name": "sort", "sizes": SMALL}),
        SuiteConfig(name="jsonl", path=GSM8K),
        SuiteConfig(name="jsonl", path=str(exact)),
    ]


@pytest.mark.parametrize("index", range(4))
def test_seed_harness_parses_and_renders(tmp_path: Path, index: int) -> None:
    suite = load_suite(_configs(tmp_path)[index])
    harness = Harness.from_text(suite.seed_harness)
    for problem in suite.problems("val"):
        demos = harness.select_demos(problem, suite.problems("train"), seed=0)
        prompt = harness.render(problem, demos)
        assert all(str(v) in prompt for v in problem.fields.values())
        # the seed's parse pipeline reads back a gold answer written in the seed's format
        completion = harness.encode_answer(problem.answer) + "\nnext line"
        assert suite.score(harness.parse_answer(completion), problem) == 1.0
        try:
            garbage: str | None = harness.parse_answer("no answer here")
        except AnswerParseError:
            garbage = None  # what a rollout scores when parsing fails
        assert suite.score(garbage, problem) == 0.0


def test_arith_seed_is_plain_greedy_short() -> None:
    spec = Harness.from_text(load_suite("arith").seed_harness).spec
    assert spec.answer.reverse is False
    assert spec.decoding.temperature == 0.0 and spec.decoding.max_new_tokens == 8 and spec.decoding.stop == ["\n"]
    assert spec.fewshot.k == 0 and spec.inference.samples == 1
