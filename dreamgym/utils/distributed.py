"""Data-parallel training over several processes with torch.distributed (launched by `torchrun` or
`accelerate launch`): who this process is, which share of the work is its own, and the few collectives the trainers
need.

Owns: joining the process group from the launcher's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
`MASTER_ADDR`/`MASTER_PORT`; NCCL on CUDA, gloo on the CPU), this process's device, the split of a list of work
items between ranks (`mine`, `my_range`), summing gradients and numbers over ranks, gathering Python objects, and
turning a collective that fails because another rank died or hung into `RankFailure`, which names this rank and says
how to resume.
Must not know: trainers, models beyond their parameters, environments, files (rank 0 alone writes, by asking
`is_main()`).

The scheme, for every trainer (SFT, DPO, GRPO, PPO and the experience model's SFT): every rank holds the same weights,
optimizer state and data, and draws the same batches from the same seeds; the work of a step is split (micro-batches of
a supervised step or an update, by position; the tasks of a rollout, in contiguous whole groups), each rank
back-propagates its part scaled by its share of the *global* step's tokens, and the gradients are summed over ranks
before the one clipped optimizer step that every rank takes. So N processes take the same optimizer steps as one process
on the same global batch, up to the order of floating-point sums. With sharded weights (`dreamgym/utils/fsdp.py`) each
rank holds a slice of the weights instead of a replica; the split of the work is the same.

With one process (no launcher) every function here is the identity and nothing is initialised (unless sharding asks
for a group of one: `init(fsdp=True)`).
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")

TIMEOUT_S = float(os.environ.get("DREAMGYM_DIST_TIMEOUT_S", "600"))
"""How long a collective waits for the other ranks before it fails (a hung rank ends the job after this)."""


class RankFailure(RuntimeError):
    """A collective failed: another rank died, hung past `TIMEOUT_S` or lost its connection."""


def launched() -> bool:
    """Whether a launcher started this process as one of several (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def accelerate_fsdp() -> bool:
    """Whether `accelerate launch` was given an FSDP config (it says so in every rank's environment): the run must
    then ask for sharding itself (`model.fsdp`), since DreamGym shards its models without accelerate's wrapper."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")


def active() -> bool:
    """Whether this process is one rank of an initialised group of more than one."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and \
        torch.distributed.get_world_size() > 1


def init(fsdp: bool = False) -> None:
    """Join the process group the launcher describes (idempotent; nothing without a launcher). On CUDA each rank
    takes the GPU `LOCAL_RANK` names. With `fsdp` (sharded weights need a group) a single process joins a group of
    one as well: under a launcher started with one process, or on its own (a local rendezvous on a free port)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    if not launched():
        if not fsdp:
            return
        if "MASTER_PORT" not in os.environ:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        for k, v in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
            os.environ.setdefault(k, v)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=TIMEOUT_S))


def rank() -> int:
    return torch.distributed.get_rank() if active() else 0


def world() -> int:
    return torch.distributed.get_world_size() if active() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """Rank 0, the only process that writes checkpoints, metrics, logs and the replay buffer."""
    return rank() == 0


def device() -> str:
    """This process's device: its own GPU under a launcher, else the first GPU, else the CPU."""
    if torch.cuda.is_available():
        return f"cuda:{local_rank()}" if launched() else "cuda"
    return "cpu"


def mine(items: Sequence[T]) -> list[T]:
    """This rank's items of a list every rank holds: positions rank, rank + world, ... (balanced by position)."""
    return list(items[rank()::world()])


def my_range(n: int) -> tuple[int, int]:
    """[start, end) of this rank's contiguous share of n items (the first n % world ranks take one more)."""
    size, extra = divmod(n, world())
    r = rank()
    start = r * size + min(r, extra)
    return start, start + size + (1 if r < extra else 0)


def share(items: Sequence[T], lockstep: bool = False) -> list[tuple[T, bool]]:
    """This rank's items (`mine`), each paired with True. With `lockstep` (a sharded model, whose every forward and
    backward is a collective) the list is padded to the same length on every rank, ceil(len / world), with
    (items[0], False): a repeat the caller runs with weight 0, so every rank runs the same collectives."""
    own = [(x, True) for x in mine(items)]
    if lockstep and items:
        own += [(items[0], False)] * (-(-len(items) // world()) - len(own))
    return own


def guard(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, a collective: a failure because another rank died or hung becomes `RankFailure`."""
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, ValueError) as e:  # gloo/NCCL report a dead or silent peer as RuntimeError subclasses
        raise RankFailure(f"rank {rank()} of {world()}: {what} failed ({type(e).__name__}: {e}); another rank "
                          f"died or hung (timeout {TIMEOUT_S:.0f}s). The job stops here; restart the same command "
                          f"with --resume to continue from the last checkpoint") from e


def sum_gradients(params: Sequence[torch.nn.Parameter]) -> None:
    """Replace each parameter's gradient by its sum over ranks (a rank that computed none contributes zeros), in
    one flat buffer per dtype so the whole step costs one collective per dtype."""
    if not active():
        return
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p in params:
        by_dtype.setdefault(p.dtype, []).append(p)
    for group in by_dtype.values():
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group])
        guard("summing gradients", torch.distributed.all_reduce, flat)
        offset = 0
        for p in group:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n


def sum_floats(values: Sequence[float]) -> list[float]:
    """Each value summed over ranks (float64 on the process's device)."""
    if not active():
        return list(values)
    t = torch.tensor(list(values), dtype=torch.float64, device=device())
    guard("summing metrics", torch.distributed.all_reduce, t)
    return [float(x) for x in t.tolist()]


def gather(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank (pickled; for episodes and small results)."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world()
    guard("gathering results", torch.distributed.all_gather_object, out, obj)
    return out


def share_rows(n: int) -> tuple[int, int]:
    """(position of this rank's first row among all ranks' rows, in rank order; the total), given its `n` rows."""
    if not active():
        return 0, n
    counts = gather(n)
    return sum(counts[:rank()]), sum(counts)


def barrier(what: str = "waiting for the other ranks") -> None:
    if active():
        guard(what, torch.distributed.barrier)


def leave(code: int) -> int:
    """End a command: `code` as it is in one process; under a launcher with several ranks, every rank meets at a
    barrier (after rank 0's last write) and the process then exits at once with `code` (`os._exit`, streams
    flushed), without tearing down the process group. Its teardown at exit ended a rank now and then in SIGABRT,
    "terminate called without an active exception", after the work was done (a two-rank PPO run under torchrun, an
    FSDP SFT run under accelerate), failing the whole job; the barrier already says every rank finished."""
    if not active() or world() == 1:
        shutdown()
        return code
    barrier("finishing")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def shutdown() -> None:
    """Leave the process group at the end of a run, every rank at the same point: a barrier, then the group's
    destruction. A rank that left while another was still writing (rank 0 hosts the rendezvous store) or that
    exited with the group alive (gloo's worker threads torn down with the interpreter) ended now and then in
    SIGABRT, "terminate called without an active exception", after its work was done."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        barrier("finishing")
        torch.distributed.destroy_process_group()
