import json
import os
import subprocess
import sys

from dreamgym.cli import COMMANDS, main
from dreamgym.utils.metrics import (MetricsLogger, busy_cores_warning, describe_machine, machine_info, pin_threads,
                              read_metrics)


def test_metrics_jsonl_and_tensorboard(tmp_path):
    log = MetricsLogger(tmp_path)
    log.log(1, {"loss": 0.5, "note": "x", "skip": [1]}, prefix="train/")
    log.log(2, {"loss": 0.25}, prefix="train/")
    log.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["train/loss"] for r in rows] == [0.5, 0.25] and rows[0]["train/note"] == "x"
    assert "train/skip" not in rows[0]
    assert any((tmp_path / "tb").iterdir())
    # A torn last line (killed writer) is skipped, the rest still reads.
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "train/lo')
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 2


def test_cli_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out
    assert main(["no-such-command"]) == 2


def test_cli_entry_point_runs_as_module():
    res = subprocess.run([sys.executable, "-m", "dreamgym.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "collect" in res.stdout


def test_machine_info_records_the_kernel_path_torch_runs_on():
    """The record must follow the kernels torch actually picks (they change results, docs/log/01-quickstart.md): forcing the
    portable path through ATEN_CPU_CAPABILITY shows up in a fresh process, and the line names it."""
    info = machine_info()
    assert info["cpu_count"] >= 1 and info["torch_threads"] >= 1 and info["cpu"]
    assert info["torch_cpu_capability"] in describe_machine(info) and info["date_utc"][:2] == "20"
    code = "import json; from dreamgym.utils.metrics import machine_info; print(json.dumps(machine_info()))"
    # Both thread variables: torch's default thread count follows MKL_NUM_THREADS too where the caller set it.
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    forced = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                       check=True).stdout.strip().splitlines()[-1])
    assert forced["torch_cpu_capability"] == "DEFAULT" and forced["torch_threads"] == 1
    assert forced["blas_threads"] == 1  # OpenBLAS follows OMP_NUM_THREADS unless pinned (docs/log/01-quickstart.md)


def test_more_torch_threads_than_idle_cores_are_said_in_one_line_and_kept():
    """train-em ran 8-15x slower with 2 threads than with 1 on 2 busy cores, with nothing saying so."""
    said = busy_cores_warning(2, load=1.0, cores=2)
    assert said is not None and "\n" not in said
    assert "2 torch threads but about 1 of 2 cores idle" in said and "threads=1" in said
    assert busy_cores_warning(2, load=0.3, cores=2) is None  # idle enough
    assert busy_cores_warning(1, load=8.0, cores=2) is None  # one thread is never too many
    assert busy_cores_warning(4, load=0.0, cores=2) is not None  # more threads than cores at all


def test_pinning_threads_on_a_busy_machine_warns_on_stderr_and_keeps_the_count(monkeypatch, capsys):
    import threadpoolctl
    import torch

    # Every core busy: the load average is the one input a test cannot set on a real machine.
    monkeypatch.setattr(os, "getloadavg", lambda: (float(os.cpu_count() or 1), 0.0, 0.0))
    torch_before = torch.get_num_threads()
    blas_before = threadpoolctl.threadpool_info()
    try:
        pin_threads(2)
        err = capsys.readouterr().err
        assert err.startswith("warning: 2 torch threads") and err.count("\n") == 1
        assert torch.get_num_threads() == 2
        pin_threads(1)
        assert capsys.readouterr().err == ""
    finally:
        torch.set_num_threads(torch_before)
        threadpoolctl.threadpool_limits(limits={i["prefix"]: i["num_threads"] for i in blas_before})


def test_the_thread_rule_of_every_command_is_explicit_then_omp_num_threads_then_torch_s_own():
    import torch
    import pytest

    from dreamgym.utils.metrics import resolve_threads

    assert resolve_threads(3, {"OMP_NUM_THREADS": "1"}) == 3
    assert resolve_threads(0, {"OMP_NUM_THREADS": "1"}) == 1
    assert resolve_threads(0, {"OMP_NUM_THREADS": "4,2"}) == 4  # OpenMP's nested form: the outer count
    assert resolve_threads(0, {}) == torch.get_num_threads()
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
            resolve_threads(0, {"OMP_NUM_THREADS": bad})
