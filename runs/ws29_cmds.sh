# 2026-12-04 (session 29): this checkout had no runs; WebShop rebuilt from runs/ws_cmds.sh (sessions 25, 27 lines),
# then GRPO on a fixed set of 64 train goals (section 23's question at 4x the goals).
cd /work/main && export PATH=/work/main/.venv/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ "$1" = data ]; then
dreamgym collect --env webshop --policy shopper:0.4,noisy:0.4,random:0.2 --episodes 3000 --seed 303 --out runs/ws/offline3k.jsonl > runs/collect-offline3k.log 2>&1 &
dreamgym collect --env webshop --policy shopper:1 --episodes 2000 --seed 404 --out runs/ws/shopper2k.jsonl > runs/collect-shopper2k.log 2>&1 &
wait
cat runs/ws/offline3k.jsonl runs/ws/shopper2k.jsonl > runs/ws/ws-all.jsonl
fi
if [ "$1" = base ]; then
nohup dreamgym train-em --env webshop --data runs/ws/ws-all.jsonl --out runs/ws-em10 batch_size=8 max_steps=900 warmup_steps=20 threads=1 model.k=2 model.embedder=hashing+action model.example_next_state_chars=720 model.max_prompt_tokens=1536 > runs/ws-em10.log 2>&1 &
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl run_dir=runs/ws-sft20 iterations=1 sft.epochs=12 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft20.log 2>&1 &
fi
if [ "$1" = shopper3k ]; then
dreamgym collect --env webshop --policy shopper:1 --episodes 3000 --seed 505 --out runs/ws/shopper3k.jsonl > runs/collect-shopper3k.log 2>&1
fi
# the fixed set: 64 of the 480 qualifying goals (experiments/fixed_goals.py; section 23 drew its 16 by an unrecorded snippet)
if [ "$1" = fixed ]; then
python experiments/fixed_goals.py --won-in runs/ws/shopper3k.jsonl --not-won-in runs/ws/shopper2k.jsonl --played-in runs/ws/offline3k.jsonl --n 64 --seed 29 --out runs/ws/fixed64.jsonl
fi
WSD="--algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft20/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=10 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 grpo.loss_agg=episode optim.lr=0.0003 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
WSR="--algo grpo --env webshop --no-progress mode=real grpo.loss_agg=episode agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
C="rollout.ground_actions=0.7 rollout.max_turns=15 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48"
if [ "$1" = train ]; then
nohup dreamgym train $WSR init=runs/ws-sft20/final real_task_pool=runs/ws/fixed64.jsonl iterations=30 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 run_dir=runs/ws-grpo29-fixed64 > runs/ws-grpo29-fixed64.log 2>&1 &
nohup dreamgym train $WSD dream.task_pool=runs/ws/fixed64.jsonl dream.curriculum.enabled=false run_dir=runs/ws-dream29-fixed64 > runs/ws-dream29-fixed64.log 2>&1 &
fi
# on the fixed set: greedy, and sampled at temperature 1 with 8 episodes per goal; then the 500 test goals (greedy)
if [ "$1" = eval ]; then
for r in ${@:2}; do
  dreamgym eval --env webshop --policy runs/$r/final --split train --tasks-from runs/ws/fixed64.jsonl --seeds 0 --json runs/$r/eval-fixed64.json $C
  dreamgym eval --env webshop --policy runs/$r/final --split train --tasks-from runs/ws/fixed64.jsonl --seeds 0,1,2,3,4,5,6,7 --json runs/$r/eval-fixed64-t1.json $C temperature=1.0
  dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C
done
fi
# the 10-iteration fixed-64 dream continued to 20 iterations (a copy of its run folder, resumed)
if [ "$1" = dream20 ]; then
cp -r runs/ws-dream29-fixed64 runs/ws-dream29-fixed64-20
nohup dreamgym train $WSD --resume dream.task_pool=runs/ws/fixed64.jsonl dream.curriculum.enabled=false dream.iterations=20 run_dir=runs/ws-dream29-fixed64-20 > runs/ws-dream29-fixed64-20.log 2>&1 &
fi
# after curriculum.draw_tasks (the dream draws its 16 goals per iteration without replacement, as real GRPO does):
# the same 10-iteration fixed-64 dream again; only the draws differ
if [ "$1" = dream-norepl ]; then
nohup dreamgym train $WSD dream.task_pool=runs/ws/fixed64.jsonl dream.curriculum.enabled=false run_dir=runs/ws-dream30-fixed64 > runs/ws-dream30-fixed64.log 2>&1 &
fi
