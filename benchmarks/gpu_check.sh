#!/usr/bin/env bash
# The GPU check, first version: what breaks and how fast things are when DreamGym runs on one CUDA GPU.
#
#   bash benchmarks/gpu_check.sh            (on a machine with a GPU; logs and tables go to $OUT or /tmp/gpu_check)
#
# Stages (each under its own time limit, so one hang cannot eat the others; all run even when one fails):
#   1. the machine: nvidia-smi, torch/transformers/peft versions, a bf16 matmul rate (the ceiling for MFU);
#   2. the test suite on CUDA (every preset the tests load lands on the GPU through presets.pick_device),
#      run with pytest-xdist beside stage 3;
#   3. a short quickstart on the dial on CUDA (collect -> experience model -> SFT -> dream GRPO -> S2R -> real GRPO);
#   4. generation tokens/s of the tiny preset at batch 1, 64 and 256, and one GRPO iteration's trainer throughput.
# The device machine has torch, transformers, peft and accelerate but not DreamGym's other dependencies: when a
# `.whl/` folder of wheels travels with the tree they are installed first (`benchmarks/gpu_wheels.sh` fetches them; docs/gpu-check.md has the last run).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# bm25s runs a jax top-k at import when jax is installed (it is on the device image): without this each test
# worker's jax takes 75% of the GPU's memory and the rest run out of it.
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
PY=${PYTHON:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/wheels.log" 2>&1 || echo "wheel install failed (see wheels.log)"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

stamp "1. machine"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" - <<'EOF'
import time, torch, transformers, peft
print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__,
      "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 10
    print(f"bf16 8192^3 matmul: {2 * 8192**3 / dt / 1e12:.0f} TFLOP/s")
EOF
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

stamp "2+3. test suite on CUDA beside a short quickstart"
# pytest-xdist and pytest-timeout are on the device image; elsewhere the suite runs serially without a per-test limit.
XDIST=""; "$PY" -c "import xdist" 2>/dev/null && XDIST="-n ${WORKERS:-8}"
TLIM=""; "$PY" -c "import pytest_timeout" 2>/dev/null && TLIM="--timeout 180"
timeout "${SUITE_LIMIT:-240}" "$PY" -m pytest -q -p no:cacheprovider $XDIST $TLIM -rfE \
  -o junit_family=xunit2 --junitxml="$OUT/junit.xml" > "$OUT/pytest.log" 2>&1 &
SUITE=$!
timeout "${QS_LIMIT:-240}" "$PY" -m dreamgym.cli quickstart --no-progress run_dir=/tmp/gpu_qs env=dial \
  offline_episodes=150 em_steps=400 sft_epochs=8 dream_iterations=3 real_iterations=3 budget=300 \
  eval_seeds=[0,1,2] threads=4 > "$OUT/quickstart.log" 2>&1
echo "quickstart exit $?" >> "$OUT/quickstart.log"
wait $SUITE
echo "pytest exit $?" >> "$OUT/pytest.log"
tail -25 "$OUT/pytest.log"
tail -15 "$OUT/quickstart.log"
cp /tmp/gpu_qs/report.md "$OUT/quickstart_report.md" 2>/dev/null

stamp "4. throughput"
[ -n "${SKIP_BENCH:-}" ] || {
  timeout "${BENCH_LIMIT:-60}" "$PY" benchmarks/bench_generation.py --presets tiny --batch-sizes 1 64 256 --new-tokens 64 --device cuda
  echo "exit $?"
  timeout "${BENCH_LIMIT:-60}" "$PY" benchmarks/bench_trainer.py --preset tiny --env dial --tasks 8 --group 8
  echo "exit $?"
} > "$OUT/throughput.log" 2>&1
cat "$OUT/throughput.log"
stamp "done"
