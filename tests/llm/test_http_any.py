"""Any OpenAI-compatible server: the start-up capability probe of the HTTP backend, the chat-only fallback (token ids
re-derived by the local tokenizer), `dreamgym eval --policy URL` with `--episodes-out`, and the one-line refusals of
a server that cannot do what the run needs. Against `transformers serve` (a server not written here, chat only:
it refuses vLLM's token-id fields with 422) and `dreamgym serve-model` with capabilities taken away (routes removed,
or a field dropped before the app sees it, as a server that ignores it would)."""

import contextlib
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from model_fixtures import em_checkpoint, warm_model_dir
from servers import DropField, free_port, stop, wait_healthy

from dreamgym.utils import serving
from dreamgym.cli import main as cli
from dreamgym.data import read_jsonl, write_jsonl
from dreamgym.llm import SamplingParams
from dreamgym.llm.base import OutputConstraint
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.http import HTTPPolicyBackend, HTTPTokenBackend, ServerCapabilityError
from dreamgym.llm.server import ServerHandle, create_app

REQS = [[{"role": "user", "content": t}] for t in ("Task: set the dial to 3", "State: [dial] 4 [button] submit")]
TRANSFORMERS = Path(sys.executable).with_name("transformers")


@pytest.fixture(scope="module")
def transformers_server():
    """`transformers serve` on loopback with no model forced: each request's `model` (a local folder) is loaded on
    first use, so the one server serves the dial policy and the experience model. Yields its /v1 URL."""
    port = free_port()
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen([str(TRANSFORMERS), "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu"], stdout=log, stderr=log)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            wait_healthy(proc, f"{url}/models", log, "transformers serve", 180, interval=0.5)
            yield url
        finally:
            stop(proc, grace=15)


@pytest.fixture(scope="module")
def warm():
    """The warm-started dial policy's folder and an in-process backend over it."""
    from dreamgym.llm.presets import load_preset

    folder = warm_model_dir()
    model, tok = load_preset(str(folder), device="cpu")
    return folder, HFBackend(model, tok, batch_size=8)


def _stderr_lines(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if line.startswith("server http")]


# ------------------------------------------------------------------------------------------ transformers serve
def test_a_chat_only_server_is_probed_and_serves_rows_with_rederived_ids(transformers_server, warm, capfd):
    folder, local = warm
    with HTTPTokenBackend(transformers_server, copy.deepcopy(local.tokenizer), served_model=str(folder),
                          max_retries=0) as backend:
        caps = backend.capabilities[transformers_server]
        assert (caps.token_ids, caps.logprobs, caps.lora, caps.structured) == (False, False, False, False)
        assert "422" in caps.why_not["token_ids"] and "404" in caps.why_not["lora"]
        [line] = _stderr_lines(capfd)
        assert "token-id prompts no" in line and "token ids re-derived by the local tokenizer" in line
        assert "the learner recomputes them" in line and "runtime LoRA loading no" in line

        prompts = [backend.prompt_ids(r) for r in REQS]
        assert prompts == [local.prompt_ids(r) for r in REQS]
        # A constraint the server would refuse (422) is left out; greedy rows are the in-process model's.
        params = SamplingParams(temperature=0.0, max_tokens=8, constraint=OutputConstraint("[a-z ]+"))
        got = backend.generate_from_ids(prompts, params)
        want = local.generate_from_ids(prompts, SamplingParams(temperature=0.0, max_tokens=8))
        assert [c.text for c in got] == [c.text for c in want] and all(c.text for c in got)
        assert [c.token_ids for c in got] == [local.tokenizer(c.text, add_special_tokens=False)["input_ids"]
                                              for c in got]
        assert [c.prompt_token_ids for c in got] == prompts and all(c.logprobs == [] for c in got)


def test_eval_on_a_served_policy_writes_each_episode(transformers_server, warm, tmp_path, capsys):
    folder, _ = warm
    out, spec = tmp_path / "episodes.jsonl", f"{transformers_server}#{folder}"
    assert cli(["eval", "--env", "dial", "--policy", spec, "--max-tasks", "2", "--seeds", "0,1",
                "--episodes-out", str(out), "--json", str(tmp_path / "r.json"), "rollout.max_episode_steps=3",
                "rollout.max_new_tokens=10", "agent.history=0", "agent.show_admissible=false",
                "agent.system_prompt=You are an agent."]) == 0
    trajs = list(read_jsonl(out))
    rows = json.loads((tmp_path / "r.json").read_text())["episodes"]
    assert [(t.task.id, t.seed) for t in trajs] == [(r["task"], r["seed"]) for r in rows] and len(trajs) == 4
    assert all(t.policy == spec and t.policy_version == "eval" and t.source == "real" for t in trajs)
    stepped = [t for t in trajs if t.steps]
    assert stepped, "the warm policy acts on the dial"
    assert all(s.action and "observation" in s.info for t in stepped for s in t.steps)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["messages"][0]["role"] == "system" for r in records)
    assert any(m["role"] == "assistant" for r in records for m in r["messages"])


def test_eval_em_runs_its_experience_model_on_a_chat_only_server(transformers_server, tmp_path):
    em = em_checkpoint()
    data = tmp_path / "heldout.jsonl"
    write_jsonl(data, list(read_jsonl(em.with_suffix(".jsonl")))[:3])
    out = tmp_path / "fidelity.json"
    assert cli(["eval-em", "--env", "dial", "--model", str(em), "--data", str(data), "--out", str(out),
                "--max-transitions", "4", "--max-episodes", "1", "--url", f"{transformers_server}#{em / 'model'}"]) \
        == 0
    [row] = json.loads(out.read_text())["rows"].values()
    # Predictions came back and parsed (the chat template the server applies is the checkpoint's own).
    assert row["n"] == 4 and row["failure_rate"] < 0.5 and row["state_f1"] > 0


def test_training_through_a_server_without_runtime_lora_fails_at_start_up(transformers_server, warm, tmp_path,
                                                                          capsys):
    folder, _ = warm
    run = tmp_path / "run"
    assert cli(["train", "--algo", "grpo", "--env", "dial", f"init={folder}", "model.lora=true",
                f"model.policy_url={transformers_server}#{folder}", f"run_dir={run}", "--no-progress",
                "tensorboard=false"]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("dreamgym train:")]
    assert "Traceback" not in err and err.strip().endswith(line)
    assert line.startswith(f"dreamgym train: {transformers_server}: the server has no runtime LoRA loading")
    assert "POST /load_lora_adapter: HTTP 404" in line and not (run / "checkpoints").exists()


# ------------------------------------------------------------------------------------------ dreamgym serve-model
@contextlib.contextmanager
def serve_model(backend: HFBackend, drop_routes: tuple[str, ...] = (), drop_field: str | None = None):
    """`dreamgym serve-model`'s app over `backend` without `drop_routes` and, with `drop_field`, blind to it."""
    app = create_app(backend, "tiny")
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) not in drop_routes]
    if drop_field:
        app.add_middleware(DropField, name=drop_field)
    try:
        running = serving.start(serving.make_server(app), "127.0.0.1", 0)
    except BaseException:
        app.state.batcher.stop()
        raise
    with ServerHandle(running, app) as handle:
        yield handle


@pytest.fixture(scope="module")
def tiny_backend(tiny_preset):  # noqa: F811 - the session fixture
    model, tok = tiny_preset
    return HFBackend(copy.deepcopy(model), tok, batch_size=8)


def test_serve_model_offers_everything_and_rows_stay_token_ids(tiny_backend, capfd):
    with serve_model(tiny_backend) as handle, \
            HTTPTokenBackend(handle.url, copy.deepcopy(tiny_backend.tokenizer), max_retries=0) as backend:
        caps = backend.capabilities[handle.url]
        assert (caps.token_ids, caps.logprobs, caps.lora, caps.structured) == (True, True, True, True)
        [line] = _stderr_lines(capfd)
        assert line.endswith("token-id prompts yes; log-probs yes; runtime LoRA loading yes; structured output yes")


def test_serve_model_without_token_id_completions_serves_through_chat(tiny_backend):
    prompts = [tiny_backend.prompt_ids(r) for r in REQS]
    params = SamplingParams(max_tokens=8, seed=5)
    want = tiny_backend.generate_from_ids(prompts, params)
    with serve_model(tiny_backend, drop_routes=("/v1/completions",)) as handle, \
            HTTPTokenBackend(handle.url, copy.deepcopy(tiny_backend.tokenizer), max_retries=0) as backend:
        caps = backend.capabilities[handle.url]
        assert not caps.token_ids and "404" in caps.why_not["token_ids"] and caps.logprobs and caps.structured
        got = backend.generate_from_ids([backend.prompt_ids(r) for r in REQS], params)
    assert [c.text for c in got] == [c.text for c in want]
    assert [c.token_ids for c in got] == [tiny_backend.tokenizer(c.text, add_special_tokens=False)["input_ids"]
                                          for c in want]


def test_a_server_that_ignores_structured_output_is_caught_by_its_answer(tiny_backend):
    with serve_model(tiny_backend, drop_field="structured_outputs") as handle, \
            HTTPTokenBackend(handle.url, copy.deepcopy(tiny_backend.tokenizer), max_retries=0) as backend:
        caps = backend.capabilities[handle.url]
    assert caps.token_ids and not caps.structured and "ignores the regex" in caps.why_not["structured"]


def test_unusable_servers_are_refused_at_start_up_in_one_line(tiny_backend, tiny_preset):  # noqa: F811
    model, tok = tiny_preset
    with serve_model(tiny_backend, drop_routes=("/v1/load_lora_adapter",)) as handle:
        with pytest.raises(ServerCapabilityError) as e:
            HTTPPolicyBackend(handle.url, copy.deepcopy(model), copy.deepcopy(tok), max_retries=0)
        assert str(e.value).startswith(f"{handle.url}: the server has no runtime LoRA loading "
                                       "(POST /load_lora_adapter: HTTP 404")
    with serve_model(tiny_backend, drop_routes=("/v1/completions", "/v1/chat/completions")) as handle:
        with pytest.raises(ServerCapabilityError, match="serves neither token-id completions .* nor chat"):
            HTTPTokenBackend(handle.url, copy.deepcopy(tok), max_retries=0)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ServerCapabilityError, match=f"{dead}: no server answered at start-up"):
        HTTPTokenBackend(dead, copy.deepcopy(tok), served_model="tiny", max_retries=0)


def test_eval_refuses_a_served_policy_it_cannot_use_in_one_line(capsys):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    assert cli(["eval", "--env", "dial", "--policy", dead, "--max-tasks", "1"]) == 2
    assert capsys.readouterr().err.strip() == (f"dreamgym eval: --policy: {dead} names no model: add #MODEL (the "
                                               "served model's name, also where its tokenizer loads from) or give "
                                               "--tokenizer")
    assert cli(["eval", "--env", "dial", "--policy", f"{dead}#tiny", "--max-tasks", "1"]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("dreamgym eval:")]  # beside transformers' progress bar
    assert "Traceback" not in err and err.strip().endswith(line)
    assert line.startswith(f"dreamgym eval: {dead}: no server answered at start-up")
