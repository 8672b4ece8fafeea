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
from whale_core.suites import SuiteConfig, load_suite
from whale_core.weights import WeightsConfig, train_command

model, steps = sys.argv[1], int(sys.argv[2])
suite_cfg = SuiteConfig(name="arith", options={"max_digits": 2})
harness = Harness.from_text(load_suite(suite_cfg).seed_harness).evolve(fewshot={"k": 4})
hfile = os.path.join(tempfile.mkdtemp(), "harness.yaml")
with open(hfile, "w") as f:
    f.write(harness.text)
vllm = os.environ.get("WHALE_GPU_VLLM") == "1"
if vllm and importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_check: WHALE_GPU_VLLM=1 but vllm is not installed")
cfg = WeightsConfig(steps=steps, save_steps=steps + 1, micro_batch_size=16, use_vllm=vllm)  # bf16: auto on CUDA
print(f"{torch.cuda.get_device_name(0)}, bf16 supported {torch.cuda.is_bf16_supported()}, vllm {vllm}", flush=True)
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
out = train_command(model, suite_cfg, hfile, steps=steps, config=cfg, val_problems=100, device="cuda")
wall = time.perf_counter() - t0
peak = torch.cuda.max_memory_allocated() / 2**30
print(f"s/step {out['seconds_per_step']:.3f}   steps {out['steps']}   completions {out['completions']}")
print(f"peak GPU memory {peak:.2f} GiB   wall {wall:.0f} s (evaluations included)")
print(f"val (100 problems, greedy): before {out['val_before']:.3f}   after {out['val_after']:.3f}")
EOF
