"""The harness-gap benchmark's tasks (benchmarks/gap_tasks): the data is deterministic and distinct, each reference
harness is a valid harness for its suite that renders every problem and differs from the seed, and the benchmark's
command line refuses an unknown task by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from whale_core.harness import Harness
from whale_core.suites import SuiteConfig, load_suite

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gap_tasks.tasks import GENERATORS, tasks, write_jsonl  # noqa: E402


def test_generated_data_is_deterministic_and_distinct(tmp_path: Path) -> None:
    for name in GENERATORS:
        a = write_jsonl(name, tmp_path / "a" / f"{name}.jsonl").read_text()
        b = write_jsonl(name, tmp_path / "b" / f"{name}.jsonl").read_text()
        assert a == b
        lines = a.splitlines()
        assert len(lines) >= 500 and len(set(lines)) == len(lines), name


def test_each_reference_harness_is_valid_renders_and_is_a_change(tmp_path: Path) -> None:
    found = tasks(tmp_path)
    assert [t.name for t in found] == ["sequence", "unit", "choice", "letter", "arith"]
    for task in found:
        suite = load_suite(
            SuiteConfig(name=task.suite, options=task.options, path=str(task.data) if task.data else None, seed=0)
        )
        seed = Harness.from_text(suite.seed_harness)
        reference = Harness.from_file(task.reference)
        assert reference.sha != seed.sha, task.name
        for split in ("val", "test"):
            problems = list(suite.problems(split))
            assert len(problems) >= 100, (task.name, split)
            for p in problems[:20]:
                assert reference.render(p, list(suite.problems("train"))[:4] if reference.spec.fewshot.k else [])


def test_an_unknown_task_is_refused_by_name(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "harness_gap.py"), "--tasks", "sequence,sorting",
         "--data-dir", str(tmp_path), "--out", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "unknown task(s) sorting" in proc.stderr and "sequence, unit, letter, choice, arith" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()
