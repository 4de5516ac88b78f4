# WebShop: SFT on shopper wins (one thread, beside the two ALFWorld runs)
cd /work/main && export PATH=/work/main/.venv/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl run_dir=runs/ws-sft10 iterations=3 sft.epochs=3 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.8 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft10.log 2>&1 &
# WebShop EM (tiny preset, 900 steps) on all real WebShop data, one thread
nohup dreamgym train-em --env webshop --data runs/ws/ws-all.jsonl --out runs/ws-em10 batch_size=8 max_steps=900 warmup_steps=20 threads=1 model.k=2 model.embedder=hashing+action model.example_next_state_chars=720 model.max_prompt_tokens=1536 > runs/ws-em10.log 2>&1 &
# WebShop SFT continued: ws-sft10 (3 epochs, 399 steps) wrote 4-character product ids ("click[B0W9]") and won 0 of 200; 3 more epochs
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl init=runs/ws-sft10/final run_dir=runs/ws-sft11 iterations=3 sft.epochs=3 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.8 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft11.log 2>&1 &
# WebShop dream GRPO from ws-sft11 (1 of 200, mean reward 0.071) with copied / derived pages, lr 5e-5, 8 iterations, one thread
nohup dreamgym train --algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft11/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=8 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.00005 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.8 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=4 save_every=1 run_dir=runs/ws-dream10 > runs/ws-dream10.log 2>&1 &
# 2026-12-03 (session 22): ws-sft11 with a looser grounding threshold (its 4-character ids are at ratio ~0.79 to the real link)
dreamgym eval --env webshop --policy runs/ws-sft11/final --max-tasks 200 --seeds 0 --json runs/ws-sft11/eval-ground07.json rollout.ground_actions=0.7
# dream GRPO from it at that threshold, fixed no-op state (d5fa8d7), lr 1e-4, 4 iterations
nohup dreamgym train --algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft11/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=4 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.0001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=4 save_every=1 run_dir=runs/ws-dream11 > runs/ws-dream11.log 2>&1 &
# 2026-12-03 (session 24): 3 + 3 more SFT epochs at grounding 0.7 (ws-sft12: 16/200; ws-sft13: 23/200), then dream GRPO from ws-sft13
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl init=runs/ws-sft11/final run_dir=runs/ws-sft12 iterations=3 sft.epochs=3 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft12.log 2>&1 &
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl init=runs/ws-sft12/final run_dir=runs/ws-sft13 iterations=3 sft.epochs=3 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft13.log 2>&1 &
nohup dreamgym train --algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft13/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=5 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=2 grpo.loss_agg=episode optim.lr=0.0001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=5 save_every=1 run_dir=runs/ws-dream12 > runs/ws-dream12.log 2>&1 &
# 2026-12-03 (session 25): this checkout had no runs; WebShop rebuilt (data as above: offline3k seed 303, shopper2k seed 404, ws-all = both)
dreamgym collect --env webshop --policy shopper:0.4,noisy:0.4,random:0.2 --episodes 3000 --seed 303 --out runs/ws/offline3k.jsonl
dreamgym collect --env webshop --policy shopper:1 --episodes 2000 --seed 404 --out runs/ws/shopper2k.jsonl
cat runs/ws/offline3k.jsonl runs/ws/shopper2k.jsonl > runs/ws/ws-all.jsonl
nohup dreamgym train-em --env webshop --data runs/ws/ws-all.jsonl --out runs/ws-em10 batch_size=8 max_steps=900 warmup_steps=20 threads=1 model.k=2 model.embedder=hashing+action model.example_next_state_chars=720 model.max_prompt_tokens=1536 > runs/ws-em10.log 2>&1 &
# the 12 SFT epochs of ws-sft10..13 in one run
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper2k.jsonl run_dir=runs/ws-sft20 iterations=1 sft.epochs=12 sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 eval_max_tasks=200 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft20.log 2>&1 &
# ws-sft20: 24/200 (12.0%), as ws-sft13's 23. Dream GRPO from it with ALFWorld's recipe (lr 3e-4, 4 minibatches, 10 iterations), without and with the curriculum
WSD="--algo grpo --env webshop --no-progress mode=dream init=runs/ws-sft20/final dream.em=runs/ws-em10 dream.em_data=runs/ws/ws-all.jsonl dream.iterations=10 dream.max_steps=15 dream.task_pool=data dream.em_overrides.temperature=1.0 dream.em_overrides.copy_hidden_outcomes=true dream.em_overrides.derive_determined_outcomes=true grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 grpo.loss_agg=episode optim.lr=0.0003 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
nohup dreamgym train $WSD dream.curriculum.enabled=false run_dir=runs/ws-dream20-nocur > runs/ws-dream20-nocur.log 2>&1 &
nohup dreamgym train $WSD run_dir=runs/ws-dream20 > runs/ws-dream20.log 2>&1 &
# evaluations on all 500 test goals (greedy; a WebShop episode does not depend on the episode seed); it5 = a copy of checkpoint/ after iteration 5
C="rollout.ground_actions=0.7 rollout.max_turns=15 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48"
dreamgym eval --env webshop --policy runs/ws-sft20/final --max-tasks 200 --seeds 0 --json runs/ws-sft20/eval-1-200.json $C
dreamgym eval --env webshop --policy runs/ws-sft20/final --skip-tasks 200 --max-tasks 300 --seeds 0 --json runs/ws-sft20/eval-201-500.json $C
dreamgym eval --env webshop --policy runs/ws-sft20/final --split train --max-tasks 128 --seeds 0 --json runs/ws-sft20/eval-train128-t1.json $C temperature=1.0
for r in ws-dream20-nocur ws-dream20; do cp -r runs/$r/checkpoint runs/$r/it5; done  # right after iteration 5 was saved
for r in ws-dream20-nocur ws-dream20; do dreamgym eval --env webshop --policy runs/$r/it5 --max-tasks 500 --seeds 0 --json runs/$r/it5/eval-1-500.json $C; done
for r in ws-dream20-nocur ws-dream20; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
python experiments/paired_eval.py runs/ws-sft20/eval-1-200.json,runs/ws-sft20/eval-201-500.json runs/ws-dream20-nocur/eval-1-500.json
# audit of the start's dream play, replayed in the game
python experiments/dream_audit.py --env webshop --em runs/ws-em10 --policy runs/ws-sft20/final --data runs/ws/ws-all.jsonl --tasks-from runs/ws/ws-all.jsonl --tasks 32 --repeats 2 --threads 1 --em-temperature 1.0 --max-steps 15 --reward-from auto --em-override copy_hidden_outcomes=true --em-override derive_determined_outcomes=true agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 > runs/audit-ws-sft20.log
# the same audit of the trained policy
python experiments/dream_audit.py --env webshop --em runs/ws-em10 --policy runs/ws-dream20-nocur/final --data runs/ws/ws-all.jsonl --tasks-from runs/ws/ws-all.jsonl --tasks 32 --repeats 2 --threads 1 --em-temperature 1.0 --max-steps 15 --reward-from auto --em-override copy_hidden_outcomes=true --em-override derive_determined_outcomes=true agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 > runs/audit-ws-dream20-nocur.log
# the dream pool without the start's 949 demonstration goals: ws-all minus every episode of a goal the shopper won in shopper2k
python3 -c "import json; won={json.loads(l)['task']['id'] for l in open('runs/ws/shopper2k.jsonl') if json.loads(l).get('won')}; open('runs/ws/ws-unseen.jsonl','w').writelines(l for l in open('runs/ws/ws-all.jsonl') if json.loads(l)['task']['id'] not in won)"
nohup dreamgym train $WSD dream.curriculum.enabled=false dream.em_data=runs/ws/ws-unseen.jsonl dream.iterations=5 run_dir=runs/ws-dream21-unseen > runs/ws-dream21-unseen.log 2>&1 &
nohup dreamgym train $WSD dream.curriculum.enabled=false dream.em_data=runs/ws/ws-unseen.jsonl dream.iterations=5 seed=1 run_dir=runs/ws-dream21-unseen-s1 > runs/ws-dream21-unseen-s1.log 2>&1 &
for r in ws-dream21-unseen ws-dream21-unseen-s1; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
# 2026-12-03 (session 26): real GRPO at B (9,600 real steps; 16 goals x 8, lr 3e-4, 4 minibatches, as the dream) and S2R at B/16 (600) from ws-dream20-nocur
WSR="--algo grpo --env webshop --no-progress mode=real grpo.loss_agg=episode agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_at_start=false eval_max_tasks=200 eval_seeds=[0] eval_every=0 save_every=1"
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=9600 iterations=14 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 run_dir=runs/ws-grpo22 > runs/ws-grpo22.log 2>&1 &
nohup dreamgym train $WSR init=runs/ws-dream20-nocur/final real_task_pool=runs/ws-dream20-nocur real_step_budget=600 iterations=6 grpo.tasks_per_iteration=4 grpo.group_size=4 grpo.minibatches=2 optim.lr=0.0001 run_dir=runs/ws-s2r22 > runs/ws-s2r22.log 2>&1 &
for r in ws-s2r22 ws-grpo22; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
# dream audit on goals the start never saw won (is the dream too harsh there?)
python experiments/dream_audit.py --env webshop --em runs/ws-em10 --policy runs/ws-sft20/final --data runs/ws/ws-all.jsonl --tasks-from runs/ws/ws-unseen.jsonl --tasks 32 --repeats 2 --threads 1 --em-temperature 1.0 --max-steps 15 --reward-from auto --em-override copy_hidden_outcomes=true --em-override derive_determined_outcomes=true agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 > runs/audit-ws-sft20-unseen.log
# second seeds: the 10-iteration no-curriculum dream and real GRPO at B
nohup dreamgym train $WSD dream.curriculum.enabled=false seed=1 run_dir=runs/ws-dream22-nocur-s1 > runs/ws-dream22-nocur-s1.log 2>&1 &
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=9600 iterations=14 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 seed=1 run_dir=runs/ws-grpo22-s1 > runs/ws-grpo22-s1.log 2>&1 &
# the 10-iteration no-curriculum dream continued to 20 iterations (a copy of its run folder, resumed)
cp -r runs/ws-dream20-nocur runs/ws-dream23-nocur-20 && rm -rf runs/ws-dream23-nocur-20/it5
nohup dreamgym train $WSD --resume dream.curriculum.enabled=false dream.iterations=20 run_dir=runs/ws-dream23-nocur-20 > runs/ws-dream23-nocur-20.log 2>&1 &
# greedy on the first 200 train goals: start, real GRPO, dream
for r in ws-sft20 ws-grpo22 ws-dream20-nocur; do dreamgym eval --env webshop --policy runs/$r/final --split train --max-tasks 200 --seeds 0 --json runs/$r/eval-train200.json $C; done
# S2R seed 1 (iterations=10, so the 600-step budget binds), evaluations of the seed-1 runs
dreamgym train $WSR init=runs/ws-dream20-nocur/final real_task_pool=runs/ws-dream20-nocur real_step_budget=600 iterations=10 grpo.tasks_per_iteration=4 grpo.group_size=4 grpo.minibatches=2 optim.lr=0.0001 seed=1 run_dir=runs/ws-s2r22-s1 > runs/ws-s2r22-s1.log 2>&1
for r in ws-grpo22-s1 ws-s2r22-s1; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
# a third dream seed
nohup dreamgym train $WSD dream.curriculum.enabled=false seed=2 run_dir=runs/ws-dream22-nocur-s2 > runs/ws-dream22-nocur-s2.log 2>&1 &
# evaluations: dream seed 1 (10 it.) and the 20-iteration continuation; real GRPO seed 2
for r in ws-dream22-nocur-s1 ws-dream23-nocur-20; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=9600 iterations=14 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 seed=2 run_dir=runs/ws-grpo22-s2 > runs/ws-grpo22-s2.log 2>&1 &
# GRPO on the outcome reward (grpo.reward=success, the paper's 0/1) instead of WebShop's graded reward: dream (5 it.) and real at B
nohup dreamgym train $WSD dream.curriculum.enabled=false grpo.reward=success dream.iterations=5 run_dir=runs/ws-dream24-success > runs/ws-dream24-success.log 2>&1 &
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=9600 iterations=14 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 grpo.reward=success run_dir=runs/ws-grpo24-success > runs/ws-grpo24-success.log 2>&1 &
for r in ws-grpo22-s2 ws-dream22-nocur-s2 ws-grpo24-success ws-dream24-success; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500.json $C; done
# a second seed of real GRPO on the outcome reward
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=9600 iterations=14 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 grpo.reward=success seed=1 run_dir=runs/ws-grpo24-success-s1 > runs/ws-grpo24-success-s1.log 2>&1 &
dreamgym eval --env webshop --policy runs/ws-grpo24-success-s1/final --max-tasks 500 --seeds 0 --json runs/ws-grpo24-success-s1/eval-1-500.json $C
# a second seed of the dream on the outcome reward
nohup dreamgym train $WSD dream.curriculum.enabled=false grpo.reward=success dream.iterations=5 seed=1 run_dir=runs/ws-dream24-success-s1 > runs/ws-dream24-success-s1.log 2>&1 &
dreamgym eval --env webshop --policy runs/ws-dream24-success-s1/final --max-tasks 500 --seeds 0 --json runs/ws-dream24-success-s1/eval-1-500.json $C
# 2026-12-03 (session 27): sampled evaluations (temperature 1) of every section-21 policy, the outcome breakdown
# (experiments/webshop_outcomes.py), the shopper on the test goals, SFT on all 3,000 shopper episodes (wins and
# losses), real GRPO at 4B, and the dream from the new SFT policy
for r in ws-sft20 ws-dream20-nocur ws-dream22-nocur-s1 ws-dream22-nocur-s2 ws-dream23-nocur-20 ws-grpo22 ws-grpo22-s1 ws-grpo22-s2 ws-s2r22 ws-s2r22-s1; do dreamgym eval --env webshop --policy runs/$r/final --max-tasks 500 --seeds 0 --json runs/$r/eval-1-500-t1.json $C temperature=1.0; done
for r in ws-sft20 ws-dream20-nocur ws-grpo22 ws-dream22-nocur-s1 ws-grpo22-s1 ws-dream22-nocur-s2 ws-grpo22-s2 ws-s2r22 ws-s2r22-s1 ws-dream23-nocur-20 ws-sft27-all; do python experiments/webshop_outcomes.py --policy runs/$r/final --max-tasks 500 --json runs/$r/outcomes-1-500.json $C > runs/$r-outcomes.log; done
dreamgym collect --env webshop --policy shopper:1 --split test --episodes 500 --out runs/ws/shopper-test.jsonl
dreamgym collect --env webshop --policy shopper:1 --episodes 3000 --seed 505 --out runs/ws/shopper3k.jsonl
nohup dreamgym train --algo sft --env webshop --no-progress data=runs/ws/shopper3k.jsonl init=runs/ws-sft20/final run_dir=runs/ws-sft27-all iterations=1 sft.epochs=2 sft.only_won=false sft.batch_size=32 optim.lr=0.001 agent.history=0 agent.show_admissible=false rollout.max_new_tokens=48 rollout.ground_actions=0.7 rollout.max_turns=15 eval_max_tasks=500 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft27-all.log 2>&1 &
nohup dreamgym train $WSR init=runs/ws-sft20/final real_step_budget=38400 iterations=60 grpo.tasks_per_iteration=16 grpo.group_size=8 grpo.minibatches=4 optim.lr=0.0003 eval_max_tasks=500 eval_every=20 keep_evaluated=true run_dir=runs/ws-grpo27-4b > runs/ws-grpo27-4b.log 2>&1 &
nohup dreamgym train $WSD init=runs/ws-sft27-all/final dream.curriculum.enabled=false eval_max_tasks=500 run_dir=runs/ws-dream27-all > runs/ws-dream27-all.log 2>&1 &
# one round of DAgger: the start's own pages on train goals 1-1,500, labelled with the shopper's action, plus the
# shopper's 949 winning demonstrations; one SFT epoch from ws-sft20
python experiments/webshop_dagger.py --policy runs/ws-sft20/final --tasks 1500 --out runs/ws/dagger1.jsonl --threads 2 $C > runs/ws-dagger1.log
python3 -c "import json; open('runs/ws/shopper2k-won.jsonl','w').writelines(l for l in open('runs/ws/shopper2k.jsonl') if json.loads(l)['won'])"
cat runs/ws/dagger1.jsonl runs/ws/shopper2k-won.jsonl > runs/ws/dagger1-mix.jsonl
dreamgym train --algo sft --env webshop --no-progress data=runs/ws/dagger1-mix.jsonl init=runs/ws-sft20/final run_dir=runs/ws-sft27-dagger iterations=1 sft.epochs=1 sft.only_won=false sft.batch_size=32 optim.lr=0.001 $C eval_max_tasks=500 eval_seeds=[0] eval_at_start=false save_every=1 > runs/ws-sft27-dagger.log 2>&1
