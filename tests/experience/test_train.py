import json

import pytest

from dreamgym.experience.checkpoint import checkpoint_model_config, read_checkpoint_meta
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.trainers.common import ModelConfig
from dreamgym.experience.model import ExperienceModel
from dreamgym.experience.train import TrainEMConfig, main, train_em
from em_helpers import dial_query, dial_trajectories


def test_train_em_cli_resumes_from_its_checkpoint(tmp_path):
    from dreamgym.data import write_jsonl

    data = tmp_path / "d.jsonl"
    write_jsonl(data, dial_trajectories(20))
    out = tmp_path / "em"
    args = ["--env", "dial", "--data", str(data), "--out", str(out), "max_steps=4", "batch_size=4",
            "em.embedder=hashing", "em.k=1", "save_every=2", "log_every=2"]
    assert main(args) == 0
    s1 = json.loads((out / "train_summary.json").read_text())
    assert s1["steps"] == 4 and (out / "metrics.jsonl").is_file()
    assert main(args[:-4] + ["max_steps=6", "em.embedder=hashing", "em.k=1"]) == 0
    meta = json.loads((out / "em_config.json").read_text())
    assert meta["steps"] == 6 and json.loads((out / "train_summary.json").read_text())["steps"] == 6
    assert main(["--env", "dial", "--data", str(data), "nonsense.key=1"]) == 2


def test_the_dreamgym_command_reaches_train_em():
    from dreamgym.cli import COMMANDS

    module, func = COMMANDS["train-em"][0].split(":")
    assert (module, func) == ("dreamgym.experience.fidelity", "train_em_main")


def test_train_em_holds_out_a_seeded_split_it_never_trains_on_and_warns_when_the_model_is_unfit(tmp_path, capsys):
    """Two steps of training teach the tiny preset nothing: the command still succeeds, but its held-out report
    (on trajectories chosen by the seed, recorded, and left out of training) says loudly that the model is not fit
    to dream in, in the summary, in the metrics and on stderr."""
    from dreamgym.data import write_jsonl
    from dreamgym.experience.train import HELDOUT_FILE, split_heldout
    from dreamgym.experience.fidelity import train_em_main

    trajs = dial_trajectories(20)
    data = tmp_path / "d.jsonl"
    write_jsonl(data, trajs)
    out = tmp_path / "em"
    assert train_em_main(["--env", "dial", "--data", str(data), "--out", str(out), "max_steps=2", "batch_size=4",
                          "em.embedder=hashing", "em.k=1", "em.max_new_tokens=128", "heldout.max_steps=6",
                          "task_writing=0", "threads=1"]) == 0
    io = capsys.readouterr()
    held = json.loads((out / HELDOUT_FILE).read_text())
    assert held["trajectories"] == split_heldout(trajs, 0.1, 0) and len(held["trajectories"]) == 2
    assert held["ids"] == [trajs[i].id for i in held["trajectories"]]
    assert split_heldout(trajs, 0.1, 1) != held["trajectories"]  # the seed chooses
    assert "18 trajectories -> " in io.out  # the held-out ones are not trained on
    report = json.loads((out / "train_summary.json").read_text())["heldout"]
    assert report["n"] == 6 and report["fit"] is False and report["reasons"]
    assert "NOT FIT TO DREAM IN" in io.err and all(r in io.err for r in report["reasons"])
    # The run closes in a few lines, the verdict among them; the whole summary is in its file, not on the terminal.
    closing = io.out.rstrip().splitlines()[-2:]
    assert closing[0].startswith("held-out (6 steps): ") and closing[0].endswith("NOT fit to dream in")
    assert closing[1] == f"summary: {out / 'train_summary.json'}" and '"retrieval_time_s"' not in io.out
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["em/heldout/fit"] is False and row["em/heldout/state_f1"] == report["state_f1"]
    assert 0.0 <= row["em/heldout/format_validity"] <= 1.0


def test_lora_training_writes_a_peft_adapter_that_loads(tmp_path):
    out = tmp_path / "lora"
    cfg = TrainEMConfig(env="dial", data="unused", out=str(out), model=ModelConfig(lora=True), max_steps=2,
                        batch_size=4, em=ExperienceModelConfig(k=0, use_retrieval=False), log_every=1)
    summary = train_em(cfg, trajectories=dial_trajectories(6))
    assert summary["lora"] and summary["steps"] == 2
    assert (out / "model" / "adapter_config.json").is_file() and not (out / "model" / "config.json").exists()
    m = ExperienceModel.load(out, device="cpu", config_overrides=["max_new_tokens=24", "retries=0"])
    (p,) = m.predict([dial_query(3, "turn up")])
    assert isinstance(p.failed, bool) and m.stats["predictions"] == 1  # 2 steps teach nothing; it must run


def test_embedder_spec_is_checked_at_start_up():
    from dreamgym.config import ConfigError, load_config

    assert load_config(TrainEMConfig, None, ["em.embedder=hashing:64+action:2"]).em.embedder.endswith("+action:2")
    for bad in ("hashing+words", "hashing:x", "word2vec"):
        with pytest.raises(ConfigError, match="embedder"):
            load_config(TrainEMConfig, None, [f"em.embedder={bad}"])


def test_checkpoints_from_before_compact_states_read_it_as_off(tmp_path):
    """Old checkpoints must still load as they were trained: a missing `compact_states` means whole states."""
    with pytest.raises(FileNotFoundError, match="em_config.json"):
        read_checkpoint_meta(tmp_path)
    (tmp_path / "em_config.json").write_text(json.dumps({"env": "dial", "model": {"k": 1}}))
    cfg = checkpoint_model_config(read_checkpoint_meta(tmp_path))
    assert cfg.k == 1 and cfg.compact_states is False
    assert checkpoint_model_config({"model": {"compact_states": True}}).compact_states is True


def test_train_em_scores_its_held_out_split_during_training_without_changing_what_it_trains(tmp_path):
    """`heldout.every` adds a fidelity curve (summary, metrics) and leaves the trained weights byte for byte those of
    a run that scores only at the end; `heldout.patience` stops a run whose next-state F1 stalls, and resuming the
    stopped run trains no further."""
    from dreamgym.data import write_jsonl
    from dreamgym.experience.fidelity import train_em_main

    data = tmp_path / "d.jsonl"
    write_jsonl(data, dial_trajectories(20))
    common = ["--env", "dial", "--data", str(data), "max_steps=6", "batch_size=4", "em.embedder=hashing", "em.k=1",
              "em.max_new_tokens=96", "heldout.max_steps=4", "task_writing=0", "threads=1", "log_every=2"]

    def run(name: str, *extra: str) -> dict:
        assert train_em_main(common + ["--out", str(tmp_path / name), *extra]) == 0
        return json.loads((tmp_path / name / "train_summary.json").read_text())

    plain, curved = run("plain"), run("curved", "heldout.every=2")
    assert "heldout_curve" not in plain and not plain["stopped_early"]
    assert [p["step"] for p in curved["heldout_curve"]] == [2, 4, 6]
    assert curved["heldout_curve"][-1]["state_f1"] == curved["heldout"]["state_f1"]
    rows = [json.loads(line) for line in (tmp_path / "curved" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "em/heldout/state_f1" in r] == [2, 4, 6]
    weights = "model/model.safetensors"
    assert (tmp_path / "plain" / weights).read_bytes() == (tmp_path / "curved" / weights).read_bytes()

    # No rise can reach a min_delta of 2 (F1 is at most 1): the second scoring is one without improvement.
    stop = ("heldout.every=2", "heldout.patience=1", "heldout.min_delta=2")
    stopped = run("stopped", *stop)
    assert stopped["stopped_early"] and stopped["steps"] == 4
    assert [p["step"] for p in stopped["heldout_curve"]] == [2, 4]
    again = run("stopped", *stop)
    assert again["steps"] == 4 and [p["step"] for p in again["heldout_curve"]] == [2, 4]
    assert train_em_main(common + ["--out", str(tmp_path / "bad"), "heldout.patience=2"]) == 2


def test_train_em_takes_its_threads_from_omp_num_threads_by_the_rule_of_every_command(tmp_path, monkeypatch, capsys):
    """The default thread count is the shell's (OMP_NUM_THREADS), as for `dreamgym train`: a default of 2 that
    overrode OMP_NUM_THREADS=1 ran 3.4x slower with the same losses. An explicit `threads` still wins, and an
    OMP_NUM_THREADS that is not a count is refused in one line naming it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from dreamgym.data import write_jsonl

    data = tmp_path / "d.jsonl"
    write_jsonl(data, dial_trajectories(6))
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "em"
    res = subprocess.run([sys.executable, "-m", "dreamgym", "train-em", "--env", "dial", "--data", str(data),
                          "--out", str(out), "--no-progress", "max_steps=1", "batch_size=2", "em.embedder=hashing",
                          "em.k=1", "task_writing=0"],
                         capture_output=True, text=True, timeout=600, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((out / "train_summary.json").read_text())["threads"] == 1

    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert main(["--env", "dial", "--data", str(data), "--out", str(tmp_path / "em2"), "max_steps=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "OMP_NUM_THREADS='lots'" in err and "\n" not in err and "Traceback" not in err


def test_the_closing_lines_show_the_held_out_worst_reward1_tasks_under_the_verdict(tmp_path):
    from dreamgym.experience.train import closing_lines

    held = {"n": 4, "format_validity": 1.0, "state_f1": 0.5, "fit": False,
            "reward1_worst": ["reward 1 by task, worst 1 of 1 with a false or missed win (1 with any):",
                              "  task steps   tp pred real  prec recall", "  b        3    1    2    1  0.50   1.00"]}
    summary = {"steps": 3, "examples": 8, "transitions": 8, "total_time_s": 1.0, "final_loss": 0.5, "threads": 1,
               "heldout": held}
    lines = closing_lines(summary, tmp_path).splitlines()
    assert lines[1].startswith("held-out (4 steps): ") and lines[2:5] == ["  " + x for x in held["reward1_worst"]]
    assert lines[-1].startswith("summary: ")
    assert len(closing_lines({**summary, "heldout": {**held, "reward1_worst": []}}, tmp_path).splitlines()) == 3
