# 2026-12-03 (session 28): GRPO on a fixed set of 16 WebShop train goals, in the game and in the dream.
# runs/ws/fixed16.jsonl: 16 train goals (random.Random(28) over the 480 the shopper won in shopper3k, did not win in
# shopper2k, i.e. not in the start's SFT data, and that offline3k played, so the dream's buffer holds real steps of them)
cd /work/main && export PATH=/work/main/.venv/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
WSD="--algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft20/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=10 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 grpo.loss_agg=episode optim.lr=0.0003 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
WSR="--algo grpo --env webshop --no-progress mode=real grpo.loss_agg=episode agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
if [ "$1" = train ]; then
nohup dreamgym train $WSR init=runs/ws-sft20/final real_task_pool=runs/ws/fixed16.jsonl iterations=30 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 run_dir=runs/ws-grpo28-fixed16 > runs/ws-grpo28-fixed16.log 2>&1 &
nohup dreamgym train $WSD dream.task_pool=runs/ws/fixed16.jsonl dream.curriculum.enabled=false run_dir=runs/ws-dream28-fixed16 > runs/ws-dream28-fixed16.log 2>&1 &
fi
# evaluations on the fixed set (greedy; sampled at temperature 1, 8 episodes per goal) and on the 500 test goals
C="rollout.ground_actions=0.7 rollout.max_turns=15 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48"
if [ "$1" = eval ]; then
for r in ${@:2}; do
  dreamgym eval --env webshop --policy runs/$r/final --split train --tasks-from runs/ws/fixed16.jsonl --seeds 0 --json runs/$r/eval-fixed16.json $C
  dreamgym eval --env webshop --policy runs/$r/final --split train --tasks-from runs/ws/fixed16.jsonl --seeds 0,1,2,3,4,5,6,7 --json runs/$r/eval-fixed16-t1.json $C temperature=1.0
done
fi
if [ "$1" = heldout ]; then
for r in ${@:2}; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
fi
