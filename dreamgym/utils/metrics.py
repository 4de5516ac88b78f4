"""Run metrics: every scalar goes to `metrics.jsonl` in the run directory and to the trackers a run reports to
(TensorBoard, W&B, trackio: `report_to`, as TRL names it); `machine_info` is the record of where a run's numbers came
from.

Owns: the metrics file format (one JSON object per line: {"step": int, "time": float, "<name>": value...}), the
trackers' names (`TRACKERS`, `parse_report_to`), and the machine record that summaries and reports carry, with the
one thread rule of every command (`resolve_threads`: an explicit count, else OMP_NUM_THREADS, else torch's own) and
`pin_threads`, which sets the two thread pools it records (and says on stderr when torch's threads exceed the idle
cores, `warn_busy_cores`).
Must not know: trainers, environments.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from dreamgym.utils.jsonl import JsonlAppender
from dreamgym.utils.paths import atomic_write_bytes


TRACKERS = ("tensorboard", "wandb", "trackio")
"""What a run can report its scalars to besides metrics.jsonl: TensorBoard (`<run_dir>/tb`), W&B (`<run_dir>/wandb`;
WANDB_MODE=offline keeps it on this machine) and trackio (its local store, TRACKIO_DIR). The names are TRL's
`report_to` values."""


def parse_report_to(spec: str) -> list[str]:
    """`"tensorboard,wandb"` -> `["tensorboard", "wandb"]`; `""` or `"none"` -> `[]`. Raises ValueError naming a tracker
    that is not one of `TRACKERS`, or whose package is not installed (said at start-up, not after a model loaded)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["none"]:
        return []
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}")
        package = "torch.utils.tensorboard" if name == "tensorboard" else name
        if name != "tensorboard" and importlib.util.find_spec(package) is None:
            raise ValueError(f"{name} is not installed (pip install 'dreamgym[{name}]')")
    return list(dict.fromkeys(names))


REPORT_TO_ALLOWED = f"a comma-separated list of {', '.join(TRACKERS)}; or none"
"""What a `report_to` field accepts, for errors and --help."""


def _project(env_var: str) -> str:
    """The tracker's project: its own environment variable (WANDB_PROJECT, TRACKIO_PROJECT, as TRL reads them), else
    dreamgym."""
    return os.environ.get(env_var) or "dreamgym"


class MetricsLogger:
    """Appends one fsynced JSON row per `log` call to `<run_dir>/metrics.jsonl` and mirrors the scalars to the trackers
    of `report_to` (`TRACKERS`; `tensorboard=False` leaves TensorBoard out). A resumed run calls `resume` with the step
    its checkpoint was saved at, so the rows it logs again are not there twice in metrics.jsonl and TensorBoard; W&B and
    trackio cannot forget a row, so each process's run is a tracker run of its own there.

    Every scalar keeps the step it was logged at on every tracker: W&B's rows carry it as `step`, the x-axis of every
    series (`define_metric`), because W&B drops a row whose own step goes back, and an SFT run logs its evaluations by
    epoch after its losses by optimiser step."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, report_to: str | list[str] = "tensorboard",
                 run_name: str | None = None, config: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._out: JsonlAppender | None = None
        self._open()
        trackers = parse_report_to(report_to) if isinstance(report_to, str) else list(report_to)
        self._tb = self._summary_writer(None) if tensorboard and "tensorboard" in trackers else None
        name = run_name or self.run_dir.resolve().name
        self._wandb: Any = None
        self._trackio: Any = None
        if "wandb" in trackers:
            import wandb

            self._wandb = wandb.init(project=_project("WANDB_PROJECT"), name=name, dir=str(self.run_dir),
                                     config=config or {})
            self._wandb.define_metric("step")
            self._wandb.define_metric("*", step_metric="step")
        if "trackio" in trackers:
            import trackio

            # No CPU/GPU sampling thread: the tracker holds the run's own series, the same as TensorBoard's.
            self._trackio = trackio.init(project=_project("TRACKIO_PROJECT"), name=name, config=config or {},
                                         embed=False, auto_log_cpu=False, auto_log_gpu=False)

    def _open(self) -> None:
        # One fsynced write per row (`dreamgym.utils.jsonl`): a kill tears at most the row being written, and the next
        # logger sets it aside before appending.
        self._out = JsonlAppender(self.path, ensure_ascii=True, crash_name="metrics.write")

    def _summary_writer(self, purge_step: int | None) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter

            return SummaryWriter(log_dir=str(self.run_dir / "tb"), purge_step=purge_step)
        except Exception:  # noqa: BLE001 - TensorBoard is a convenience; JSONL is the record
            return None

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> None:
        if self._out is None:
            raise ValueError(f"MetricsLogger for {self.path} is closed")
        row: dict[str, Any] = {"step": int(step), "time": time.time()}
        scalars: dict[str, float] = {}
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[prefix + k] = scalars[prefix + k] = float(v)
                if self._tb is not None:
                    self._tb.add_scalar(prefix + k, float(v), int(step))
            elif isinstance(v, (str, bool)) or v is None:
                row[prefix + k] = v
        self._out.append(row)
        if scalars and self._wandb is not None:
            self._wandb.log({"step": int(step), **scalars})
        if scalars and self._trackio is not None:
            self._trackio.log(scalars, step=int(step))

    def resume(self, after_step: int | None) -> int:
        """Continue a run whose checkpoint was saved after logging `after_step` (None: no checkpoint, the run starts
        over): drop the rows of every prefix logged at a later step, which the resumed run logs again, and hide
        TensorBoard's events from those steps on. A row at `after_step` itself stays: the checkpoint was saved after
        it, and what a run logs at a checkpoint's step after saving it (an evaluation) is not done again. The step is
        the one the trainer logs with (its iteration for GRPO/PPO, its optimiser step for SFT/DPO). Returns how
        many rows were dropped. A kill during the rewrite leaves the old file, and calling this again finishes it."""
        if self._out is None:
            raise ValueError(f"MetricsLogger for {self.path} is closed")
        limit = -1 if after_step is None else int(after_step)
        kept, dropped = [], 0
        with open(self.path, "rb") as fh:
            for line in fh:
                try:
                    row = json.loads(line) if line.strip() else None
                except ValueError:
                    row = None  # not a row this logger wrote: keep it, as unread data is never dropped
                step = row.get("step") if isinstance(row, dict) else None
                if isinstance(step, (int, float)) and step > limit:
                    dropped += 1
                else:
                    kept.append(line)
        if dropped:
            self._out.close()
            self._out = None
            atomic_write_bytes(self.path, b"".join(kept))
            self._open()
        if self._tb is not None:
            # purge_step makes TensorBoard discard the earlier files' events at or after it when it loads the run.
            self._tb.close()
            self._tb = self._summary_writer(limit + 1)
        return dropped

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._trackio is not None:
            self._trackio.finish()
            self._trackio = None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line from a killed run
    return rows


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


THREADS_RULE = "0: OMP_NUM_THREADS when it is set, else torch's own count"
"""What a `threads` field's 0 means, for every command's field doc (`resolve_threads`)."""


def resolve_threads(requested: int = 0, environ: dict[str, str] | None = None) -> int:
    """The CPU thread count of a command, by the one rule every command follows: `requested` when it is given (> 0),
    else OMP_NUM_THREADS when it is set (its first count: OpenMP's nested form `4,2` gives 4), else the count torch
    picked on its own (the physical cores). A default that overrode OMP_NUM_THREADS ran `train-em` 3.4x slower with 2
    threads than the 1 the shell asked for (2.5 vs 0.73 s/step, same losses). Raises ValueError naming
    OMP_NUM_THREADS when it is not a whole number >= 1."""
    if requested > 0:
        return requested
    env = os.environ if environ is None else environ
    raw = env.get("OMP_NUM_THREADS", "").strip()
    if raw:
        first = raw.split(",")[0].strip()
        if not first.isdigit() or int(first) < 1:
            raise ValueError(f"OMP_NUM_THREADS={raw!r} is not a whole number >= 1")
        return int(first)
    import torch

    return torch.get_num_threads()


def pin_threads(n: int, *, torch_threads: bool = True) -> None:
    """Set torch's CPU threads and numpy's BLAS threads to `n`, for the rest of the process. Both change results,
    not only speed: BLAS scores retrieved examples and otherwise takes its count from OPENBLAS_NUM_THREADS /
    OMP_NUM_THREADS, so the shell changed which near-tied example a prompt showed and the trained weights with it
    (docs/log/01-quickstart.md: the dial experience model's loss differed from step 100 under OMP_NUM_THREADS=1).
    `torch_threads=False` (a model on a GPU) leaves torch's pool alone: its CPU work is then host-side glue."""
    import threadpoolctl
    import torch

    if torch_threads:
        torch.set_num_threads(n)
        warn_busy_cores(n)
    threadpoolctl.threadpool_limits(limits=n, user_api="blas")


def usable_cores() -> int:
    """The cores this process may run on (`os.sched_getaffinity`; all of them where the OS cannot say)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this OS (macOS)
        return os.cpu_count() or 1


def warn_busy_cores(threads: int) -> None:
    """Print `busy_cores_warning` for this machine on stderr, when there is one (at start-up, where threads are set)."""
    warning = busy_cores_warning(threads)
    if warning:
        print(warning, file=sys.stderr)


def busy_cores_warning(threads: int, load: float | None = None, cores: int | None = None) -> str | None:
    """One line saying that `threads` torch threads exceed the idle cores, or None when they do not (one thread never
    does). Idle cores: the `cores` this process may use (default `usable_cores()`) less the machine's one-minute
    `load` average (default `os.getloadavg`), rounded. Said, never acted on: the thread count changes results, so it
    stays as set. Torch's threads wait for one another at every operation, so one that shares its core with other
    work stalls them all: `dreamgym train-em` ran 8-15x slower with 2 threads than with 1 on a 2-core machine
    running other work."""
    cores = usable_cores() if cores is None else cores
    load = os.getloadavg()[0] if load is None else load
    idle = max(0, round(min(float(cores), (os.cpu_count() or cores) - load)))
    if threads <= max(1, idle):
        return None
    return (f"warning: {threads} torch threads but about {idle} of {cores} cores idle (load average {load:.1f} over "
            f"the last minute): threads that share a core wait for each other (measured 8-15x slower with 2 threads "
            f"than with 1 on 2 busy cores); threads=1 may run faster, though the thread count changes results")


def machine_info() -> dict[str, Any]:
    """Where and when a run's numbers were made: UTC date, CPU model and cores, the kernel path torch picked on this
    CPU, torch threads, numpy's BLAS threads, GPU. Kernels and threads are recorded because they change results, not
    only speed (the same code, data and seed train to other figures: docs/decisions.md, "Threads are part of the
    result"). A table reproduces only where this record matches."""
    import threadpoolctl
    import torch

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    blas = sorted({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "blas_threads": blas[0] if len(blas) == 1 else blas,
            "cuda": cuda}


def describe_machine(info: dict[str, Any]) -> str:
    """`machine_info` as one line for a report."""
    gpu = f", GPU {info['cuda']}" if info.get("cuda") else ", no GPU"
    return (f"{info['date_utc']} UTC on {info['cpu']} ({info['cpu_count']} cores{gpu}), torch {info['torch']} "
            f"with {info['torch_cpu_capability']} kernels, {info['torch_threads']} thread(s), BLAS "
            f"{info.get('blas_threads')} thread(s)")
