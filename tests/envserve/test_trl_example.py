"""examples/trl_grpo_served_dream.py: TRL's GRPOTrainer trains the tiny preset for a few steps on multi-turn episodes
of the served synthetic dial (TRL's `rollout_func`), and the loss is finite and the parameters move."""

import importlib.util
import math
from pathlib import Path

from dreamgym.envserve.server import EnvServerConfig, start_env_server
from em_helpers import trained_dial_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo_served_dream.py"


def test_trl_grpo_trains_on_the_served_synthetic_environment(tmp_path):
    spec = importlib.util.spec_from_file_location("trl_grpo_served_dream", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    cfg = EnvServerConfig(env="dial", dream=True, em=str(trained_dial_model()), device="cpu", batch_wait_ms=20)
    with start_env_server(cfg) as srv:
        result = example.run(srv.url, out_dir=str(tmp_path / "trl"), steps=2, group=4, prompts_per_step=2,
                             max_turns=3)
    assert len(result["losses"]) == 2 and all(math.isfinite(x) for x in result["losses"])
    assert result["parameters_changed"]
    # The rollouts' steps reached the server together: experience-model batches of several sessions.
    assert result["server_batches"]["largest_batch"] > 1
