"""SIGTERM and SIGINT at the points of the kill matrix (issue 30): a run stopped by ``kill PID`` or a terminal's Ctrl-C
at a point where a crash loses work prints one line and exits (143 or 130) without a traceback, keeps what it
finished, and resumes to the end without a duplicate record: one done leg per iteration, each decision once, one
MLflow run per leg.

One chain through one run, as in tests/flows/test_faults.py (the ``WHALE_FAULT`` hook, ``<point>[:<n>]@<signal>``):
stopped by SIGTERM while scoring candidates, by SIGINT (to its process group) right after the first TRL checkpoint of
its weights leg, by SIGTERM in its final test evaluation; the last resume finishes.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from flow_helpers import REPO, make_home, mlflow_run_keys, whale
from test_faults import _sets

from whale_core.records.archive import Archive

pytestmark = pytest.mark.slow

CHAIN = [("score-harness:2@TERM", 143), ("grpo-update-after-checkpoint@INT", 130), ("rollout-test:2@TERM", 143)]


def test_sigterm_and_sigint_at_the_kill_points_stop_cleanly_and_resume(tmp_path: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    args = ["run", "--run-id", "sig", *_sets()]
    for point, code in CHAIN:
        res = subprocess.run(
            [sys.executable, "-m", "whale_cli", *args], env={**env, "WHALE_FAULT": point}, cwd=REPO,
            capture_output=True, text=True, timeout=900, check=False, start_new_session=True,
        )  # fmt: skip
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == code, f"{point}: exit {res.returncode}\n{res.stdout[-2000:]}{res.stderr[-3000:]}"
        assert "Traceback" not in res.stdout + res.stderr, f"{point}:\n{res.stderr[-3000:]}"
        assert lines and lines[-1].startswith("error: interrupted: run sig stopped"), f"{point}: {lines[-3:]}"
        args = ["resume", "sig"]
    done = whale(env, "resume", "sig")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    archive = Archive(f"sqlite:///{home / 'whale.db'}")
    legs = Counter(leg.iteration for leg in archive.legs("sig") if leg.status == "done")
    assert legs == {0: 1, 1: 1}, legs  # each iteration done once (an interrupted attempt is kept as history)
    decisions = Counter((d.iteration, d.kind, d.reason, d.payload_json) for d in archive.decisions("sig"))
    assert max(decisions.values()) == 1, [d for d, n in decisions.items() if n > 1]
    assert archive.get_run("sig").status == "finished"
    assert all(v == 1 for v in mlflow_run_keys(home, "sig").values()), mlflow_run_keys(home, "sig")
