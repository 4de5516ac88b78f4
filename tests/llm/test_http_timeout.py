"""A server too slow for its timeout, from each place a server is configured: the timeout set there reaches the client
(`model.policy_timeout_s`, `dream.em_timeout_s`, `dreamgym eval`'s `policy_timeout_s`, `dreamgym eval-em
--timeout-s`), a generation past it is not sent again (the server decodes it once), and the error names the server,
the timeout and the setting to raise. The server is `dreamgym serve-model` over the tiny model, its decodes held
while a test says; it finishes a request whose client gave up, as servers may (vLLM aborts it)."""

import copy
import threading
import time

import pytest
from em_helpers import dial_query, dial_trajectories, trained_dial_model

from dreamgym.llm import SamplingParams
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.http import HTTPTokenBackend, LLMTimeoutError
from dreamgym.llm.server import start_server

TIMEOUT = 8
"""Seconds: well past a start-up probe of the warm tiny model on a loaded 2-core machine (0.5 s was not)."""


class SlowBackend(HFBackend):
    """The served backend: counts the rows it decodes, and once `slowed`, holds each decode after the first `fast` (a
    client's start-up probe takes two) until `release` (a probe past the timeout would mark the server down)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.fast, self.decodes, self.rows, self.busy = 0, 0, 0, 0
        self.gate = threading.Event()
        self.gate.set()

    def generate_from_ids(self, prompts, params, **kw):
        self.decodes += 1
        self.busy += 1
        try:
            if self.decodes > self.fast:
                self.gate.wait(60)
                self.rows += len(prompts)
            return super().generate_from_ids(prompts, params, **kw)
        finally:
            self.busy -= 1

    def slowed(self, *, after_probe: bool = False) -> None:
        self.fast, self.decodes, self.rows = 2 if after_probe else 0, 0, 0
        self.gate.clear()

    def release(self) -> int:
        """Let the held decodes go and return the rows they decoded once the server is idle (a copy sent again would
        be queued behind the held one, and is decoded now). Idle: no decode for a second; the next test's probe must
        not wait behind this one's decodes."""
        self.gate.set()
        deadline, idle_since = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            if self.busy:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 1.0:
                break
            time.sleep(0.05)
        return self.rows


@pytest.fixture(scope="module")
def served_tiny(tiny_preset):  # noqa: F811 - the conftest fixture
    """(server URL, its backend), probed once by a client with the default timeout: the first decodes and the
    structured-output probe's first compile took over 5 s on a loaded 2-core machine, past the tests' timeout."""
    model, tok = tiny_preset
    backend = SlowBackend(copy.deepcopy(model), tok, batch_size=8)
    handle = start_server(backend, model_name="tiny")
    HTTPTokenBackend(handle.url, copy.deepcopy(tok), served_model="tiny").close()
    yield handle.url, backend
    backend.gate.set()
    handle.stop()


@pytest.fixture
def slow(served_tiny):
    """The server, fast until the test slows it; what a test left held is let go after it."""
    yield served_tiny
    served_tiny[1].release()


def test_model_policy_timeout_s_reaches_the_policy_servers_client(slow):
    from dreamgym.config import load_config
    from dreamgym.rl.builders import build_backend
    from dreamgym.commands.train import TrainConfig

    url, served = slow
    cfg = load_config(TrainConfig, None, [f"model.policy_url={url}#tiny", "model.lora=true",
                                          f"model.policy_timeout_s={TIMEOUT}"])
    backend = build_backend(cfg)
    try:
        served.slowed()
        ids = backend.prompt_ids([{"role": "user", "content": "Task: set the dial to 3"}])
        with pytest.raises(LLMTimeoutError, match=f"{url}/completions sent no answer within {TIMEOUT:g} s.*"
                                                  f"raise model.policy_timeout_s .now {TIMEOUT:g}."):
            backend.generate_from_ids([ids], SamplingParams(max_tokens=4))
        assert served.release() == 1
        assert backend.down == {} and backend.failovers == 0  # slow, not gone: still this backend's server
    finally:
        backend.close()


def test_dreamgym_train_ends_in_one_line_when_its_policy_server_times_out(slow, tmp_path, capsys):
    """A GRPO run sampling on a server that stops answering: exit 2 with `dreamgym train: ...` naming the setting, as
    `dreamgym eval` says it (before: a traceback), the metrics file closed and the adapter taken off the server."""
    import httpx

    from dreamgym.commands.train import main

    url, served = slow
    served.slowed(after_probe=True)
    rc = main(["--algo", "grpo", "--env", "dial", f"run_dir={tmp_path / 'run'}", "iterations=1",
               f"model.policy_url={url}#tiny", "model.lora=true", f"model.policy_timeout_s={TIMEOUT}", "group_size=2",
               "tasks_per_iteration=2", "rollout.max_episode_steps=2", "rollout.max_new_tokens=8", "eval_at_start=false",
               "tensorboard=false", "save_every=0", "--no-progress"])
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("dreamgym train:")]
    assert rc == 2 and "Traceback" not in err and err.strip().endswith(line)
    assert f"sent no answer within {TIMEOUT:g} s" in line and f"raise model.policy_timeout_s (now {TIMEOUT:g})" in line
    assert served.release() >= 1
    assert [m["id"] for m in httpx.get(f"{url}/models").json()["data"]] == ["tiny"]


def test_dream_em_timeout_s_reaches_the_experience_models_client(slow, tmp_path):
    """The dream's experience model on a server: the prediction whose call ran out of time fails (the episode waiting
    on it ends), naming the field; neither the client nor the model's own retry sends the batch again."""
    from dreamgym.dream.world import DreamConfig, DreamWorld

    url, served = slow
    world = DreamWorld("dial", DreamConfig(em=str(trained_dial_model()), em_url=f"{url}#tiny",
                                           em_timeout_s=TIMEOUT), tmp_path, seed=0)
    try:
        assert world.model.config.retries >= 1  # a malformed answer would be re-generated; a timed-out one is not
        served.slowed()
        [p] = world.model.predict([dial_query(3, "turn up")])
        assert p.failed and f"raise dream.em_timeout_s (now {TIMEOUT:g})" in p.error
        assert world.model.stats["generate_calls"] == 1 and world.model.stats["backend_failures"] == 1
        assert served.release() == 1
    finally:
        world.model.llm.close()  # type: ignore[attr-defined]


def test_eval_policy_timeout_s_reaches_a_served_policys_client(slow, capsys):
    from dreamgym.rl.evaluate import main

    url, served = slow
    served.slowed(after_probe=True)
    rc = main(["--env", "dial", "--policy", f"{url}#tiny", "--max-tasks", "1", "rollout.max_episode_steps=1",
               f"policy_timeout_s={TIMEOUT}"])
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("dreamgym eval:")]  # beside transformers' progress bar
    assert rc == 2 and "Traceback" not in err and err.strip().endswith(line)
    assert f"sent no answer within {TIMEOUT:g} s" in line and f"raise policy_timeout_s (now {TIMEOUT:g})" in line
    assert served.release() == 1


def test_eval_em_timeout_s_reaches_the_experience_models_client(slow, tmp_path, capsys):
    from dreamgym.data import write_jsonl
    from dreamgym.experience.fidelity import main

    url, served = slow
    data = tmp_path / "held.jsonl"
    write_jsonl(data, dial_trajectories(2))
    served.slowed(after_probe=True)
    rc = main(["--env", "dial", "--model", str(trained_dial_model()), "--data", str(data), "--train-data", str(data),
               "--url", f"{url}#tiny", "--timeout-s", str(TIMEOUT), "--max-transitions", "1", "--max-episodes", "1",
               "--out", str(tmp_path / "fidelity.json")])
    err = capsys.readouterr().err
    assert rc == 1 and f"raise --timeout-s (now {TIMEOUT})" in err
    assert "check that --url serves" not in err  # the server is fine, only slow
