"""A finished run's ready outputs, and the confidence interval every reported score carries.

- `write_outputs`: ``final_harness.yaml`` in the run directory (the final harness's canonical text, loadable by
  ``whale eval --harness``), the final adapter's directory (the final checkpoint's dir: a LoRA adapter, or a full
  model dir; None when the final policy is the base model) and the exact ``whale eval`` command line that scores
  the final (model, harness) pair on the same test problems the run scored it on.
- `wilson`: the 95 % Wilson score interval of a mean score over ``n`` problems.

Why Wilson: a WHALE score is the mean of per-problem scores in [0, 1] (0/1 for exact answers), and the archive keeps
the mean and ``n`` only, not the per-problem values a bootstrap would resample. Wilson needs just those two, stays
inside [0, 1] and keeps a useful width at the ends (a base model at 0.000 or 0.062 on a few hundred problems), where
the normal ``p ± 1.96·s.e.`` interval collapses to a point or crosses 0. For a [0, 1] score that is not 0/1 the
variance is at most p(1-p), so the interval is, if anything, conservative.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FINAL_HARNESS_FILE", "RunOutputs", "ci_text", "reproduce_command", "wilson", "write_outputs"]

FINAL_HARNESS_FILE = "final_harness.yaml"
Z95 = 1.959963984540054


def wilson(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of a mean score ``p`` over ``n`` problems; (nan, nan) for n = 0."""
    if n <= 0 or not math.isfinite(p):
        return float("nan"), float("nan")
    p = min(max(p, 0.0), 1.0)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def ci_text(p: float, n: int) -> str:
    """``[lo, hi]`` of `wilson`, 3 decimals (``–`` without problems)."""
    lo, hi = wilson(p, n)
    return "–" if math.isnan(lo) else f"[{lo:.3f}, {hi:.3f}]"


@dataclass(frozen=True)
class RunOutputs:
    """``harness_file``: the final harness's file; ``adapter``: the final checkpoint's dir (None: the base model);
    ``reproduce``: the ``whale eval`` command that scores the final pair on the run's test problems."""

    harness_file: Path
    adapter: str | None
    reproduce: str


def reproduce_command(cfg: Any, harness_file: Path, policy: Any) -> str:
    """``whale eval`` on the final pair, with every setting the run's test evaluation used: model (and adapter),
    suite and its problem seed/sizes/options/data, the first ``rollout.test_problems`` test problems, the run seed
    (sampling and demos), batch size and device. ``policy``: the final `PolicyRef`."""
    suite = cfg.suite
    args = ["whale", "eval"]
    if policy.is_base or policy.adapter is not None:
        args += ["--model", str(cfg.model.name)]
        if policy.adapter is not None:
            args += ["--adapter", str(policy.adapter_dir)]
    else:  # a full fine-tune: the checkpoint dir is the model
        args += ["--model", str(policy.model_dir)]
    args += ["--suite", str(suite.name)]
    if suite.path:
        args += ["--data", str(suite.path)]
    args += ["--harness", str(harness_file), "--split", "test", "-n", str(cfg.rollout.test_problems)]
    args += ["--seed", str(cfg.seed), "--batch-size", str(cfg.rollout.batch_size)]
    # whale eval's problems follow --seed unless suite.seed is set; a run keeps them at suite.seed
    args += ["--set", f"suite.seed={suite.seed}"]
    if suite.sizes is not None:
        args += ["--set", f"suite.sizes={json.dumps(suite.sizes.model_dump(mode='json'), sort_keys=True)}"]
    if suite.options:
        args += ["--set", f"suite.options={json.dumps(suite.options, sort_keys=True)}"]
    if cfg.model.device != "auto":
        args += ["--device", str(cfg.model.device)]
    return shlex.join(args)


def write_outputs(run_dir: Path, cfg: Any, policy: Any, harness: Any) -> RunOutputs:
    """Write ``final_harness.yaml`` into ``run_dir`` and name the final adapter and the reproduce command.

    ``cfg``: the run's `WhaleConfig`; ``policy``: the final `PolicyRef`; ``harness``: the final `HarnessRef`."""
    path = run_dir / FINAL_HARNESS_FILE
    path.write_text(harness.text if harness.text.endswith("\n") else harness.text + "\n")
    adapter = None if policy.is_base else (policy.adapter_dir or policy.model_dir)
    return RunOutputs(harness_file=path, adapter=adapter, reproduce=reproduce_command(cfg, path, policy))
