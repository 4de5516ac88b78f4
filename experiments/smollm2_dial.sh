#!/usr/bin/env bash
# SmolLM2-135M-Instruct through the DreamGym recipe on the dial, on CPU, with vLLM generating: the pretrained model
# is the policy (its rollouts sampled by vLLM, its LoRA adapter pushed to the server after every update) and, after
# LoRA SFT of its own, the experience model (exported and served by a second vLLM server) for a dream of GRPO.
#
#   bash experiments/smollm2_dial.sh                     # after `bash run.sh vllm` (builds .venv and .venv-vllm)
#
# Phases, each timed into $RUN/timings.tsv (seconds), every figure into $RUN/summary.md:
#   collect     300 offline real episodes (the quickstart's mix) and 100 oracle demonstrations
#   train-em    the experience model: LoRA SFT (configs/dial/smollm2/em.yaml), ending with its held-out fidelity report
#   serve-policy  vLLM over the SmolLM2-135M preset's folder, LoRA enabled, runtime adapter loading, prefix caching
#   eval-zero-shot  the pretrained model as it is, on the 18 held-out tasks x 10 seeds (sampled, temperature 1)
#   sft         the policy's LoRA SFT on the demonstrations (configs/dial/smollm2/sft.yaml)
#   eval-sft    the SFT start, as above (its adapter loaded on the server)
#   serve-em    `dreamgym export-em` (LoRA merged) and a second vLLM server over it
#   dream       DreamGym GRPO inside the served experience model, policy sampled on the first server
#               (configs/dial/smollm2/dream.yaml); 0 real steps
#   eval-dream  the dream policy, as above
# Servers are stopped on exit. A phase whose output exists is skipped (rerun after a stop: delete what to redo).
#
# Environment: RUN (default runs/smollm2-dial; the configs name this folder), DREAMGYM_PYTHON (default
# .venv/bin/python), DREAMGYM_VLLM_PYTHON (default .venv-vllm/bin/python), POLICY_PORT / EM_PORT (8301 / 8302),
# SEEDS (evaluation seeds, default 0-9), OMP_NUM_THREADS (torch threads of the dreamgym commands, default 1),
# VLLM_CPU_OMP_THREADS_BIND (vLLM's own default, auto, decodes on one core and keeps the other for its scheduler).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/smollm2-dial}
PY=${DREAMGYM_PYTHON:-.venv/bin/python}
VPY=${DREAMGYM_VLLM_PYTHON:-.venv-vllm/bin/python}
POLICY_PORT=${POLICY_PORT:-8301}
EM_PORT=${EM_PORT:-8302}
SEEDS=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
CFG=configs/dial/smollm2
# One torch thread per process: on cores other jobs share, two threads wait for each other (train-em warns of 8-15x).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
[ "$RUN" = runs/smollm2-dial ] || echo "note: RUN=$RUN, but the configs in $CFG read and write runs/smollm2-dial" >&2
mkdir -p "$RUN"
{ date -u; grep -m1 'model name' /proc/cpuinfo; nproc --all; } > "$RUN/machine.txt"
dg() { "$PY" -m dreamgym.cli "$@"; }

phase() {  # phase NAME CMD...: run CMD, append "NAME<TAB>seconds" to timings.tsv
  local name=$1 t0
  shift
  echo "== $name ($(date -u +%H:%M:%S) UTC)"
  t0=$(date +%s)
  "$@"
  printf '%s\t%s\n' "$name" "$(( $(date +%s) - t0 ))" >> "$RUN/timings.tsv"
}

# How loaded the machine was is part of the result: the load average every minute, beside the timings.
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$RUN/load.log"; sleep 60; done) &
SERVERS=("$!")
stop_servers() {
  for pid in "${SERVERS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${SERVERS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap stop_servers EXIT

serve() {  # serve MODEL_DIR NAME PORT: vLLM's OpenAI server (flags as tests/servers.py), until /health answers
  local model=$1 name=$2 port=$3
  if curl -s -o /dev/null "http://127.0.0.1:$port/health"; then
    echo "port $port is taken by another server; set POLICY_PORT / EM_PORT" >&2
    exit 2
  fi
  VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1 \
    PYTHONPATH= \
    "$VPY" -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name "$name" \
    --host 127.0.0.1 --port "$port" --dtype float32 --max-model-len 2048 --enable-prefix-caching --seed 0 \
    --enable-lora --max-lora-rank 16 --max-loras 4 --max-num-batched-tokens 16384 > "$RUN/vllm-$name.log" 2>&1 &
  SERVERS+=("$!")
  local pid=$!
  until curl -s -o /dev/null -f "http://127.0.0.1:$port/health"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "vLLM ($name) exited; the end of $RUN/vllm-$name.log:" >&2
      tail -30 "$RUN/vllm-$name.log" >&2
      exit 1
    fi
    sleep 2
  done
  # The first request compiles vLLM's CPU kernels: part of the start, not of the first phase that uses it.
  curl -s -f "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$name\", \"prompt\": \"Hello\", \"max_tokens\": 4}" > /dev/null
}

load_adapter() {  # load_adapter NAME FOLDER: a trained policy's LoRA adapter on the policy server, as model NAME
  curl -s -f "http://127.0.0.1:$POLICY_PORT/v1/load_lora_adapter" -H 'Content-Type: application/json' \
    -d "{\"lora_name\": \"$1\", \"lora_path\": \"$(realpath "$2")\"}" > /dev/null
}

evaluate() {  # evaluate NAME TOKENIZER OUT.json: 18 held-out tasks x SEEDS, sampled, on the policy server
  dg eval --env dial --policy "http://127.0.0.1:$POLICY_PORT/v1#$1" --tokenizer "$2" --seeds "$SEEDS" \
    --config "$CFG/eval.yaml" --json "$3"
}

POLICY_URL="http://127.0.0.1:$POLICY_PORT/v1#smol"
EM_URL="http://127.0.0.1:$EM_PORT/v1#em"
SMOL_DIR=$(dg presets info smollm2-135m | sed -n 's/^path: *//p')  # builds the preset into the cache if needed

collect() {
  dg collect --env dial --policy oracle:0.4,noisy:0.4,random:0.2 --episodes 300 --seed 0 --out "$RUN/offline.jsonl" \
    --no-progress
  dg collect --env dial --policy oracle:1 --episodes 100 --seed 1 --out "$RUN/demos.jsonl" --no-progress
}
evaluate_checkpoint() {  # evaluate_checkpoint NAME: the trainer checkpoint $RUN/NAME/final, served as NAME
  load_adapter "$1" "$RUN/$1/final/adapter"
  evaluate "$1" "$RUN/$1/final" "$RUN/eval-$1.json"
}
serve_em() {
  [ -d "$RUN/em-hf" ] || dg export-em "$RUN/em" "$RUN/em-hf"
  serve "$RUN/em-hf" em "$EM_PORT"
}

[ -s "$RUN/demos.jsonl" ] || phase collect collect
[ -f "$RUN/em/train_summary.json" ] || phase train-em dg train-em --config "$CFG/em.yaml"
phase serve-policy serve "$SMOL_DIR" smol "$POLICY_PORT"
[ -f "$RUN/eval-zero-shot.json" ] || phase eval-zero-shot evaluate smol smollm2-135m "$RUN/eval-zero-shot.json"
[ -f "$RUN/sft/final/trainer_state.json" ] || phase sft dg train --config "$CFG/sft.yaml" --no-progress \
  "model.policy_url=$POLICY_URL"
[ -f "$RUN/eval-sft.json" ] || phase eval-sft evaluate_checkpoint sft
phase serve-em serve_em
[ -f "$RUN/dream/final/trainer_state.json" ] || phase dream dg train --config "$CFG/dream.yaml" --no-progress \
  "model.policy_url=$POLICY_URL" "dream.em_url=$EM_URL"
[ -f "$RUN/eval-dream.json" ] || phase eval-dream evaluate_checkpoint dream

"$PY" - "$RUN" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = ["| policy | success % [95% CI] | n | mean steps | invalid actions |", "|---|---|---:|---:|---:|"]
for name, f in (("SmolLM2-135M zero-shot", "eval-zero-shot.json"), ("SFT start", "eval-sft.json"),
                ("DreamGym GRPO (0 real steps)", "eval-dream.json")):
    r = json.loads((run / f).read_text())
    rows.append(f"| {name} | {100 * r['success_rate']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] | "
                f"{r['n']} | {r['mean_steps']:.2f} | {r['invalid_action_rate']:.3f} |")
times = [line.split("\t") for line in (run / "timings.tsv").read_text().splitlines()]
rows += ["", "| phase | wall time (s) |", "|---|---:|"] + [f"| {n} | {s} |" for n, s in times]
em = json.loads((run / "em" / "train_summary.json").read_text()).get("heldout") or {}
rows += ["", "Experience model, held-out report: " + json.dumps(em.get("metrics")) + " reasons: "
         + json.dumps(em.get("reasons"))]
(run / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
EOF
