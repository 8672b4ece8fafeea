"""Orchestration overhead: what Prefect + MLflow cost on top of the work of a WHALE run, and what a cached re-run costs.

Three timings, each a fresh `python` process so imports and start-up are counted alike:

1. ``whale run`` (Prefect flows and tasks, ephemeral Prefect server, archive, MLflow lineage) in a fresh home;
2. the same computation without orchestration: the engine (`whale_core.ascent`) with its calls in the process
   (`whale_core.ascent.local.LocalCalls`: no Prefect, no MLflow; the archive kept because the legs read it) — the
   same decisions, legs, evaluations, traces and report, only not cached, retried or mirrored;
3. ``whale resume`` of the finished run: every task comes back Cached.

With ``--server``, also 1 and 3 again in another fresh home against a Prefect server that is already running
(started by the benchmark on 127.0.0.1 before the timing, as in production where ``PREFECT_API_URL`` points at one):
the share of the overhead that is the ephemeral server's start-up.

Also prints the peak RSS of the ``whale run`` process (``getrusage(RUSAGE_CHILDREN)`` after it: the largest
child so far, the model check before it being smaller).
Prints the overhead share ``(1 - 2) / 1`` (target ≤ 3 %) and the cached re-run share ``3 / 1`` (target ≤ 5 %).

Then where the difference went, from the Prefect task runs' own start/end times (read from the server's SQLite
database) and the plain loop's phase timings: start-up until the first task, the GRPO legs, everything between, and
the exit after the last task. The GRPO legs are the same `train_weights_leg` call on both sides, and their seconds
vary from run to run by more than the whole overhead target (two legs of one plain run: 85 s and 79 s), so a second
share is printed with their compute equalized: ``whale - grpo_whale + grpo_plain`` against the plain loop. Both are
reported; the raw one is the user's experience, the equalized one what orchestration itself costs.

    python benchmarks/orchestration_overhead.py                      # the embedded default run
    python benchmarks/orchestration_overhead.py --set iterations=2   # any `whale run` overrides
    python benchmarks/orchestration_overhead.py --server             # + the same against a running Prefect server
    python benchmarks/orchestration_overhead.py --warm-home          # databases migrated before (not a first run)
    python benchmarks/orchestration_overhead.py --cold-cache         # no database templates (a machine's first run)

Database templates (`whale_core.records.db_templates`): by default the timed run is a brand-new home on a machine that
has run WHALE before, so its Prefect and MLflow databases start from the machine's migrated templates (made by the
benchmark in a scratch home first, outside the timings, in its own ``WHALE_CACHE_DIR``). ``--cold-cache``: no
templates, the run migrates both databases itself (and saves the templates), as on a machine's very first run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# Migrates the home's databases the way a run's start does (Prefect's temporary server, the MLflow store), no run data.
WARM_UP = """
from whale_core.env import setup_offline_env
setup_offline_env()
from flows.startup import prepare
from whale_core.config import load_config
prepare(load_config(None, []), compute=False)
"""


def _env(home: Path, models: Path | None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    if models is not None and not (home / "models").exists():
        (home / "models").symlink_to(models)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"), WHALE_CACHE_DIR=str(home.parent / "cache"))
    return env


@contextlib.contextmanager
def _prefect_server(tmp: Path) -> Iterator[str]:
    """A Prefect server on a free 127.0.0.1 port with its own PREFECT_HOME; yields its API URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp / "prefect-server"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    log = (tmp / "prefect-server.log").open("wb")
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                sys.exit(f"prefect server exited with {proc.returncode}: see {tmp / 'prefect-server.log'}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                sys.exit("prefect server not healthy after 180 s")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _timed(cmd: list[str], env: dict[str, str], out: dict[str, Any] | None = None) -> float:
    """Wall seconds of ``cmd``; ``out`` (if given) gets its start/end epoch seconds and its stdout."""
    start, t0 = time.time(), time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    if out is not None:
        out.update(start=start, end=start + wall, stdout=res.stdout)
    return wall


def _task_runs(db: Path, since: float) -> list[tuple[str, float, float]]:
    """(name, start, end) epoch seconds of the Prefect task runs created after ``since``, read from the server's
    SQLite database (read-only; the schema's ``task_run`` table)."""
    from datetime import datetime

    def epoch(value: str) -> float:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()

    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        rows = con.execute("select name, start_time, end_time, created from task_run").fetchall()
    return sorted(
        (name, epoch(st), epoch(en)) for name, st, en, created in rows if st and en and epoch(created) >= since - 1
    )


def _breakdown(label: str, run: dict[str, Any], runs: list[tuple[str, float, float]], plain: dict[str, Any]) -> float:
    """Print where ``label``'s extra time went against the plain loop; returns the overhead share with the GRPO
    legs' own compute equalized (the same `train_weights_leg` call on both sides: its run-to-run spread, seconds
    per leg on a shared 2-core machine, is noise, not orchestration)."""
    phases = dict(plain["phases"])
    grpo = sum(e - s for n, s, e in runs if n.startswith("grpo-update"))
    plain_grpo = sum(v for k, v in phases.items() if k.endswith("weights leg"))
    first = min(s for _, s, _ in runs)
    last = max(e for _, _, e in runs)
    wall, plain_wall = run["end"] - run["start"], plain["end"] - plain["start"]
    rows = [
        ("start-up: process start -> first task", first - run["start"], phases["start-up (in-process)"]),
        ("GRPO legs (grpo-update / train_weights_leg)", grpo, plain_grpo),
        ("everything else between", last - first - grpo, plain_wall - plain_grpo - phases["start-up (in-process)"]),
        ("last task end -> process exit", run["end"] - last, 0.0),
    ]
    print(f"  {label}: where the time went (s)          whale    plain     diff")
    for name, a, b in rows:
        print(f"    {name:44s} {a:7.1f}  {b:7.1f}  {a - b:+7.1f}")
    equalized = wall - grpo + plain_grpo
    return (equalized - plain_wall) / equalized


def plain(overrides: list[str]) -> None:
    """The reference: the same run through the engine (`whale_core.ascent`) with its calls in this process
    (`LocalCalls`: no Prefect, no MLflow; the archive kept because the legs read it), then the same conclusion."""
    from whale_core.ascent.calls import Site, TrainJob
    from whale_core.ascent.conclude import conclude
    from whale_core.ascent.local import LocalCalls
    from whale_core.ascent.setup import engine_for
    from whale_core.config import load_config
    from whale_core.env import setup_offline_env, whale_home
    from whale_core.records.archive import Archive
    from whale_core.records.recorder import Recorder, create_run
    from whale_core.records.refs import PolicyRef, load_cached
    from whale_core.suites import load_suite

    t_start = time.perf_counter()
    phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        phases.append((name, time.perf_counter() - t0))

    class Timed(LocalCalls):
        def train(self, job: TrainJob, site: Site) -> Any:
            with phase(f"iteration {site.iteration}: weights leg"):
                return super().train(job, site)

    setup_offline_env()
    cfg = load_config(None, overrides)
    suite = load_suite(cfg.suite)
    load_cached(PolicyRef.base(cfg.model.name, cfg.model.device))
    archive = Archive()
    create_run(archive, "plain", cfg.mode, cfg.model_dump(mode="json"))
    run_dir = whale_home() / "plain"
    engine = engine_for(cfg, Timed(cfg, suite, run_dir), Recorder(archive, run_id="plain"), run_dir, suite=suite)
    phases.append(("start-up (in-process)", time.perf_counter() - t_start))
    conclude(engine, engine.run())
    print(json.dumps({"phases": phases}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", default=[], help="whale run override (repeatable)")
    ap.add_argument("--server", action="store_true", help="also time whale run against a running Prefect server")
    ap.add_argument(
        "--warm-home",
        action="store_true",
        help="create and migrate the home's Prefect and MLflow databases before the timed run (any run after a "
        "project's first); default: a brand-new home, which also pays those migrations",
    )
    ap.add_argument(
        "--cold-cache",
        action="store_true",
        help="no database templates: the timed run migrates its databases from scratch (a machine's first run); "
        "default: templates made beforehand in a scratch home (a new project on a machine that has run WHALE)",
    )
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain:
        plain(args.set)
        return
    from whale_core.env import whale_home

    models = whale_home() / "models"
    sets = [x for s in args.set for x in ("--set", s)]
    with tempfile.TemporaryDirectory(prefix="whale-bench-") as tmp:
        home = Path(tmp) / "orchestrated"
        env = _env(home, models if models.exists() else None)
        # build the configured model (the tiny one: cached under the shared models dir) outside the timings
        from whale_core.config import load_config

        model = load_config(None, args.set).model.name
        _timed([sys.executable, "-c", f"from whale_core.records.refs import PolicyRef; PolicyRef.base({model!r})"], env)
        if not args.cold_cache:  # the machine's templates, made by another (scratch) home's start
            _timed([sys.executable, "-c", WARM_UP], _env(Path(tmp) / "template-maker", None))
        if args.warm_home:
            _timed([sys.executable, "-c", WARM_UP], env)
        flow_run: dict[str, Any] = {}
        t_flow = _timed([sys.executable, "-m", "whale_cli", "run", "--run-id", "bench", *sets], env, flow_run)
        flow_tasks = _task_runs(home / "prefect" / "prefect.db", flow_run["start"])
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far (KiB)
        summary = json.loads((home / "runs" / "bench" / "summary.json").read_text())
        t_cached = _timed([sys.executable, "-m", "whale_cli", "resume", "bench"], env)
        penv = _env(Path(tmp) / "plain", models if models.exists() else None)
        plain_run: dict[str, Any] = {}
        t_plain = _timed([sys.executable, __file__, "--plain", *sets], penv, plain_run)
        plain_run["phases"] = json.loads(plain_run["stdout"].strip().splitlines()[-1])["phases"]
        t_srv = t_srv_cached = None
        if args.server:
            with _prefect_server(Path(tmp)) as url:
                senv = _env(Path(tmp) / "with-server", models if models.exists() else None) | {"PREFECT_API_URL": url}
                srv_run: dict[str, Any] = {}
                cmd = [sys.executable, "-m", "whale_cli", "run", "--run-id", "bench-srv", *sets]
                t_srv = _timed(cmd, senv, srv_run)
                srv_tasks = _task_runs(Path(tmp) / "prefect-server" / "prefect.db", srv_run["start"])
                t_srv_cached = _timed([sys.executable, "-m", "whale_cli", "resume", "bench-srv"], senv)
    print(f"legs: {' → '.join(summary['legs'])}")
    print(f"{'whale run (Prefect + MLflow)':34s} {t_flow:8.1f} s")
    print(f"{'plain loop (whale_core only)':34s} {t_plain:8.1f} s")
    print(f"{'whale resume (all cached)':34s} {t_cached:8.1f} s")
    print(f"{'whale run peak RSS':34s} {rss_mb:8.0f} MiB")
    print(f"orchestration overhead share: {(t_flow - t_plain) / t_flow:6.1%}   (target <= 3%)")
    print(f"cached re-run share:          {t_cached / t_flow:6.1%}   (target <= 5%)")
    share = _breakdown("whale run", flow_run, flow_tasks, plain_run)
    print(f"overhead share, GRPO compute equalized: {share:6.1%}   (target <= 3%)")
    if t_srv is not None and t_srv_cached is not None:
        print(f"{'whale run, Prefect server running':34s} {t_srv:8.1f} s")
        print(f"{'whale resume, server running':34s} {t_srv_cached:8.1f} s")
        print(
            f"with a running server: overhead share {(t_srv - t_plain) / t_srv:6.1%}, cached re-run share "
            f"{t_srv_cached / t_srv:6.1%}"
        )
        share = _breakdown("whale run, server running", srv_run, srv_tasks, plain_run)
        print(f"with a running server: overhead share, GRPO compute equalized: {share:6.1%}")


if __name__ == "__main__":
    main()
