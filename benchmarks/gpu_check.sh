#!/usr/bin/env bash
# The GPU check, version 2: what breaks and how fast DreamGym is on one CUDA GPU, as one command and one table.
#
#   bash benchmarks/gpu_check.sh                  (on the GPU machine; logs and the table go to $OUT, default /tmp/gpu_check)
#   DRY_RUN=1 bash benchmarks/gpu_check.sh        (anywhere: every stage shrunk to a few seconds, on the CPU if no GPU)
#
# Stages, each under its own `timeout` (the limits sum to 470 s, inside the 8 minutes one device command gets);
# every stage runs even when an earlier one failed:
#   0. wheels: DreamGym's dependencies the device image lacks, from .whl/ (benchmarks/gpu_wheels.sh fetches them);
#   1. machine: GPU, driver, versions, a bf16 8192^3 matmul rate; builds the tiny preset once for every later stage;
#   2. gpu tests: the `gpu`-marked tests (tests/test_gpu.py, tests/utils/test_fsdp.py), alone on the GPU;
#   3. suite: the rest of the test suite on CUDA with pytest-xdist, stopped with SIGINT at its limit so the
#      summary, the slowest tests and the JUnit file are still written, beside
#   4. quickstart: a short dial quickstart on CUDA (collect -> experience model -> SFT -> dream GRPO -> S2R -> GRPO);
#   5. generation: HFBackend decode tokens/s of the tiny preset at batch 1, 64 and 256 (a stop string on every row);
#   6. train: tokens/s and MFU of the package's training step, tiny preset and a 0.5B-shaped model, full and LoRA,
#      with and without gradient checkpointing (benchmarks/bench_gpu_train.py);
#   7. em latency: experience-model predict seconds per batch and per query at batch 1 and 64, untrained tiny and,
#      when stage 4 got that far, the quickstart's trained experience model with its retrieval buffer;
#   8. torchrun: `dreamgym train --algo sft` under torchrun with one process (NCCL on CUDA, gloo in a dry run): the
#      several-process code path (dreamgym/utils/distributed.py) on the GPU;
#   9. fsdp: the same SFT with `model.fsdp=true` (dreamgym/utils/fsdp.py: FSDP2 on one device, sharded steps, the gathered
#      policy for the evaluation's generation, a gathered checkpoint).
# At most 8 files come back from a device call, so the logs are combined into exactly these under $OUT:
#   summary.txt machine.log gpu_tests.log suite.log junit.xml quickstart.log bench.log bench.json
# Knobs: OUT, PYTHON, DRY_RUN, WORKERS (xdist workers), SUITE_LIMIT, QS_LIMIT, TRAIN_LIMIT (seconds),
# SUITE_ARGS (replaces the suite's test selection). docs/gpu-check.md has the runs so far.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
WORK=$(mktemp -d /tmp/gpu_check_work.XXXXXX)
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# bm25s runs a jax top-k at import when jax is installed (it is on the device image): without this each test
# worker's jax takes 75% of the GPU's memory and the rest run out of it.
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
PY=${PYTHON:-python3}
DRY=${DRY_RUN:-}
T0=$(date +%s)
ROWS=()
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# row NAME RC SECONDS FIGURES: one line of the final table (rc 124/137 from `timeout`, 130 from SIGINT = limit hit).
row() {
  local st="ok"
  case "$2" in 0) st="ok" ;; 124|130|137) st="TIMEOUT" ;; skip) st="skipped" ;; *) st="FAILED rc=$2" ;; esac
  ROWS+=("$(printf '%-12s | %-12s | %5s | %s' "$1" "$st" "$3" "$4")")
}
# stage LIMIT LOG CMD...: run CMD under `timeout`, appending to LOG; sets RC and SECS.
stage() {
  local limit=$1 log=$2; shift 2
  local t=$(date +%s)
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - t ))
  echo "[exit $RC after $SECS s]" >> "$log"
}

# ---------------------------------------------------------------------------------------------- 0. wheels
stamp "0. wheels"
: > "$OUT/machine.log"
export PYTHONPATH=$PWD
if [ -n "$DRY" ] && [ -z "${WHEELS:-}" ]; then
  # The wheels are CPython 3.12 builds for the device image; a dry run here uses the local environment.
  row wheels skip 0 "dry run: local environment"
elif [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  stage 25 "$OUT/machine.log" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
  row wheels "$RC" "$SECS" "$(ls .whl/*.whl | wc -l) wheels, $(du -sm .whl | cut -f1) MB"
else
  row wheels skip 0 "no .whl/ folder"
fi

# ---------------------------------------------------------------------------------------------- 1. machine
stamp "1. machine"
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  else
    echo "no nvidia-smi"
  fi
  echo "cpus $(nproc), $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB memory"}'), python $("$PY" -V 2>&1)"
} >> "$OUT/machine.log"
cat > "$WORK/machine.py" <<'EOF'
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
    print(f"{torch.cuda.get_device_name()}: bf16 8192^3 matmul {2 * 8192**3 / dt / 1e12:.0f} TFLOP/s")
EOF
stage 25 "$OUT/machine.log" bash -c "'$PY' '$WORK/machine.py' && '$PY' -m dreamgym.cli presets build tiny"
DEV=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null || echo cpu)
row machine "$RC" "$SECS" "$DEV; $(grep -m1 -o '[^:]*: bf16 8192^3 matmul [0-9]* TFLOP/s' "$OUT/machine.log" || grep -m1 '^torch' "$OUT/machine.log")"
cat "$OUT/machine.log"

# pytest-xdist and pytest-timeout are on the device image; elsewhere the suite runs serially without a per-test limit.
TLIM=""; "$PY" -c "import pytest_timeout" 2>/dev/null && TLIM="--timeout ${TEST_TIMEOUT:-120}"
XDIST=""; "$PY" -c "import xdist" 2>/dev/null && XDIST="-n ${WORKERS:-8}"
pytest_tail() { grep -E '(passed|failed|skipped|error|no tests ran|interrupted)' "$1" | grep -E ' in [0-9.]+s' | tail -1 | tr -d '='; }

# ---------------------------------------------------------------------------------------------- 2. gpu tests
stamp "2. gpu-marked tests"
stage 60 "$OUT/gpu_tests.log" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/utils/test_fsdp.py -rA $TLIM
row "gpu tests" "$RC" "$SECS" "$(pytest_tail "$OUT/gpu_tests.log")"
tail -12 "$OUT/gpu_tests.log"

# ---------------------------------------------------------------------------------------------- 3+4. suite | quickstart
stamp "3+4. test suite on $DEV beside a short quickstart"
if [ -n "$DRY" ]; then
  # A handful of quick tests, one of them a trainer test that loads the tiny preset.
  SUITE_SEL=${SUITE_ARGS:-"tests/test_parsers.py"}
  QS_ARGS="offline_episodes=20 em_steps=6 em_batch_size=4 sft_epochs=1 dream_iterations=1 real_iterations=1
    budget=40 eval_tasks=3 eval_seeds=[0] group_size=2 tasks_per_iteration=2 threads=1
    em_overrides=[em.max_new_tokens=96]"
  XDIST=""
else
  SUITE_SEL=${SUITE_ARGS:-"-m not\ gpu --durations=15"}
  QS_ARGS="offline_episodes=150 em_steps=400 sft_epochs=8 dream_iterations=3 real_iterations=3 budget=300
    eval_seeds=[0,1,2] threads=4"
fi
rm -rf /tmp/gpu_qs
# SIGINT at the limit: pytest (and xdist) stop, print the summary and write the JUnit file.
(
  t=$(date +%s)
  eval "timeout -s INT -k 20 ${SUITE_LIMIT:-150} '$PY' -m pytest -q -p no:cacheprovider $XDIST $TLIM -rfE \
    -o junit_family=xunit2 --junitxml='$OUT/junit.xml' $SUITE_SEL" > "$OUT/suite.log" 2>&1
  rc=$?
  echo "[exit $rc after $(( $(date +%s) - t )) s]" >> "$OUT/suite.log"
  echo "$rc $(( $(date +%s) - t ))" > "$WORK/suite.rc"
) &
SUITE=$!
# shellcheck disable=SC2086  # QS_ARGS is a list of key=value words
stage "${QS_LIMIT:-170}" "$OUT/quickstart.log" "$PY" -m dreamgym.cli quickstart --no-progress run_dir=/tmp/gpu_qs \
  env=dial $QS_ARGS
QS_RC=$RC; QS_SECS=$SECS
wait $SUITE
read -r S_RC S_SECS < "$WORK/suite.rc"
row suite "$S_RC" "$S_SECS" "$(pytest_tail "$OUT/suite.log")"
QS_FIG=$(grep -E '^\| (SFT|DreamGym|GRPO)' /tmp/gpu_qs/report.md 2>/dev/null | awk -F'|' '{for (i = 2; i <= 8; i++) gsub(/^ +| +$/, "", $i); sub(/ /, "% ", $5); printf "%s%s %s in %s s", (NR>1?"; ":""), $2, $5, $8}')
row quickstart "$QS_RC" "$QS_SECS" "${QS_FIG:-no report (see quickstart.log)}"
if [ -f /tmp/gpu_qs/report.md ]; then
  { echo; echo "---- /tmp/gpu_qs/report.md"; cat /tmp/gpu_qs/report.md; } >> "$OUT/quickstart.log"
fi
tail -25 "$OUT/suite.log"
tail -12 "$OUT/quickstart.log"

# ---------------------------------------------------------------------------------------------- 5. generation
stamp "5. generation throughput"
: > "$OUT/bench.log"
if [ -n "$DRY" ]; then GEN="--batch-sizes 1 4 --new-tokens 8 --repeats 1"; else GEN="--batch-sizes 1 64 256 --new-tokens 64"; fi
echo "==== 5. bench_generation.py" >> "$OUT/bench.log"
# shellcheck disable=SC2086
stage 40 "$OUT/bench.log" "$PY" benchmarks/bench_generation.py --presets tiny $GEN --stop '</no-such-tag>' \
  --no-reference --device "$DEV"
row generation "$RC" "$SECS" "$(grep -E '^  batch' "$OUT/bench.log" | awk '{printf "%sb%s %s tok/s", (NR>1?"; ":""), $2, $4}' | tr -d ':')"

# ---------------------------------------------------------------------------------------------- 6. train
stamp "6. training throughput and MFU"
echo "==== 6. bench_gpu_train.py (training)" >> "$OUT/bench.log"
SMALL=""; [ -n "$DRY" ] && SMALL="--small"
stage "${TRAIN_LIMIT:-70}" "$OUT/bench.log" "$PY" benchmarks/bench_gpu_train.py --device "$DEV" $SMALL --skip-em \
  --json "$WORK/train.json"
row train "$RC" "$SECS" "$(grep -m1 '^SUMMARY train' "$OUT/bench.log" | cut -d' ' -f3-)"

# ---------------------------------------------------------------------------------------------- 7. em latency
stamp "7. experience-model step latency"
echo "==== 7. bench_gpu_train.py (experience model)" >> "$OUT/bench.log"
EMB="--em-batches 1 64"; [ -n "$DRY" ] && EMB=""
# shellcheck disable=SC2086
stage 20 "$OUT/bench.log" "$PY" benchmarks/bench_gpu_train.py --device "$DEV" $SMALL --skip-train $EMB \
  --json "$WORK/em_untrained.json"
row "em untrained" "$RC" "$SECS" "$(grep '^SUMMARY em-latency' "$OUT/bench.log" | tail -1 | cut -d' ' -f3-)"
if grep -q '"final": true' /tmp/gpu_qs/em/em_config.json 2>/dev/null; then
  # shellcheck disable=SC2086
  stage 20 "$OUT/bench.log" "$PY" benchmarks/bench_gpu_train.py --device "$DEV" $SMALL --skip-train $EMB \
    --em /tmp/gpu_qs/em --json "$WORK/em_trained.json"
  row "em trained" "$RC" "$SECS" "$(grep '^SUMMARY em-latency' "$OUT/bench.log" | tail -1 | cut -d' ' -f3-)"
else
  row "em trained" skip 0 "the quickstart trained no experience model"
fi
"$PY" - "$WORK" "$OUT/bench.json" <<'EOF'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
out = {p.stem: json.loads(p.read_text()) for p in sorted(work.glob("*.json"))}
Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
EOF
grep -v '^SUMMARY' "$OUT/bench.log"

# ---------------------------------------------------------------------------------------------- 8. torchrun
stamp "8. torchrun, one process"
echo "==== 8. torchrun --nproc_per_node 1 dreamgym train --algo sft" >> "$OUT/bench.log"
stage 40 "$OUT/bench.log" "$PY" -m torch.distributed.run --nproc_per_node 1 --master_addr 127.0.0.1 \
  --master_port 29611 -m dreamgym.cli train --algo sft --env dial --no-progress tensorboard=false \
  eval_at_start=false eval_max_tasks=2 sft.epochs=1 demo_episodes=8 run_dir="$WORK/torchrun"
row torchrun "$RC" "$SECS" "$(grep -o '"optimizer_steps": [0-9]*' "$OUT/bench.log" | tail -1)"

# ---------------------------------------------------------------------------------------------- 9. fsdp
stamp "9. fsdp, one process"
echo "==== 9. torchrun --nproc_per_node 1 dreamgym train --algo sft model.fsdp=true" >> "$OUT/bench.log"
stage 20 "$OUT/bench.log" "$PY" -m torch.distributed.run --nproc_per_node 1 --master_addr 127.0.0.1 \
  --master_port 29612 -m dreamgym.cli train --algo sft --env dial --no-progress tensorboard=false model.fsdp=true \
  eval_at_start=false eval_max_tasks=2 sft.epochs=1 demo_episodes=8 run_dir="$WORK/fsdp"
row fsdp "$RC" "$SECS" "$(grep -o '"optimizer_steps": [0-9]*' "$OUT/bench.log" | tail -1)$(test -f "$WORK/fsdp/final/model/config.json" && echo ', HF folder written')"

# ---------------------------------------------------------------------------------------------- summary
stamp "done"
{
  echo "DreamGym GPU check v2 ($(date -u +%Y-%m-%d\ %H:%M) UTC, $(git rev-parse --short HEAD 2>/dev/null || echo '?')${DRY:+, DRY RUN}): $(( $(date +%s) - T0 )) s"
  head -3 "$OUT/machine.log"
  printf '%-12s | %-12s | %5s | %s\n' stage status s "key figures"
  printf '%s\n' "-------------+--------------+-------+------------------------------------------------------------"
  printf '%s\n' "${ROWS[@]}"
} > "$OUT/summary.txt"
rm -rf "$WORK"
echo
cat "$OUT/summary.txt"
