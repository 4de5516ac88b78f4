import json

import pytest

from dreamgym.experience.checkpoint import checkpoint_model_config, read_checkpoint_meta
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.trainers.common import ModelConfig
from dreamgym.experience.model import ExperienceModel
from dreamgym.experience.train import TrainEMConfig, main, train
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
    assert (module, func) == ("dreamgym.experience.train", "main")


def test_lora_training_writes_a_peft_adapter_that_loads(tmp_path):
    out = tmp_path / "lora"
    cfg = TrainEMConfig(env="dial", data="unused", out=str(out), model=ModelConfig(lora=True), max_steps=2,
                        batch_size=4, em=ExperienceModelConfig(k=0, use_retrieval=False), log_every=1)
    summary = train(cfg, trajectories=dial_trajectories(6))
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
