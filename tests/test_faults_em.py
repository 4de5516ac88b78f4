"""Crash safety of experience-model training: a `dreamgym train-em` run SIGKILLed at a write point of its resumable
checkpoint or of its final export (`dreamgym.utils.paths.crash_point`, armed in a subprocess) is never taken for a trained
model, and running the same command again finishes it with exactly the weights and metrics of an uninterrupted run."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from crash import run_python
from safetensors.torch import load_file

from dreamgym.experience.checkpoint import is_trained

TRAIN_EM = "import sys\nfrom dreamgym.experience.train import main\nsys.exit(main(sys.argv[1:]))"
# 6 steps, a resumable checkpoint after steps 2 and 4 (write_checkpoint's points are passed once per save), then the
# final state (the third save) and the export of model/ (the fourth atomic_dir).
SETTINGS = ["max_steps=6", "batch_size=4", "save_every=2", "log_every=1", "em.embedder=hashing", "em.k=1",
            "task_writing=0", "threads=1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl

    path = tmp_path_factory.mktemp("em-data") / "d.jsonl"
    write_jsonl(path, dial_trajectories(12))
    return path


def _train(data: Path, out: Path, crash: str | None = None):
    return run_python(TRAIN_EM, "--env", "dial", "--data", str(data), "--out", str(out), *SETTINGS, crash=crash)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def _metric_steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("em-whole") / "em"
    proc = _train(data, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("point", [
    "checkpoint.weights@2",   # the second resumable checkpoint half written
    "atomic_dir.swap@2",      # between the renames of the second one: no checkpoint/, the first under .checkpoint.old
    "atomic_dir.replaced@4",  # model/ exported, em_config.json (what marks the model trained) not yet written
])
def test_a_killed_run_is_not_a_model_and_resumes_to_the_uninterrupted_result(data, uninterrupted, tmp_path, point):
    out = tmp_path / "em"
    proc = _train(data, out, crash=point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not is_trained(out)
    proc = _train(data, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming from step" in proc.stdout
    assert is_trained(out) and json.loads((out / "em_config.json").read_text())["steps"] == 6
    want, got = _weights(uninterrupted), _weights(out)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert _metric_steps(out) == _metric_steps(uninterrupted) == [1, 2, 3, 4, 5, 6]


def test_an_unloadable_checkpoint_is_refused_before_training(data, uninterrupted, tmp_path):
    out = tmp_path / "em"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.json").write_text('{"iteration": 1, "kind": "full"}')
    proc = _train(data, out)
    assert proc.returncode == 2 and "cannot resume from" in proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "model").exists()
