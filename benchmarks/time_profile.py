"""Where a WHALE run's time goes: a sampling profile of the whole process tree, summed by what the time was for.

Runs a command (default: the SmolLM2 profile, ``whale run --config whale_core/profiles/smollm2-arith.yaml``) under
py-spy (``record --subprocesses --format raw``: every thread and child process, sampled ``--rate`` times a second,
on-CPU samples only) and sorts each sample into one category by the frames on its stack, the first rule that
matches wins (`RULES`): the GRPO update (TRL's own generation apart), rollout generation, prompt rendering and
tokenization, parsing and scoring, model and adapter loading, imports, MLflow, Prefect, the archive's database, the
proposer's server, and the rest. It prints the
share of CPU samples per category, the run's wall time and its CPU seconds per category (samples / rate), and
writes the raw stacks next to ``--out`` so a category can be looked into.

    pip install py-spy   # in any environment: py-spy is a standalone binary that attaches to the run
    python benchmarks/time_profile.py --py-spy /path/to/py-spy --out benchmark-data/time-profile/before.txt
    python benchmarks/time_profile.py --out /tmp/p.txt -- whale search -c whale_core/profiles/smollm2-arith.yaml

Simplified: samples count CPU time, not wall time spent waiting (a run that waits on a lock or the disk shows less
than its wall time); a sample whose stack matches no rule is "other". With ``--clone DIR`` the command runs the code
of a git clone (``PYTHONPATH=DIR``, this checkout's environment), so two versions are measured in one sitting.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["whale", "run", "--config", str(REPO / "whale_core" / "profiles" / "smollm2-arith.yaml")]

# (category, needles): a sample belongs to the first category one of whose needles matches a frame of its stack; a
# needle is "FILE" (a substring of the frame's file) or "FUNCTION@FILE" (that function in such a file)
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("imports", ("<frozen importlib._bootstrap>",)),
    ("proposer server", ("whale_core/proposers/local_server.py",)),
    ("GRPO: TRL's generation of completions", ("_generate_and_score_completions@trl/trainer/grpo_trainer.py",)),
    ("GRPO: forward/backward/optimizer", ("trl/trainer/grpo_trainer.py", "transformers/trainer.py")),
    ("rollouts: generation", ("_generate@whale_core/rollout.py",)),
    ("rollouts: rendering + tokenization", ("_prompts@whale_core/rollout.py",)),
    ("rollouts: parsing + scoring", ("whale_core/rollout.py", "whale_core/legs/scoring.py")),
    ("model / adapter loading", ("from_pretrained@", "whale_core/models/policy.py", "peft/")),
    ("MLflow", ("mlflow/",)),
    ("Prefect", ("prefect/",)),
    ("archive (SQLAlchemy)", ("sqlalchemy/",)),
]


def _frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) of each frame of a py-spy raw stack (``func (file:line);...``)."""
    out = []
    for frame in stack.split(";"):
        func, _, rest = frame.partition(" (")
        out.append((func, rest.rsplit(":", 1)[0]))
    return out


def categorize(stack: str) -> str:
    frames = _frames(stack)
    for name, needles in RULES:
        for needle in needles:
            func, _, where = needle.rpartition("@")
            if any(where in file and (not func or f == func) for f, file in frames):
                return name
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    ap.add_argument("--rate", type=int, default=20, help="samples per second")
    ap.add_argument("--out", type=Path, default=Path("benchmark-data/time-profile/profile.txt"))
    ap.add_argument("--clone", type=Path, help="run the code of this git clone (PYTHONPATH)")
    ap.add_argument("command", nargs="*", help="the command after --, default: the SmolLM2 profile's whale run")
    args = ap.parse_args()
    command = args.command or DEFAULT
    if command[0] == "whale":  # this environment's whale, importable from --clone when given
        launcher = "import sys; from whale_cli.app import main; sys.argv[0] = 'whale'; sys.exit(main())"
        command = [sys.executable, "-c", launcher, *command[1:]]
    env = dict(os.environ)
    if args.clone:
        env["PYTHONPATH"] = str(args.clone.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = [args.py_spy, "record", "--subprocesses", "--format", "raw", "--rate", str(args.rate)]
    record += ["--output", str(args.out), "--", *command]
    start = time.perf_counter()
    rc = subprocess.call(record, env=env)
    wall = time.perf_counter() - start
    counts: Counter[str] = Counter()
    for line in args.out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[categorize(stack)] += int(n)
    total = sum(counts.values()) or 1
    print(f"\n{' '.join(command[-4:])}: py-spy exit {rc}, {wall:.0f} s wall, {total / args.rate:.0f} CPU-s sampled")
    print(f"{'category':<36} {'share':>6} {'CPU-s':>8}")
    for name, n in counts.most_common():
        print(f"{name:<36} {n / total:>6.1%} {n / args.rate:>8.0f}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
