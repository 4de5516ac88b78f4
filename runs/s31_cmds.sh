# 2026-12-04 (session 31): commands behind README sections 1 and 25.
#   bash runs/s31_cmds.sh fresh               the README quickstart on a fresh machine (no .venv, no caches)
#   bash runs/s31_cmds.sh sft NAME KERNELS N  SFT row of the quickstart only, on KERNELS (avx512|avx2) and N threads,
#                                             reusing runs/quickstart's offline data and experience model
#   bash runs/s31_cmds.sh cost                SFT step cost of the tiny and smollm2-135m presets on WebShop
#   bash runs/s31_cmds.sh tables              dreamgym table on WebShop and ALFWorld at smoke size
cd /work/main
if [ "$1" = fresh ]; then
/usr/bin/time -v bash run.sh quickstart
exit
fi
export PATH=/work/main/.venv/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$1" = sft ]; then
name=$2; kernels=$3; n=$4; d=runs/sftx-$name-$kernels-t$n
rm -rf "$d"; mkdir -p "$d"; cp runs/quickstart/offline.jsonl "$d"/; cp -r runs/quickstart/em "$d"/
if [ "$kernels" = avx2 ]; then export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2; fi
python -m dreamgym.cli quickstart --no-progress run_dir="$d" threads="$n" "${@:5}" > "$d.log" 2>&1 &
pid=$!
# stop after the SFT row: the question is only where SFT lands
while kill -0 $pid 2>/dev/null; do grep -q '^\[SFT\]' "$d.log" && { kill $pid; break; }; sleep 3; done
grep '^\[SFT\]' "$d.log"
fi
if [ "$1" = cost ]; then
export OMP_NUM_THREADS=1
dreamgym collect --env webshop --policy shopper:1 --episodes 100 --seed 404 --out runs/ws/shopper100.jsonl
for p in tiny smollm2-135m; do
/usr/bin/time -v dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper100.jsonl run_dir=runs/cost-sft-$p model.preset=$p iterations=1 sft.epochs=1 sft.max_steps=3 sft.log_every=1 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.max_turns=2 eval_max_tasks=1 eval_at_start=false save_every=0 tensorboard=false
done
# seconds per step: the differences of the "time" column of runs/cost-sft-<preset>/metrics.jsonl
fi
if [ "$1" = tables ]; then
export OMP_NUM_THREADS=1
dreamgym table --env webshop --no-progress run_dir=runs/table-ws-smoke offline_episodes=200 "offline_mix=shopper:0.4,noisy:0.4,random:0.2" sft_policy=shopper em_epochs=1 sft_epochs=2 budget=320 real_iterations=2 dream_iterations=2 s2r_iterations=1 tasks_per_iteration=2 group_size=2 eval_tasks=10 eval_every=1 "train_overrides=[rollout.max_turns=6,agent.history=0,agent.show_admissible=false,rollout.ground_actions=0.7]" "em_overrides=[max_steps=40,batch_size=4,threads=1]"
dreamgym table --env alfworld --no-progress run_dir=runs/table-alf-smoke offline_episodes=60 em_epochs=1 sft_epochs=2 budget=320 real_iterations=2 dream_iterations=2 s2r_iterations=1 tasks_per_iteration=2 group_size=2 eval_tasks=5 eval_every=1 "train_overrides=[rollout.max_turns=10,agent.history=0,agent.show_admissible=false]" "em_overrides=[max_steps=40,batch_size=4,threads=1]"
fi
