"""Where the quickstart's SFT start lands: its first two stages alone (collect the offline data, SFT until the
stop criterion), then the held-out evaluation every row of the quickstart's table uses. The same code path and
defaults as `dreamgym quickstart` (`QuickstartConfig`, `Recipe.sft`), without the experience model and RL stages,
so the start can be checked on a CPU, kernel path and thread count in a few minutes:

    python experiments/quickstart_sft_start.py run_dir=runs/qs-sft                 # default kernels, 2 threads
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python experiments/quickstart_sft_start.py run_dir=runs/qs-sft-avx2         # AVX2 kernels
    python experiments/quickstart_sft_start.py threads=1 run_dir=runs/qs-sft-1t     # one thread

Arguments are `dreamgym quickstart` config overrides (key=value). Prints one JSON line: held-out success with its
Wilson 95% interval, mean steps, and where SFT stopped (step, replay probability, whether the criterion was met).
"""

from __future__ import annotations

import json
import sys
import time

from dreamgym.config import load_config
from dreamgym.commands.recipe import QuickstartConfig, Recipe


def main() -> None:
    q = load_config(QuickstartConfig, None, sys.argv[1:])
    t0 = time.time()
    r = Recipe(q.env, q.run_dir, seed=q.seed, eval_tasks=q.eval_tasks, eval_seeds=q.eval_seeds,
               eval_temperature=q.eval_temperature, progress=False, train_overrides=q.train_overrides,
               em_overrides=q.em_overrides, threads=q.threads)
    r.collect_offline(q.offline_episodes, q.offline_mix, q.sft_policy)
    r.sft(epochs=q.sft_epochs, lr=q.sft_lr, batch_size=q.sft_batch_size, stop_at=q.sft_stop_at,
          check_every=q.sft_check_every)
    s = r.results["SFT"]
    print(json.dumps({**{k: s[k] for k in ("success_rate", "ci_low", "ci_high", "mean_steps", "sft_stop")},
                      "wall_time_s": round(time.time() - t0)}), flush=True)


if __name__ == "__main__":
    main()
