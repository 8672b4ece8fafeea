"""Suite config and loading: built-ins, dotted-path user suites, and errors that name the offending key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from whale_core.suites import BUILTIN_SUITES, Problem, Split, Suite, SuiteConfig, SuiteError, load_suite


class ParitySuite:
    """A user suite defined in a test module: is n even? Loaded by dotted path."""

    def __init__(self, seed: int, sizes: Mapping[str, int], flip: bool = False) -> None:
        self.name = "parity"
        self.description = "Say whether the number n is even (yes) or odd (no)."
        self.seed_harness = "whale_harness: 1\nname: parity\ntemplate: '{{ n }}?'\n"
        self.seed, self.sizes, self.flip = seed, dict(sizes), flip

    def problems(self, split: Split) -> Sequence[Problem]:
        offset = {"train": 0, "val": 10_000, "test": 20_000}[split] + self.seed
        return [
            Problem(id=str(n), fields={"n": str(n)}, answer="yes" if (n % 2 == 0) != self.flip else "no")
            for n in range(offset, offset + self.sizes[split])
        ]

    def score(self, answer: str | None, problem: Problem) -> float:
        return float(answer == problem.answer)


class NotASuite:
    def __init__(self, **kwargs: Any) -> None:
        self.name = "half"


def test_builtins_load_by_name_and_satisfy_protocol() -> None:
    small = {"train": 5, "val": 5, "test": 5}
    for name in ("arith", "sort"):
        suite = load_suite(SuiteConfig.model_validate({"name": name, "sizes": small}))
        assert isinstance(suite, Suite) and suite.name == name
        assert len(suite.problems("val")) == 5
    assert set(BUILTIN_SUITES) == {"arith", "sort", "jsonl"}
    assert load_suite("arith").name == "arith"


@pytest.mark.parametrize("sep", [":", "."])
def test_user_suite_by_dotted_path(sep: str) -> None:
    cfg = SuiteConfig.model_validate(
        {
            "name": f"{__name__}{sep}ParitySuite",
            "seed": 3,
            "sizes": {"train": 4, "val": 2, "test": 2},
            "options": {"flip": True},
        }
    )
    suite = load_suite(cfg)
    assert isinstance(suite, ParitySuite) and suite.flip and suite.seed == 3
    assert [p.id for p in suite.problems("train")] == ["3", "4", "5", "6"]
    assert suite.problems("train")[0].answer == "yes"  # 3 is odd, flipped


def test_user_suite_gets_default_sizes() -> None:
    suite = load_suite(f"{__name__}:ParitySuite")
    assert len(suite.problems("test")) == 500


def test_user_suite_errors() -> None:
    with pytest.raises(SuiteError, match=r"does not satisfy the Suite protocol.*description.*problems"):
        load_suite(f"{__name__}:NotASuite")
    with pytest.raises(SuiteError, match=r"constructor must accept.*'colour'"):
        load_suite(SuiteConfig(name=f"{__name__}:ParitySuite", options={"colour": 1}))
    with pytest.raises(SuiteError, match=r"cannot import module 'no_such_pkg_xyz\.mod'"):
        load_suite("no_such_pkg_xyz.mod:Cls")
    with pytest.raises(SuiteError, match="has no attribute 'Missing'"):
        load_suite(f"{__name__}:Missing")


def test_unknown_name_lists_builtins_and_forms() -> None:
    with pytest.raises(SuiteError) as err:
        load_suite("arithmetic")
    msg = str(err.value)
    assert "'arithmetic'" in msg and "arith, sort, jsonl" in msg and "pkg.module:Class" in msg and "jsonl" in msg


def test_config_errors_name_the_key() -> None:
    with pytest.raises(SuiteError, match=r"unknown option 'max_digit'.*valid options: digit_weights, max_digits"):
        load_suite(SuiteConfig(name="arith", options={"max_digit": 3}))
    with pytest.raises(SuiteError, match=r"max_digits \(2\) must be >= min_digits \(4\)"):
        load_suite(SuiteConfig(name="arith", options={"min_digits": 4, "max_digits": 2}))
    with pytest.raises(
        SuiteError, match=r"option 'min_len'.*valid options: max_len, max_value, min_len, partial_credit"
    ):
        load_suite(SuiteConfig(name="sort", options={"min_len": "many"}))
    with pytest.raises(SuiteError, match=r"unknown option 'fractions\.trian'"):
        load_suite(SuiteConfig(name="jsonl", path="x.jsonl", options={"fractions": {"trian": 1}}))
    with pytest.raises(SuiteError, match="'path' is required"):
        load_suite("jsonl")
    with pytest.raises(SuiteError, match="'path' is only used by the 'jsonl' suite"):
        load_suite(SuiteConfig(name="arith", path="x.jsonl"))
    with pytest.raises(ValidationError, match="sise"):
        SuiteConfig.model_validate({"name": "arith", "sise": 3})
    with pytest.raises(ValidationError, match=r"sizes\.trian"):
        SuiteConfig.model_validate({"sizes": {"trian": 3}})
