"""`metrics.jsonl` and TensorBoard after a kill: the row being written when a logger is SIGKILLed
(`dreamgym.utils.paths.crash_point`, armed through $DREAMGYM_CRASH_AT in a subprocess) never swallows the next one, and a
run resumed from a checkpoint logs no step twice, whatever the prefixes logged at a step."""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from crash import run_python

from dreamgym.utils.metrics import MetricsLogger, read_metrics


# One training row and one evaluation row per step, as `dreamgym train` logs them, for steps 1..5.
LOG_FIVE = """
import sys
from dreamgym.utils.metrics import MetricsLogger
log = MetricsLogger(sys.argv[1], tensorboard=False)
for step in range(1, 6):
    log.log(step, {"loss": 1.0 / step}, prefix="train/")
    log.log(step, {"success_rate": step / 10}, prefix="eval/")
log.close()
"""


def _keys(rows):
    """(step, metric) of every logged value: what must not appear twice."""
    return [(r["step"], k) for r in rows for k in r if k not in ("step", "time")]


def _log_run(log: MetricsLogger, steps, tag: float = 0.0) -> None:
    for step in steps:
        log.log(step, {"loss": 1.0 / (step + 1) + tag}, prefix="train/")
        log.log(step, {"success_rate": step / 10 + tag}, prefix="eval/")


def test_a_resumed_run_logs_no_step_twice(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=False)
    _log_run(log, range(1, 6))  # killed after step 5; its last checkpoint was saved at step 3
    log.close()
    log = MetricsLogger(tmp_path, tensorboard=False)
    assert log.resume(3) == 4  # steps 4 and 5, two prefixes each
    _log_run(log, range(4, 7), tag=100.0)
    log.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    keys = _keys(rows)
    assert not [k for k, n in Counter(keys).items() if n > 1]
    assert sorted({s for s, _ in keys}) == [1, 2, 3, 4, 5, 6]
    assert [r["train/loss"] for r in rows if "train/loss" in r] == [1 / 2, 1 / 3, 1 / 4, 100 + 1 / 5, 100 + 1 / 6,
                                                                   100 + 1 / 7]


def test_a_run_resumed_without_a_checkpoint_starts_its_metrics_over(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=False)
    _log_run(log, [0, 1, 2])
    assert log.resume(None) == 6 and read_metrics(tmp_path / "metrics.jsonl") == []
    _log_run(log, [0, 1])
    log.close()
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 4


def test_resume_keeps_lines_it_cannot_read(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=False)
    _log_run(log, [1, 2])
    log.close()
    with open(tmp_path / "metrics.jsonl", "ab") as fh:
        fh.write(b'"a note"\n')
    log = MetricsLogger(tmp_path, tensorboard=False)
    assert log.resume(1) == 2
    log.close()
    assert (tmp_path / "metrics.jsonl").read_bytes().endswith(b'"a note"\n')


def test_tensorboard_shows_each_step_once_after_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLogger(tmp_path)
    _log_run(log, range(1, 6))
    log.close()
    log = MetricsLogger(tmp_path)
    log.resume(3)
    _log_run(log, range(4, 7), tag=100.0)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    for tag in ("train/loss", "eval/success_rate"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 2, 3, 4, 5, 6]
    assert [round(e.value, 3) for e in acc.Scalars("train/loss")] == [0.5, 0.333, 0.25, 100.2, 100.167, 100.143]


def test_a_row_torn_by_a_kill_does_not_swallow_the_next_one(tmp_path):
    proc = run_python(LOG_FIVE, str(tmp_path), crash="metrics.write@4")  # dies half-way through step 2's eval row
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    raw = (tmp_path / "metrics.jsonl").read_bytes()
    assert raw.count(b"\n") == 3 and not raw.endswith(b"\n")
    log = MetricsLogger(tmp_path, tensorboard=False)
    # The torn half-row is set aside, not dropped (the torn-tail rule of dreamgym.utils.jsonl).
    assert (tmp_path / "metrics.jsonl.torn").read_bytes() == raw[raw.rindex(b"\n") + 1:] + b"\n"
    log.resume(1)
    _log_run(log, range(2, 4))
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_bytes().splitlines()
    assert len(lines) == 6 and len(read_metrics(tmp_path / "metrics.jsonl")) == 6
    assert sorted(_keys(read_metrics(tmp_path / "metrics.jsonl"))) == sorted(
        (s, k) for s in (1, 2, 3) for k in ("train/loss", "eval/success_rate"))


@pytest.mark.parametrize("point", ["atomic_write.data", "atomic_write.replace"])
def test_a_kill_while_resume_rewrites_the_file_is_finished_by_the_next_resume(tmp_path, point):
    log = MetricsLogger(tmp_path, tensorboard=False)
    _log_run(log, range(1, 6))
    log.close()
    before = (tmp_path / "metrics.jsonl").read_bytes()
    code = "import sys; from dreamgym.utils.metrics import MetricsLogger; MetricsLogger(sys.argv[1], False).resume(3)"
    assert run_python(code, str(tmp_path), crash=point).returncode == -signal.SIGKILL
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    log = MetricsLogger(tmp_path, tensorboard=False)
    assert log.resume(3) == 4
    log.close()
    assert sorted({r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")}) == [1, 2, 3]
