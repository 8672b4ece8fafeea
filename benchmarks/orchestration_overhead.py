"""Orchestration overhead: what Prefect + MLflow cost on top of the work of a WHALE run, and what a cached re-run costs.

Three timings, each a fresh `python` process so imports and start-up are counted alike:

1. ``whale run`` (Prefect flows and tasks, ephemeral Prefect server, archive, MLflow lineage) in a fresh home;
2. the same computation as a plain loop calling `whale_core` directly (no Prefect, no MLflow; archive kept because
   the harness leg needs it), with the leg sequence the orchestrated run's scheduler chose;
3. ``whale resume`` of the finished run: every task comes back Cached.

With ``--server``, also 1 and 3 again in another fresh home against a Prefect server that is already running
(started by the benchmark on 127.0.0.1 before the timing, as in production where ``PREFECT_API_URL`` points at one):
the share of the overhead that is the ephemeral server's start-up.

Also prints the peak RSS of the ``whale run`` process (``getrusage(RUSAGE_CHILDREN)`` after it: the largest
child so far, the model check before it being smaller).
Prints the overhead share ``(1 - 2) / 1`` (target ≤ 3 %) and the cached re-run share ``3 / 1`` (target ≤ 5 %).

    python benchmarks/orchestration_overhead.py                      # the embedded default run
    python benchmarks/orchestration_overhead.py --set iterations=2   # any `whale run` overrides
    python benchmarks/orchestration_overhead.py --server             # + the same against a running Prefect server
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _env(home: Path, models: Path | None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    if models is not None and not (home / "models").exists():
        (home / "models").symlink_to(models)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    env.update(WHALE_HOME=str(home), PREFECT_HOME=str(home / "prefect"))
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


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return wall


def plain(overrides: list[str], legs: list[str]) -> None:
    """The reference: the same legs, evaluations and final test evaluation, called directly."""
    from whale_core.archive import Archive
    from whale_core.budget import Budget
    from whale_core.config import load_config
    from whale_core.env import setup_offline_env, whale_home
    from whale_core.harness import Harness
    from whale_core.refs import PolicyRef
    from whale_core.rollout import rollout
    from whale_core.search import run_harness_leg, validation_order
    from whale_core.suites import load_suite
    from whale_core.weights import train_weights_leg

    setup_offline_env()
    cfg = load_config(None, overrides)
    suite = load_suite(cfg.suite)
    harness = Harness.from_text(suite.seed_harness)
    base = PolicyRef.base(cfg.model.name, cfg.model.device)
    policy_ref = base
    policy = base.load()
    val = validation_order(suite, cfg.seed)[: cfg.rollout.val_problems]
    test = list(suite.problems("test"))[: cfg.rollout.test_problems]
    archive = Archive()
    run = archive.create_run("plain", cfg.mode, {})
    budget = Budget.from_config(cfg.budget)
    rollout(policy, harness, suite, val, batch_size=cfg.rollout.batch_size, seed=cfg.seed)
    parent = None
    for i, leg in enumerate(legs):
        out = whale_home() / "plain" / f"iter-{i}"
        if leg == "weights":
            res = train_weights_leg(
                base.load(trainable=True),
                harness,
                suite,
                cfg.weights,
                out_dir=out,
                max_completions=budget.remaining("weights"),
                parent_checkpoint=parent,
            )
            parent = res.checkpoint
            policy_ref = PolicyRef.of_checkpoint(base, res.checkpoint)
            policy = policy_ref.load()
        else:
            hl = run_harness_leg(
                policy=policy,
                policy_id=policy_ref.checkpoint_id,
                incumbent=harness,
                suite=suite,
                cfg=cfg.search,
                archive=archive,
                run_id=run.id,
                leg_id=None,
                iteration=i,
                seed=cfg.seed,
                traces_dir=out,
                batch_size=cfg.rollout.batch_size,
                budget=budget,
            )
            harness = hl.incumbent_out
        rollout(policy, harness, suite, val, batch_size=cfg.rollout.batch_size, seed=cfg.seed)
    rollout(base.load(), Harness.from_text(suite.seed_harness), suite, test, batch_size=cfg.rollout.batch_size)
    rollout(policy, harness, suite, test, batch_size=cfg.rollout.batch_size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", default=[], help="whale run override (repeatable)")
    ap.add_argument("--server", action="store_true", help="also time whale run against a running Prefect server")
    ap.add_argument("--plain-legs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_legs is not None:
        plain(args.set, [x for x in args.plain_legs.split(",") if x])
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
        _timed([sys.executable, "-c", f"from whale_core.refs import PolicyRef; PolicyRef.base({model!r})"], env)
        t_flow = _timed([sys.executable, "-m", "whale_core.cli", "run", "--run-id", "bench", *sets], env)
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far (KiB)
        summary = json.loads((home / "runs" / "bench" / "summary.json").read_text())
        t_cached = _timed([sys.executable, "-m", "whale_core.cli", "resume", "bench"], env)
        penv = _env(Path(tmp) / "plain", models if models.exists() else None)
        t_plain = _timed([sys.executable, __file__, "--plain-legs", ",".join(summary["legs"]), *sets], penv)
        t_srv = t_srv_cached = None
        if args.server:
            with _prefect_server(Path(tmp)) as url:
                senv = _env(Path(tmp) / "with-server", models if models.exists() else None) | {"PREFECT_API_URL": url}
                t_srv = _timed([sys.executable, "-m", "whale_core.cli", "run", "--run-id", "bench-srv", *sets], senv)
                t_srv_cached = _timed([sys.executable, "-m", "whale_core.cli", "resume", "bench-srv"], senv)
    print(f"legs: {' → '.join(summary['legs'])}")
    print(f"{'whale run (Prefect + MLflow)':34s} {t_flow:8.1f} s")
    print(f"{'plain loop (whale_core only)':34s} {t_plain:8.1f} s")
    print(f"{'whale resume (all cached)':34s} {t_cached:8.1f} s")
    print(f"{'whale run peak RSS':34s} {rss_mb:8.0f} MiB")
    print(f"orchestration overhead share: {(t_flow - t_plain) / t_flow:6.1%}   (target <= 3%)")
    print(f"cached re-run share:          {t_cached / t_flow:6.1%}   (target <= 5%)")
    if t_srv is not None and t_srv_cached is not None:
        print(f"{'whale run, Prefect server running':34s} {t_srv:8.1f} s")
        print(f"{'whale resume, server running':34s} {t_srv_cached:8.1f} s")
        print(
            f"with a running server: overhead share {(t_srv - t_plain) / t_srv:6.1%}, cached re-run share "
            f"{t_srv_cached / t_srv:6.1%}"
        )


if __name__ == "__main__":
    main()
