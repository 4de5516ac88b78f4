#!/usr/bin/env bash
# Trained ablations of the experience model (paper: no retrieval / no reasoning / no history), each trained
# from scratch like the full model, then scored side by side with `dreamgym eval-em`.
#
#   bash experiments/em_ablations.sh dial runs/qs-s6/offline.jsonl runs/qs-s6/em runs/dial-abl
#
# Arguments: environment family, the full model's offline data, the full model's checkpoint, an output folder.
# Held-out data: 60 episodes on the test split (expert 0.4 / noisy 0.4 / random 0.2, seed 7), collected once.
# Extra key=value arguments go to every `train-em` (e.g. max_steps=1600 batch_size=8).
# Measured 2026-11-30 on the dial (1,600 steps of 8, one thread): 340-739 s per model; docs/log/03-em-fidelity.md.
set -euo pipefail
ENV=$1; DATA=$2; FULL=$3; OUT=$4; shift 4
DG=${DREAMGYM:-.venv/bin/dreamgym}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
[ -f "$OUT/heldout.jsonl" ] || "$DG" collect --env "$ENV" --policy expert:0.4,noisy:0.4,random:0.2 --episodes 60 \
    --split test --seed 7 --out "$OUT/heldout.jsonl"
for switch in retrieval reasoning history; do
    "$DG" train-em --env "$ENV" --data "$DATA" --preset tiny --out "$OUT/no-$switch" batch_size=8 max_steps=1600 \
        threads=1 em.embedder=hashing "em.use_$switch=false" "$@"
done
"$DG" eval-em --env "$ENV" --model "$FULL" --model "$OUT/no-retrieval" --model "$OUT/no-reasoning" \
    --model "$OUT/no-history" --data "$OUT/heldout.jsonl" --out "$OUT/fidelity.json" --batch-size 16
