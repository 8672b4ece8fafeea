#!/usr/bin/env bash
# GPU check (issue 18, item 6): the real-model weights leg on CUDA, bf16 autocast, then the greedy val score before
# and after. Prints s/step, peak GPU memory (torch.cuda.max_memory_allocated) and the scores.
#
#   benchmarks/gpu_check.sh [MODEL] [STEPS]     MODEL: smollm2-135m (named) or a HF model dir; STEPS: default 20
#   WHALE_GPU_VLLM=1 benchmarks/gpu_check.sh    generation through TRL's colocated vLLM (needs vllm installed)
#
# Status: written without a CUDA machine (none was lent to the session that wrote it): checked by reading only.
# Settings: arith with 1-2-digit operands, the plain seed harness with 4 random train demos (SmolLM2's best harness on
# CPU, 0.23 greedy on 100 val problems), 64 completions per step in micro-batches of 16, LoRA (the defaults).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-smollm2-135m}"
STEPS="${2:-20}"
export WHALE_HOME="${WHALE_HOME:-$(mktemp -d -t whale-gpu-XXXX)}"
# MODEL defaults to the named SmolLM2 (installed by `whale models install smollm2-135m`); a HF model dir works too
exec "${PYTHON:-.venv/bin/python}" - "$MODEL" "$STEPS" <<'EOF'
import importlib.util
import os
import sys
import tempfile
import time

from whale_core.env import setup_offline_env

setup_offline_env()
import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: no CUDA device visible to torch")
from whale_core.harness import Harness
from whale_core.models import load_policy
from whale_core.rollout import rollout
from whale_core.suites import SuiteConfig, load_suite
from whale_core.legs.weights_leg import WeightsConfig, train_weights_leg

model, steps = sys.argv[1], int(sys.argv[2])
suite = load_suite(SuiteConfig(name="arith", options={"max_digits": 2}))
harness = Harness.from_text(suite.seed_harness).evolve(fewshot={"k": 4})
val = list(suite.problems("val"))[:100]
vllm = os.environ.get("WHALE_GPU_VLLM") == "1"
if vllm and importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_check: WHALE_GPU_VLLM=1 but vllm is not installed")
cfg = WeightsConfig(steps=steps, save_steps=steps + 1, micro_batch_size=16, use_vllm=vllm)  # bf16: auto on CUDA
print(f"{torch.cuda.get_device_name(0)}, bf16 supported {torch.cuda.is_bf16_supported()}, vllm {vllm}", flush=True)
policy = load_policy(model, device="cuda")
t0 = time.perf_counter()
before = rollout(policy, harness, suite, val, batch_size=100)
print(f"val rollout (100 problems, greedy, 4-shot): {time.perf_counter() - t0:.1f} s", flush=True)
torch.cuda.reset_peak_memory_stats()
leg = train_weights_leg(policy, harness, suite, cfg, out_dir=os.path.join(tempfile.mkdtemp(), "leg"))
peak = torch.cuda.max_memory_allocated() / 2**30
ck = leg.checkpoint
after = rollout(load_policy(ck.base_model, adapter=ck.path, device="cuda"), harness, suite, val, batch_size=100)
per_step = sum(m.seconds for m in leg.steps) / max(1, len(leg.steps))
print(f"s/step {per_step:.3f}   steps {ck.step}   completions {leg.completions}   leg wall {leg.seconds:.0f} s")
print(f"peak GPU memory during the leg {peak:.2f} GiB")
print(f"val (100 problems, greedy): before {before.score:.3f}   after {after.score:.3f}")
EOF
