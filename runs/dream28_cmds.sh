# 2026-12-03 (session 21): the dream's no-op state fixed (d5fa8d7); the same runs as dream26_cmds.sh otherwise
cd /work/main && export PATH=/work/main/.venv/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# audit of the SFT start's play in the dream, replayed in the game (before the fix: runs/audit-sft15.log):
python experiments/dream_audit.py --env alfworld --em runs/alf-em20 --policy runs/alf-sft15/final --data runs/alf/rep3-survey.jsonl --tasks-from runs/alf/rep3.jsonl --tasks 16 --repeats 4 --threads 1 --em-temperature 1.0 --max-steps 50 --reward-from auto --em-override copy_hidden_outcomes=true --em-override derive_determined_outcomes=true agent.history=0 agent.show_admissible=false rollout.max_new_tokens=32 rollout.ground_actions=0.8 rollout.max_turns=50 > runs/audit-sft15-noopfix.log
COMMON="--algo grpo --env alfworld --no-progress mode=dream init=runs/alf-sft15/final dream.em=runs/alf-em20 dream.em_data=runs/alf/rep3-survey.jsonl dream.iterations=4 dream.max_steps=50 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 grpo.loss_agg=episode agent.show_admissible=false agent.history=0 rollout.max_new_tokens=32 rollout.ground_actions=0.8 rollout.max_turns=50 eval_at_start=false eval_max_tasks=60 eval_seeds=[0,1] eval_every=2 save_every=1 keep_evaluated=true optim.lr=0.0003"
nohup dreamgym train $COMMON run_dir=runs/alf-dream28 > runs/alf-dream28.log 2>&1 &
nohup dreamgym train $COMMON dream.curriculum.enabled=false run_dir=runs/alf-dream28-nocur > runs/alf-dream28-nocur.log 2>&1 &
# confirmation on test games 61-180 x seeds 0,1:
# dreamgym eval --env alfworld --policy runs/<run>/final --skip-tasks 60 --max-tasks 120 --seeds 0,1 --json runs/<run>/confirm-61-180.json rollout.max_turns=50
# 2026-12-03 (session 22): S2R at B/16 from alf-dream28 (as alf-s2r26), then the same two runs continued to 10 iterations
# (copies of the run folders, resumed; the curriculum's state was lost on resume, see README section 17):
nohup dreamgym train --algo grpo --env alfworld --no-progress mode=real init=runs/alf-dream28/final run_dir=runs/alf-s2r28 real_step_budget=1457 iterations=3 grpo.tasks_per_iteration=2 grpo.group_size=8 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.0003 agent.show_admissible=false agent.history=0 rollout.max_new_tokens=32 rollout.ground_actions=0.8 rollout.max_turns=50 eval_at_start=false eval_max_tasks=60 eval_seeds=[0,1] save_every=1 > runs/alf-s2r28.log 2>&1 &
cp -r runs/alf-dream28 runs/alf-dream29 && rm -rf runs/alf-dream29/tb runs/alf-dream29/summary.json
nohup dreamgym train --resume $COMMON dream.iterations=10 run_dir=runs/alf-dream29 > runs/alf-dream29.log 2>&1 &
cp -r runs/alf-dream28-nocur runs/alf-dream29-nocur && rm -rf runs/alf-dream29-nocur/tb runs/alf-dream29-nocur/summary.json
nohup dreamgym train --resume $COMMON dream.curriculum.enabled=false dream.iterations=10 run_dir=runs/alf-dream29-nocur > runs/alf-dream29-nocur.log 2>&1 &
# S2R at B/16 from alf-dream29 (10 dream iterations): 4 games x G=4 per iteration, lr 1e-4 (s2r28's 2 x 8 at 3e-4 lost 8 of 240)
nohup dreamgym train --algo grpo --env alfworld --no-progress mode=real init=runs/alf-dream29/final run_dir=runs/alf-s2r29 real_step_budget=1457 iterations=3 grpo.tasks_per_iteration=4 grpo.group_size=4 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.0001 agent.show_admissible=false agent.history=0 rollout.max_new_tokens=32 rollout.ground_actions=0.8 rollout.max_turns=50 eval_at_start=false eval_max_tasks=60 eval_seeds=[0,1] save_every=1 > runs/alf-s2r29.log 2>&1 &
# confirmations on games 61-180 (as above) of alf-dream29/final, alf-s2r28/final, alf-dream29-nocur/final and its dream-it6 (the selection peak):
# dreamgym eval --env alfworld --policy runs/alf-dream29-nocur/dream-it6 --skip-tasks 60 --max-tasks 120 --seeds 0,1 --json runs/alf-dream29-nocur/confirm-it6-61-180.json rollout.max_turns=50
# fresh-game confirmations of both runs' dream-it8 (as above, --policy runs/<run>/dream-it8 --json runs/<run>/confirm-it8-61-180.json)
# 2026-12-03 (session 23): a second seed of the 10-iteration no-curriculum run (from scratch, so no resume flaw),
# S2R from alf-dream29-nocur drawing only the train games whose latest dream group had mixed rewards
# (real_task_pool=<dream run folder>, b880981), and more fresh episodes: games 181-274 x seeds 0,1 and 61-274 x seeds 2,3
nohup dreamgym train $COMMON dream.curriculum.enabled=false dream.iterations=10 seed=1 eval_every=5 run_dir=runs/alf-dream30-nocur-s1 > runs/alf-dream30-nocur-s1.log 2>&1 &
nohup dreamgym train --algo grpo --env alfworld --no-progress mode=real init=runs/alf-dream29-nocur/final run_dir=runs/alf-s2r30-pool real_task_pool=runs/alf-dream29-nocur real_step_budget=1457 iterations=3 grpo.tasks_per_iteration=4 grpo.group_size=4 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.0001 agent.show_admissible=false agent.history=0 rollout.max_new_tokens=32 rollout.ground_actions=0.8 rollout.max_turns=50 eval_at_start=false eval_max_tasks=60 eval_seeds=[0] save_every=1 > runs/alf-s2r30-pool.log 2>&1 &
# dreamgym eval --env alfworld --policy runs/<run>/final --skip-tasks 180 --max-tasks 94 --seeds 0,1 --json runs/<run>/confirm-181-274.json rollout.max_turns=50
# dreamgym eval --env alfworld --policy runs/<run>/final --skip-tasks 60 --max-tasks 214 --seeds 2,3 --json runs/<run>/confirm-61-274-s23.json rollout.max_turns=50
# pooled: python experiments/paired_eval.py runs/alf-sft15/confirm-61-180.json,runs/alf-sft15/confirm-181-274.json,runs/alf-sft15/confirm-61-274-s23.json runs/alf-dream29-nocur/confirm-61-180.json,...
# alf-dream30-nocur-s1 on seeds 2,3 ran as two halves on the two cores: --skip-tasks 60 --max-tasks 107 (confirm-61-167-s23.json)
# and --skip-tasks 167 --max-tasks 107 (confirm-168-274-s23.json)
# 2026-12-03 (session 24): a third seed of the 10-iteration no-curriculum run, and real GRPO on games 61-274 x seeds 2,3
nohup dreamgym train $COMMON dream.curriculum.enabled=false dream.iterations=10 seed=2 eval_every=10 run_dir=runs/alf-dream31-nocur-s2 > runs/alf-dream31-nocur-s2.log 2>&1 &
nohup dreamgym eval --env alfworld --policy runs/alf-grpo26/final --skip-tasks 60 --max-tasks 214 --seeds 2,3 --json runs/alf-grpo26/confirm-61-274-s23.json rollout.max_turns=50 > runs/alf-grpo26-confirm-s23.log 2>&1 &
nohup dreamgym eval --env alfworld --policy runs/alf-dream31-nocur-s2/final --skip-tasks 60 --max-tasks 214 --seeds 0,1 --json runs/alf-dream31-nocur-s2/confirm-61-274.json rollout.max_turns=50 > runs/alf-dream31-nocur-s2-confirm-s01.log 2>&1 &
nohup dreamgym eval --env alfworld --policy runs/alf-dream31-nocur-s2/final --skip-tasks 60 --max-tasks 214 --seeds 2,3 --json runs/alf-dream31-nocur-s2/confirm-61-274-s23.json rollout.max_turns=50 > runs/alf-dream31-nocur-s2-confirm-s23.log 2>&1 &
nohup dreamgym eval --env alfworld --policy runs/alf-s2r30-pool/final --skip-tasks 60 --max-tasks 214 --seeds 2,3 --json runs/alf-s2r30-pool/confirm-61-274-s23.json rollout.max_turns=50 > runs/alf-s2r30-pool-confirm-s23.log 2>&1 &
# quickstart after 1d3be4a (S2R draws the dream's mixed tasks): (time bash run.sh quickstart run_dir=runs/qs-s8) > runs/qs-s8.log
