"""`report_to` (`dreamgym.utils.metrics`): a `dreamgym train` run reports the same scalar series to TensorBoard, W&B
(offline mode: a run folder under the run directory) and trackio (its local store in a temporary folder), with no
network; `--no-progress` leaves no progress bar in its log; the command line's conventions (`--version`,
`python -m dreamgym`)."""

from __future__ import annotations

import glob
import json
import os
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from dreamgym.config import ConfigError, load_config
from dreamgym.commands.train import TrainConfig
from dreamgym.utils.metrics import parse_report_to

ROOT = Path(__file__).resolve().parents[2]

Series = dict[str, list[tuple[int, float]]]


def _tensorboard(folder: Path) -> Series:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _wandb_records(path: str) -> list[bytes]:
    """The records of a W&B `.wandb` file: a 7-byte file header, then LevelDB's log format (32 KiB blocks of chunks,
    each with a 7-byte header: CRC, length, type 1 full / 2 first / 3 middle / 4 last). W&B's Python package no longer
    ships a reader of its own (the `wandb-core` binary writes these files)."""
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, part, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is zero padding
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and n == 0:
            pos += left - 7
            continue
        part += data[pos:pos + n]
        pos += n
        if kind in (1, 4):
            out.append(part)
            part = b""
    return out


def _wandb(run_dir: Path) -> Series:
    from wandb.proto import wandb_internal_pb2

    files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb"))
    assert len(files) == 1, files
    series: Series = defaultdict(list)
    for raw in _wandb_records(files[0]):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for k, v in row.items():
            if not k.startswith("_") and k != "step":
                series[k].append((int(row["step"]), float(v)))
    return dict(series)


def _trackio(store: Path, run: str) -> Series:
    # trackio reads TRACKIO_DIR when it is imported: in a fresh interpreter, pointed at the test's store.
    code = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage\n"
            "print(json.dumps(SQLiteStorage.get_logs(sys.argv[1], sys.argv[2])))")
    res = subprocess.run([sys.executable, "-c", code, "dreamgym", run], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRACKIO_DIR": str(store)}, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    series: Series = defaultdict(list)
    for row in json.loads(res.stdout.strip().splitlines()[-1]):
        for k, v in row.items():
            if k not in ("step", "timestamp") and isinstance(v, (int, float)):
                series[k].append((int(row["step"]), float(v)))
    return dict(series)


def _close(a: Series, b: Series) -> bool:
    """The same names, steps and values (TensorBoard keeps float32)."""
    return a.keys() == b.keys() and all(
        [s for s, _ in a[k]] == [s for s, _ in b[k]] and
        all(abs(x - y) <= 1e-6 * max(1.0, abs(x)) for (_, x), (_, y) in zip(a[k], b[k])) for k in a)


@pytest.mark.slow
def test_a_train_run_reports_the_same_series_to_tensorboard_wandb_and_trackio_and_draws_no_bar(tmp_path):
    run_dir, store = tmp_path / "sft", tmp_path / "trackio"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "TRACKIO_DIR": str(store), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("WANDB_PROJECT", None)
    env.pop("TRACKIO_PROJECT", None)
    res = subprocess.run(
        [sys.executable, "-m", "dreamgym", "train", "--algo", "sft", "--env", "dial", "--no-progress",
         f"run_dir={run_dir}", "demo_episodes=4", "sft.epochs=1", "sft.batch_size=4", "sft.log_every=1",
         "save_every=0", "eval_max_tasks=2", "agent.history=0", "agent.show_admissible=false",
         "rollout.max_new_tokens=6", "rollout.max_episode_steps=2", "report_to=tensorboard,wandb,trackio"],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    # No progress bar of any library: transformers draws one while writing the checkpoints' weights.
    log = res.stdout + res.stderr
    assert "Writing model shards" not in log and "Loading weights" not in log and "it/s]" not in log, log[-3000:]

    tb = _tensorboard(run_dir / "tb")
    assert {"losses/loss", "eval/success_rate"} <= tb.keys() and len(tb["losses/loss"]) == 4
    assert _close(tb, _wandb(run_dir)), (tb, _wandb(run_dir))
    assert _close(tb, _trackio(store, "sft")), (tb, _trackio(store, "sft"))


def test_report_to_names_trackers_and_refuses_an_unknown_one_naming_the_field():
    assert parse_report_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert parse_report_to("none") == [] and parse_report_to("") == []
    with pytest.raises(ConfigError, match="report_to.*unknown tracker 'mlflow'"):
        load_config(TrainConfig, None, ["report_to=tensorboard,mlflow"])


def test_version_and_python_m_dreamgym():
    from dreamgym import __version__

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["--version"], ["--help"]):
        res = subprocess.run([sys.executable, "-m", "dreamgym", *argv], capture_output=True, text=True, timeout=120,
                             env=env, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        if argv == ["--version"]:
            assert res.stdout.strip() == f"dreamgym {__version__}"
        else:
            assert "train-em" in res.stdout and "--version" in res.stdout
