"""Plumbing every part of the package shares, knowing nothing of the method. Nothing here imports a part of it.

- `seeds`: seeds derived from seeds (`mix_seed` for trainers and rollouts, `text_seed`, `row_seed`);
- `paths`: the cache directory, atomic writes, named crash points for the fault tests;
- `jsonl`: the one JSONL append writer: a fsynced write per record, one torn-tail rule for every log;
- `filecheck`: start-up checks of files alone: a path to write (kind, parent), weights files whole;
- `metrics`: metrics to JSONL and TensorBoard, the machine record reports and summaries carry;
- `metric_names`: the metric namespaces (rollout/, losses/, dream/, em/, eval/); old runs' names read as new;
- `distributed`: several processes (torchrun): shares of each step, gradient sums, rank 0 the only writer;
- `fsdp`: sharded weights (FSDP2): layer units, gathered weights for generation, full checkpoints;
- `serving`: the HTTP servers' shared limits (body, header and time limits, connection cap, JSON errors);
- `bm25`: bm25s imported without its jax side effect (WebShop search, curriculum neighbours);
- `quiet`: other libraries' log records that tell a user nothing, dropped on import (with why).
"""
