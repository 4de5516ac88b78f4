"""Run metrics: every scalar goes to `metrics.jsonl` in the run directory and to TensorBoard.

Owns: the metrics file format (one JSON object per line: {"step": int, "time": float, "<name>": value...}).
Must not know: trainers, environments.
"""

from __future__ import annotations

import json
import os
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
