"""Crash safety of trainer checkpoints and atomic file writes: a process SIGKILLed at every named write point
(`dreamgym.utils.paths.crash_point`, armed through $DREAMGYM_CRASH_AT in a subprocess) leaves a loadable checkpoint or a
whole file, and resume refuses a run folder whose checkpoint cannot be loaded instead of restarting it."""

from __future__ import annotations

import copy
import os
import signal
from pathlib import Path

import pytest
from crash import run_python
import torch

from dreamgym.utils.paths import atomic_write_text
from dreamgym.trainers.checkpoint import (META_FILE, STATE_FILE, CheckpointError, atomic_dir, read_meta,
                                          resumable_checkpoint)
from dreamgym.trainers.common import BaseTrainer, TrainerConfig


# Saves iteration 1, then iteration 2 with changed weights; each crash point is armed at its pass inside the second
# save, when a good checkpoint is already on disk (the swap point is only passed when there is one to move aside).
SAVE_TWICE = """
import sys, torch
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.presets import load_preset
from dreamgym.trainers.common import BaseTrainer, TrainerConfig
model, tok = load_preset("tiny", device="cpu")
trainer = BaseTrainer(HFBackend(model, tok), TrainerConfig(seed=0))
trainer._build_optimizer()
trainer.save(sys.argv[1], {"iteration": 1})
with torch.no_grad():
    for p in trainer.model.parameters():
        p.add_(1.0)
trainer.save(sys.argv[1], {"iteration": 2})
"""


@pytest.fixture(scope="module")
def tiny_preset():
    from dreamgym.llm.presets import load_preset

    return load_preset("tiny", device="cpu")


@pytest.fixture
def tiny_backend(tiny_preset):
    from dreamgym.llm.hf import HFBackend

    model, tok = tiny_preset
    return HFBackend(copy.deepcopy(model), tok)


def _trainer(tiny_backend) -> BaseTrainer:
    trainer = BaseTrainer(tiny_backend, TrainerConfig(seed=0))
    trainer._build_optimizer()
    return trainer


@pytest.mark.parametrize("point, survivor", [
    ("checkpoint.weights@2", 1),   # the new checkpoint half written in its temporary folder
    ("atomic_dir.filled@2", 1),    # the new one complete but not switched in
    ("atomic_dir.swap", 1),        # between the two renames: no checkpoint/, the old one under .checkpoint.old
    ("atomic_dir.replaced@2", 2),  # switched, the old one not yet deleted
])
def test_a_kill_at_any_point_of_a_save_leaves_a_loadable_checkpoint(tmp_path, tiny_backend, point, survivor):
    ckpt = tmp_path / "run" / "checkpoint"
    proc = run_python(SAVE_TWICE, str(ckpt), crash=point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    found = resumable_checkpoint(ckpt)
    assert found == ckpt and read_meta(ckpt)["iteration"] == survivor
    trainer = _trainer(tiny_backend)
    assert trainer.load(found)["iteration"] == survivor
    # Nothing of the interrupted save is left to confuse the next one, which works as usual.
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoint"]
    trainer.save(ckpt, {"iteration": 3})
    assert resumable_checkpoint(ckpt) == ckpt and read_meta(ckpt)["iteration"] == 3


def test_an_uninterrupted_save_writes_the_same_folder_and_loads_back(tmp_path, tiny_backend):
    trainer = _trainer(tiny_backend)
    ckpt = tmp_path / "checkpoint"
    for it in (1, 2):
        trainer.save(ckpt, {"iteration": it, "budget": {"limit": 9, "used": it}})
    files = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())
    assert {META_FILE, STATE_FILE, "model/model.safetensors", "model/config.json"} <= set(files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no temporary or old folder left
    want = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.zero_()
    # The run state it was saved with comes back: the loop continues from it.
    assert trainer.load(resumable_checkpoint(ckpt)) == {"iteration": 2, "budget": {"limit": 9, "used": 2}}
    assert read_meta(ckpt)["iteration"] == 2 and read_meta(ckpt)["real_steps_used"] == 2
    assert all(torch.equal(want[k], v) for k, v in trainer.model.state_dict().items())


def test_a_run_that_never_completed_a_checkpoint_starts_over(tmp_path):
    assert resumable_checkpoint(tmp_path / "checkpoint") is None
    # A first save killed while filling its temporary folder: nothing was ever switched in.
    (tmp_path / ".checkpoint.abc123.tmp" / "model").mkdir(parents=True)
    assert resumable_checkpoint(tmp_path / "checkpoint") is None
    assert not (tmp_path / ".checkpoint.abc123.tmp").exists()


def _fake_checkpoint(d: Path, iteration: int) -> None:
    """The files `checkpoint_problem` reads: its meta, a state file and one small whole weights file."""
    import numpy as np
    from safetensors.numpy import save_file

    (d / "model").mkdir(parents=True)
    save_file({"w": np.zeros(2, dtype=np.float32)}, str(d / "model" / "model.safetensors"))
    (d / STATE_FILE).write_bytes(b"x")
    (d / META_FILE).write_text(f'{{"iteration": {iteration}, "kind": "full"}}')


@pytest.mark.parametrize("missing", [STATE_FILE, META_FILE, "model/model.safetensors"])
def test_resume_refuses_a_checkpoint_it_cannot_load(tmp_path, missing):
    ckpt = tmp_path / "checkpoint"
    _fake_checkpoint(ckpt, 4)
    (ckpt / missing).unlink()
    with pytest.raises(CheckpointError, match="cannot resume from .*checkpoint"):
        resumable_checkpoint(ckpt)


def test_a_swap_interrupted_under_the_old_naming_is_recovered_or_refused(tmp_path):
    # Run folders killed by the earlier atomic_dir hold the good checkpoint under .checkpoint.old-<pid>-<ns>.
    ckpt = tmp_path / "checkpoint"
    _fake_checkpoint(tmp_path / ".checkpoint.old-123-456", 7)
    assert resumable_checkpoint(ckpt) == ckpt and read_meta(ckpt)["iteration"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]
    # Two of them and no checkpoint/: which one was current is unknown, so resume must not guess.
    os.rename(ckpt, tmp_path / ".checkpoint.old-1-2")
    _fake_checkpoint(tmp_path / ".checkpoint.old-3-4", 8)
    with pytest.raises(CheckpointError, match="2 earlier versions"):
        resumable_checkpoint(ckpt)


ATOMIC_DIR = """
import sys
from pathlib import Path
from dreamgym.trainers.checkpoint import atomic_dir
final = Path(sys.argv[1])
with atomic_dir(final) as tmp:
    (tmp / "v").write_text(sys.argv[2])
"""


@pytest.mark.parametrize("point, survivor", [("atomic_dir.filled", "old"), ("atomic_dir.swap", "old"),
                                             ("atomic_dir.replaced", "new")])
def test_atomic_dir_is_never_left_without_a_whole_folder(tmp_path, point, survivor):
    final = tmp_path / "d"
    with atomic_dir(final) as tmp:
        (tmp / "v").write_text("old")
    assert run_python(ATOMIC_DIR, str(final), "new", crash=point).returncode == -signal.SIGKILL
    with atomic_dir(final) as tmp:  # the next switch recovers first, then works as usual
        assert (final / "v").read_text() == survivor
        (tmp / "v").write_text("newer")
    assert (final / "v").read_text() == "newer" and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


ATOMIC_WRITE = """
import sys
from dreamgym.utils.paths import atomic_write_text
atomic_write_text(sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize("point", ["atomic_write.data", "atomic_write.replace"])
def test_atomic_write_killed_at_each_point_keeps_the_old_file(tmp_path, point):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")
    assert run_python(ATOMIC_WRITE, str(target), "new" * 1000, crash=point).returncode == -signal.SIGKILL
    assert target.read_text() == "old"
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
