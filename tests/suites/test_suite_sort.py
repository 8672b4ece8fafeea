"""The `sort` suite: determinism, disjoint splits, sizes, scoring (exact and partial credit)."""

from __future__ import annotations

from whale_core.suites import SPLITS, SuiteConfig, load_suite

SMALL = {"train": 150, "val": 30, "test": 40}


def _suite(seed: int = 0, **options: object):  # type: ignore[no-untyped-def]
    return load_suite(SuiteConfig.model_validate({"name": "sort", "seed": seed, "sizes": SMALL, "options": options}))


def test_determinism_sizes_disjoint_and_answers() -> None:
    a, b, c = _suite(1), _suite(1), _suite(2)
    seen: dict[str, set[str]] = {}
    for split in SPLITS:
        problems = a.problems(split)
        assert len(problems) == SMALL[split]
        assert list(problems) == list(b.problems(split))
        assert [p.id for p in problems] != [p.id for p in c.problems(split)]
        seen[split] = {p.fields["items"] for p in problems}
        assert len(seen[split]) == SMALL[split]
        for p in problems:
            items = [int(x) for x in p.fields["items"].split()]
            assert 3 <= len(items) <= 7 and all(0 <= x <= 9 for x in items)
            assert p.answer == " ".join(map(str, sorted(items)))
    assert not seen["train"] & seen["val"] and not seen["train"] & seen["test"] and not seen["val"] & seen["test"]


def test_score_exact_with_whitespace_normalization() -> None:
    suite = _suite()
    p = suite.problems("val")[0]
    assert suite.score(p.answer, p) == 1.0
    assert suite.score("  " + p.answer.replace(" ", "  ") + "\n", p) == 1.0
    assert suite.score(p.answer.replace(" ", ", "), p) == 1.0
    assert suite.score(p.fields["items"] + " 9", p) == 0.0
    assert suite.score(None, p) == 0.0
    assert suite.score("", p) == 0.0
    assert suite.score("a b c ~~ 1.5", p) == 0.0


def test_partial_credit_option() -> None:
    suite = _suite(partial_credit=True)
    from whale_core.suites import Problem

    p = Problem(id="x", fields={"items": "3 1 2 2"}, answer="1 2 2 3")
    assert suite.score("1 2 2 3", p) == 1.0
    assert suite.score("1 2 3 2", p) == 0.5
    assert suite.score("1 2", p) == 0.5
    assert suite.score("1 2 2 3 3 3 3 3", p) == 0.5
    assert suite.score("x y", p) == 0.0
    assert suite.score(None, p) == 0.0
    assert "fraction of positions" in suite.description
    assert _suite().score("1 2 3 2", p) == 0.0


def test_huge_garbage_scores_zero_without_raising() -> None:
    suite = _suite(partial_credit=True)
    p = suite.problems("test")[0]
    assert suite.score("9" * 5000, p) == 0.0
    assert suite.score("0" * 5000 + " " + "1" * 5000, p) < 1.0
