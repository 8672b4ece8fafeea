"""The console of ``whale run`` (issue #20): progress and result lines per leg, a summary, and nothing of Prefect's
per-task chatter or its temporary server's URLs — those go to ``runs/<id>/whale.log``; ``--verbose`` brings them
back to the console. A short real run in a subprocess with its own home."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flow_helpers import SMALL, make_home, whale

pytestmark = pytest.mark.slow

TEMP_SERVER_URL = re.compile(r"http://127\.0\.0\.1:(?!4200/)\d+/runs/")  # 4200: `whale ui --prefect`, printed


def test_run_console_is_quiet_and_the_log_file_holds_the_rest(tmp_path: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    sets = [a for item in SMALL for a in ("--set", item)]
    res = whale(env, "run", "--run-id", "quiet", *sets)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    console = res.stdout + res.stderr
    lines = console.splitlines()
    assert "Task run" not in console and "Flow run" not in console, console
    assert not TEMP_SERVER_URL.search(console), console
    assert "Loading weights" not in console and "FutureWarning" not in console, console
    # one progress line and one result line per leg (SMALL: harness, then weights)
    assert re.search(r"^candidates scored \d+/\d+, best so far \d\.\d{3}$", console, re.M), console
    assert re.search(r"^GRPO step 8/8 reward \d\.\d{3}$", console, re.M), console
    assert re.search(
        r"^iter 0 harness: val \d\.\d{3} → \d\.\d{3}, (accepted [0-9a-f]{12}|incumbent kept) ", console, re.M
    )
    assert re.search(r"^iter 1 weights: val \d\.\d{3} → \d\.\d{3} \(", console, re.M), console
    assert "test score (n=64)" in console and "spent" in console, console  # the summary's tables
    assert len(lines) <= 30, f"{len(lines)} console lines:\n{console}"  # the default run printed 85 before

    log = Path(env["WHALE_HOME"]) / "runs" / "quiet" / "whale.log"
    text = log.read_text()
    assert "Task run 'grpo-update-iter1' - Finished in state Completed()" in text, text[-3000:]
    assert "Flow run 'quiet/iter-00" in text and "GRPO step 8/8" in text, text[-3000:]
    assert TEMP_SERVER_URL.search(text), text[-3000:]  # Prefect's "View at" lines: in the file, not the console

    # --verbose: Prefect's lines come back on the console (a resume of the finished run: every task Cached)
    res = whale(env, "resume", "quiet", "--verbose")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    verbose = res.stdout + res.stderr
    assert "Task run 'grpo-update-iter1' - Finished in state Cached" in verbose, verbose[-3000:]
    assert TEMP_SERVER_URL.search(verbose), verbose[-3000:]
