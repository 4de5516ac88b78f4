"""Run metrics: every scalar goes to `metrics.jsonl` in the run directory and to TensorBoard; `machine_info` is the
record of where a run's numbers came from.

Owns: the metrics file format (one JSON object per line: {"step": int, "time": float, "<name>": value...}) and the
machine record that summaries and reports carry, with `pin_threads`, which sets the two thread pools it records.
Must not know: trainers, environments.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from pathlib import Path
from typing import Any


class MetricsLogger:
    def __init__(self, run_dir: str | Path, tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.run_dir / "tb"))
            except Exception:  # noqa: BLE001 - TensorBoard is a convenience; JSONL is the record
                self._tb = None

    def log(self, step: int, metrics: dict[str, Any], prefix: str = "") -> None:
        row: dict[str, Any] = {"step": int(step), "time": time.time()}
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[prefix + k] = float(v)
                if self._tb is not None:
                    self._tb.add_scalar(prefix + k, float(v), int(step))
            elif isinstance(v, (str, bool)) or v is None:
                row[prefix + k] = v
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


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


def pin_threads(n: int) -> None:
    """Set torch's CPU threads and numpy's BLAS threads to `n`, for the rest of the process. Both change results,
    not only speed: BLAS scores retrieved examples and otherwise takes its count from OPENBLAS_NUM_THREADS /
    OMP_NUM_THREADS, so the shell changed which near-tied example a prompt showed and the trained weights with it
    (README section 1: the dial experience model's loss differed from step 100 under OMP_NUM_THREADS=1)."""
    import threadpoolctl
    import torch

    torch.set_num_threads(n)
    threadpoolctl.threadpool_limits(limits=n, user_api="blas")


def machine_info() -> dict[str, Any]:
    """Where and when a run's numbers were made: UTC date, CPU model and cores, the kernel path torch picked on this
    CPU, torch threads, numpy's BLAS threads, GPU. Kernels and threads are recorded because they change results,
    not only speed: the dial quickstart's 16-epoch SFT lands at 31.1% with AVX-512 kernels on 2 threads, and at
    9.4% with AVX2 kernels or on 1 thread, with the same code, data and seed (README section 1). A table
    reproduces only where this record matches."""
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
