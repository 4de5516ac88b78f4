"""Start-up checks (`dreamgym.checks`, `dreamgym.utils.filecheck`, `collect.check_env_kwargs` and the commands' use of
them): bad input is refused in one line (exit 2) before any model loads, anything runs or anything is written:
every record of the data, whole weights, paths of the right kind under a folder, the environment's keywords,
serve-env's split."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import refusals
from model_fixtures import em_checkpoint
from plugins import dist_info
from refusals import TINY, refused

from dreamgym.utils import filecheck
from dreamgym.cli import main as cli
from dreamgym.commands.collect import check_env_kwargs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dial_data(tmp_path_factory) -> Path:
    return refusals.dial_data(tmp_path_factory.mktemp("data"))


def _with_line(src: Path, dst: Path, lineno: int, line: str | None = None, change=None) -> Path:
    lines = src.read_text().splitlines()
    if change is not None:
        rec = json.loads(lines[lineno - 1])
        change(rec)
        line = json.dumps(rec)
    lines[lineno - 1] = line
    dst.write_text("\n".join(lines) + "\n")
    return dst


def _set_action(rec):
    rec["steps"][0]["action"] = 123


def _drop_task(rec):
    del rec["task"]


@pytest.mark.parametrize("algo", ["sft", "dpo"])
@pytest.mark.parametrize("damage, where", [
    ("torn", ":8: truncated record"),
    ("garbage", ":6: not valid JSON"),
    ("schema", ":6: not a trajectory record: missing field 'task'"),
    ("types", ":6: not a trajectory record: TypeError: field 'action' must be of type str, got int"),
])
def test_offline_training_reads_every_record_before_the_model_loads(algo, damage, where, dial_data, tmp_path,
                                                                    capsys):
    bad = tmp_path / "bad.jsonl"
    if damage == "torn":
        bad.write_bytes(dial_data.read_bytes()[:-40])
    elif damage == "garbage":
        _with_line(dial_data, bad, 6, "garbage{")
    else:
        _with_line(dial_data, bad, 6, change=_drop_task if damage == "schema" else _set_action)
    refused(capsys, ["train", "--algo", algo, "--env", "dial", f"data={bad}", f"run_dir={tmp_path / 'r'}", *TINY],
            f"{bad}{where}")
    assert not (tmp_path / "r").exists()  # refused before the run folder (and any model)


def _truncated_em(tmp_path: Path) -> Path:
    em = tmp_path / "em"
    shutil.copytree(em_checkpoint(), em)
    weights = em / "model" / "model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)
    return em


def test_a_truncated_experience_model_is_refused_before_it_loads(dial_data, tmp_path, capsys):
    em = _truncated_em(tmp_path)
    weights = em / "model" / "model.safetensors"
    refused(capsys, ["eval-em", "--env", "dial", "--model", str(em), "--data", str(dial_data)], f"{weights}: truncated")
    refused(capsys, ["export-em", str(em), str(tmp_path / "out")], f"{weights}: truncated")
    assert not (tmp_path / "out").exists()
    weights.unlink()
    refused(capsys, ["export-em", str(em), str(tmp_path / "out")], "holds no weights")


def test_a_truncated_policy_is_refused_on_resume_and_as_init(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(["train", "--algo", "grpo", "--env", "dial", f"run_dir={run}", "iterations=1", "group_size=2",
                "tasks_per_iteration=1", "eval_at_start=false", *TINY]) == 0
    capsys.readouterr()
    weights = run / "checkpoint" / "model" / "model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size - 100)
    refused(capsys, ["train", "--algo", "grpo", "--env", "dial", f"run_dir={run}", "--resume", *TINY],
            f"cannot resume from {run / 'checkpoint'}", "truncated")
    refused(capsys, ["train", "--algo", "grpo", "--env", "dial", f"run_dir={tmp_path / 'r2'}",
                     f"init={run / 'checkpoint'}", *TINY], "init:", "truncated")
    model = tmp_path / "model"  # a plain model folder whose weights are missing
    shutil.copytree(run / "final" / "model", model)
    (model / "model.safetensors").unlink()
    refused(capsys, ["train", "--algo", "grpo", "--env", "dial", f"run_dir={tmp_path / 'r2'}", f"init={model}",
                     *TINY], "init:", "holds no weights")
    assert not (tmp_path / "r2").exists()


def test_model_weights_accepts_whole_files_and_names_the_damage(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(Path(em_checkpoint()) / "model", folder)
    filecheck.model_weights(folder)
    f = folder / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match="damaged: 1 bytes after its last tensor"):
        filecheck.model_weights(folder)
    f.write_bytes(data[:5])
    with pytest.raises(ValueError, match="truncated"):
        filecheck.model_weights(folder)
    f.write_bytes(len(b"{oops").to_bytes(8, "little") + b"{oops")
    with pytest.raises(ValueError, match="header is not JSON"):
        filecheck.model_weights(folder)


def test_collect_refuses_a_keyword_the_environment_does_not_take_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    refused(capsys, ["collect", "--env", "dial", "--episodes", "2", "--out", str(out), "--env-kw", "bogus=1"],
            "'bogus': not a keyword of the dial environment", "max_steps")
    assert list(tmp_path.iterdir()) == []
    # MiniWoB++ tasks are chosen by the split (train:NAME,...), not by a keyword
    refused(capsys, ["collect", "--env", "miniwob", "--episodes", "2", "--out", str(out), "--env-kw",
                     "tasks=click-button"], "'tasks': not a keyword of the miniwob environment")
    assert list(tmp_path.iterdir()) == []
    assert cli(["collect", "--env", "dial", "--episodes", "2", "--out", str(out), "--env-kw", "max_steps=3",
                "--no-progress"]) == 0


def test_env_kwargs_follows_make_env_to_the_environment_class():
    check_env_kwargs("webshop", {"max_steps": 3, "n_products": 50})
    with pytest.raises(ValueError, match="'colour': not a keyword of the webshop environment .*n_products"):
        check_env_kwargs("webshop", {"colour": 1})


def test_collect_refuses_a_value_the_environment_cannot_take_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    refused(capsys, ["collect", "--env", "dial", "--episodes", "2", "--out", str(out), "--env-kw", "max_steps=ten"],
            "max_steps='ten': not a value of the dial environment's max_steps (int)")
    assert list(tmp_path.iterdir()) == []


def test_env_kwargs_values_fit_the_parameters_annotations():
    check_env_kwargs("webshop", {"official_dir": "/data/webshop", "catalog_key": None, "max_steps": 3})
    with pytest.raises(ValueError, match=r"n_products=\[50\]: not a value of the webshop environment's n_products "
                                         r"\(int\)"):
        check_env_kwargs("webshop", {"n_products": [50]})
    with pytest.raises(ValueError, match="official_dir=5: .*str | pathlib.Path | None"):
        check_env_kwargs("webshop", {"official_dir": 5})
    with pytest.raises(ValueError, match="browsers='two': not a value of the miniwob environment's browsers"):
        check_env_kwargs("miniwob", {"browsers": "two"})  # make_env's own keyword


def test_a_family_field_allows_the_built_in_families_and_those_installed_packages_add(tmp_path):
    """The errors and `--help` name the families found where they run; the generated reference, the rule."""
    dist_info(tmp_path, {"lamps": "familypkg.lamps"})
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}:{ROOT / 'tests' / 'fixtures'}", "PATH": "/usr/bin:/bin",
           "HF_HUB_OFFLINE": "1"}
    rule = ("dial, webshop, alfworld, textworld, miniwob, webarena_lite, or a family an installed package declares "
            "in the `dreamgym.envs` entry-point group")

    def dreamgym(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dreamgym.cli", *argv], capture_output=True, text=True,
                              timeout=300, env=env)

    train = dreamgym("train", "--algo", "grpo", "--env", "lampz")
    assert train.returncode == 2 and train.stderr.count("\n") == 1
    assert f"unknown environment family 'lampz' (allowed: {rule} (found: lamps))" in train.stderr
    collect = dreamgym("collect", "--env", "lampz", "--episodes", "1", "--out", str(tmp_path / "x.jsonl"))
    assert collect.returncode == 2 and f"{rule} (found: lamps)" in collect.stderr
    assert f"{rule} (found: lamps)" in " ".join(dreamgym("collect", "--help").stdout.split())
    reference = " ".join(((ROOT / "docs/reference/config.md").read_text() + (ROOT / "docs/reference/cli.md").read_text())
                         .split())
    assert reference.count(rule) == 7  # the five configs' env fields, collect's and check-family's --env and "found:" not in reference and "{alfworld,dial" not in reference


def test_paths_of_the_wrong_kind_or_under_a_file_are_refused(tmp_path, capsys):
    (tmp_path / "d.jsonl").mkdir()
    (tmp_path / "file").write_text("x")
    refused(capsys, ["collect", "--env", "dial", "--episodes", "1", "--out", str(tmp_path / "d.jsonl"),
                     "--overwrite"], f"{tmp_path / 'd.jsonl'} is a folder, not a file")
    assert "Exception ignored" not in capsys.readouterr().err
    refused(capsys, ["collect", "--env", "dial", "--episodes", "1", "--out", str(tmp_path / "file" / "x.parquet")],
            f"its parent {tmp_path / 'file'} is a file, not a folder")
    run = tmp_path / "run"
    run.mkdir()
    refused(capsys, ["view", str(run), "--export", str(tmp_path / "file" / "site")],
            f"its parent {tmp_path / 'file'} is a file")
    refused(capsys, ["train", "--algo", "grpo", "--env", "dial", f"run_dir={tmp_path / 'file'}", *TINY],
            "is a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "file", "run"]


def test_an_output_path_that_is_no_regular_file_or_cannot_be_created_is_refused_before_any_work(tmp_path, capsys):
    """Issue 69, 1-2: `--episodes-out`/`--json` naming a FIFO or a device were replaced by a regular file (exit 0), and a
    folder that cannot be created failed only after the whole evaluation, in a traceback. Now one rule, at start-up:
    a regular file or nothing, under a folder that can be created and written."""
    import os

    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    for option in ("--episodes-out", "--json"):
        refused(capsys, ["eval", "--env", "dial", "--max-tasks", "1", option, str(fifo)],
                f"{option}: {fifo} is a FIFO, not a file")
        assert fifo.is_fifo()
    # A device node is checked without touching one: the rule is the file's kind, read by stat.
    with pytest.raises(ValueError, match=f"{os.devnull} is a device, not a file"):
        filecheck.output_path(os.devnull, "file")
    refused(capsys, ["eval", "--env", "dial", "--max-tasks", "1", "--episodes-out", "/proc/nope/x.jsonl"],
            "/proc/nope/x.jsonl: cannot create folders in /proc")
    refused(capsys, ["eval", "--env", "dial", "--max-tasks", "1", "--json", "/proc/x.json"], "cannot write in /proc")
    # Nothing is left behind by the check itself: the probe entries it makes are removed.
    filecheck.output_path(tmp_path / "new" / "deeper" / "x.jsonl", "file")
    filecheck.output_path(tmp_path / "y.jsonl", "file")
    filecheck.output_path(tmp_path, "folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]


def test_eval_tasks_from_another_familys_data_names_the_family(tmp_path, capsys):
    """Issue 69, 8: before, "no test tasks left"; now the record and its family are named."""
    from dreamgym.data import write_jsonl
    from dreamgym.types import Step, Task, Trajectory

    task = Task(id="lamps-0", env="lamps", instruction="light the lamp", goal={}, split="test")
    path = tmp_path / "lamps.jsonl"
    write_jsonl(path, [Trajectory(task=task, steps=[Step(state="dark", action="toggle", reward=1.0, terminated=True,
                                                         truncated=False, next_state="lit")])])
    refused(capsys, ["eval", "--env", "dial", "--tasks-from", str(path)],
            "a task of environment family 'lamps', not 'dial'")


@pytest.mark.parametrize("env", ["dial", "webshop"])
def test_serve_env_refuses_a_split_without_tasks_before_it_binds(env):
    p = subprocess.run([sys.executable, "-m", "dreamgym.cli", "serve-env", "--env", env, "--split", "nosuch",
                        "--port", "0"], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "Traceback" not in p.stderr and "serving" not in p.stdout
    assert p.stderr.strip().splitlines()[-1].startswith("dreamgym serve-env: split: 'nosuch': ")
