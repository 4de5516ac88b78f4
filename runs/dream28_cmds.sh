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
