"""A full disk at each write kind (issue 30): MLflow's store, the archive, a checkpoint, traces. Each time the run
ends with one line (exit 2) that says the disk is full — no traceback, no "--- Logging error ---" per record — and,
once space is freed, ``whale resume`` finishes without a duplicate leg, decision or MLflow run.

A real full disk, not a raised error: the run happens in a user and mount namespace (``unshare -rm``, no root
needed where user namespaces are allowed) with a small tmpfs for each store — ``runs/`` (checkpoints, traces, the
run's log), the archive's directory (``WHALE_DB_URL``), MLflow's (``MLFLOW_TRACKING_URI``, artifacts beside it) —
and the ``WHALE_FAULT=<point>@FULL`` hook (tasks/fault.py) fills one of them at a point of the run; the next write
there fails as on a full disk. The mounts live as long as the namespace, so the whole chain runs in one shell
script there and copies the stores out before it ends.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from flow_helpers import REPO, make_home, mlflow_run_keys
from test_faults import _sets

from whale_core.records.archive import Archive

pytestmark = pytest.mark.slow

# (which store fills, at which point): in the order one run reaches them; each resume goes on from where it stopped
CHAIN = [
    ("archive", "score-harness"),  # iteration 0: the first candidates scored; the archive's next write
    ("mlflow", "plateau-check"),  # iteration 1's decision made (iteration 0's comes back Cached); MLflow's next write
    ("runs", "grpo-update-before-checkpoint"),  # iteration 1: the TRL checkpoint's save
    ("runs", "rollout"),  # the evaluation after iteration 1 done: the final test rollout's traces
]


def _unshare_works() -> bool:
    try:
        cmd = ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"]
        return subprocess.run(cmd, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs a mount namespace (unshare -rm) to make a small tmpfs")
def test_a_full_disk_at_each_write_kind_is_one_line_and_the_run_resumes(tmp_path: Path, models_dir: Path) -> None:
    env = make_home(tmp_path, models_dir)
    home = Path(env["WHALE_HOME"])
    stores = {"runs": home / "runs", "archive": tmp_path / "archive", "mlflow": tmp_path / "mlflow"}
    env.update(
        WHALE_DB_URL=f"sqlite:///{stores['archive'] / 'whale.db'}",
        MLFLOW_TRACKING_URI=f"sqlite:///{stores['mlflow'] / 'mlflow.db'}",
    )
    whale = f"{shlex.quote(sys.executable)} -m whale_cli"
    lines = ["set -u"]
    for d in stores.values():
        lines.append(f"mkdir -p {d} && mount -t tmpfs -o size=96m tmpfs {d} || exit 99")
    args = f"run --run-id disk {' '.join(map(shlex.quote, _sets()))}"
    for i, (store, point) in enumerate(CHAIN):
        fill = stores[store]
        lines += [
            f"WHALE_FAULT={point}@FULL WHALE_FAULT_FILL={fill} {whale} {args} >{tmp_path}/out{i} 2>{tmp_path}/err{i}",
            f"echo $? >{tmp_path}/rc{i}",
            f"rm -f {fill}/.whale-fault-full",
        ]
        args = "resume disk"
    lines += [
        f"{whale} resume disk >{tmp_path}/out-last 2>{tmp_path}/err-last; echo $? >{tmp_path}/rc-last",
        f"cp -a {stores['archive']} {tmp_path}/archive-copy && cp -a {stores['mlflow']} {tmp_path}/mlflow-copy",
    ]
    script = tmp_path / "chain.sh"
    script.write_text("\n".join(lines) + "\n")
    res = subprocess.run(
        ["unshare", "-rm", "bash", str(script)], env=env, cwd=REPO, capture_output=True, text=True, timeout=1500,
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr

    for i, (store, point) in enumerate(CHAIN):
        rc = (tmp_path / f"rc{i}").read_text().strip()
        err = (tmp_path / f"err{i}").read_text()
        out = (tmp_path / f"out{i}").read_text()
        where = f"{store} full at {point}: exit {rc}\n{out[-1500:]}\n{err[-3000:]}"
        errs = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == "2", where
        assert "Traceback" not in out + err and "Logging error" not in err, where
        assert errs and errs[-1].startswith("error: No space left on device"), where
        assert "free space, then `whale resume disk`" in errs[-1], where
        assert sum("error" in ln.lower() for ln in errs) == 1, where
    last = (tmp_path / "rc-last").read_text().strip()
    assert last == "0", (tmp_path / "out-last").read_text()[-2000:] + (tmp_path / "err-last").read_text()[-3000:]

    archive = Archive(f"sqlite:///{tmp_path / 'archive-copy' / 'whale.db'}")
    assert archive.get_run("disk").status == "finished"
    legs = Counter(leg.iteration for leg in archive.legs("disk") if leg.status == "done")
    assert legs == {0: 1, 1: 1}, legs
    decisions = Counter((d.iteration, d.kind, d.reason, d.payload_json) for d in archive.decisions("disk"))
    assert max(decisions.values()) == 1, [d for d, n in decisions.items() if n > 1]
    keys = mlflow_run_keys(tmp_path / "mlflow-copy", "disk")
    assert keys and all(v == 1 for v in keys.values()), keys
