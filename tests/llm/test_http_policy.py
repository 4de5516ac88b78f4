"""vLLM's dialect on `dreamgym serve-model` (token-id completions, runtime LoRA) and the HTTP policy backend: a
trainer samples through a real loopback server, pushes its adapter, and the server's log-probs are the learner's."""

import copy
import tempfile

import httpx
import pytest
import torch
from servers import cli_server
from trainers.conftest import DIAL_AGENT, DIAL_ROLLOUT

from dreamgym.llm import SamplingParams, row_seed
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.http import HTTPPolicyBackend, LLMEndpointError, OpenAIHTTPBackend
from dreamgym.llm.server import start_server
from dreamgym.trainers.common import ModelConfig, OptimConfig, TrainerConfig, prepare_policy

REQS = [[{"role": "user", "content": t}] for t in ("Task: set the dial to 3", "hi", "State: [dial] 4 [button] submit")]


@pytest.fixture(scope="module")
def served(tiny_preset):  # noqa: F811 - the fixture imported above
    """A server over its own copy of the tiny model (loading adapters wraps the served model) and a local twin. Its
    adapters load from anywhere under the temporary folder: the tests' own folders and the policy backends'."""
    model, tok = tiny_preset
    server_backend = HFBackend(copy.deepcopy(model), tok, batch_size=64)
    handle = start_server(server_backend, model_name="tiny", adapter_dir=tempfile.gettempdir())
    yield handle, HFBackend(copy.deepcopy(model), tok, batch_size=64)
    handle.stop()


def _lora_policy(model, seed: int):
    """A LoRA policy over a copy of `model` whose adapters are not zero (as after training)."""
    policy = prepare_policy(copy.deepcopy(model), ModelConfig(lora=True, lora_r=4))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return policy


def test_token_id_completions_match_local_backend(served):
    handle, local = served
    client = OpenAIHTTPBackend(handle.url, model="tiny", max_retries=0)
    prompts = [local.prompt_ids(r) for r in REQS]
    full = local.generate_from_ids(prompts[:1], SamplingParams(max_tokens=24, seed=5))[0]
    stop = local._text(full.token_ids)[6:8]
    for params in (SamplingParams(temperature=0, max_tokens=12), SamplingParams(top_p=0.9, max_tokens=12, seed=11),
                   SamplingParams(max_tokens=24, seed=5, stop=[stop])):
        want = local.generate_from_ids(prompts, params)
        got = client.generate_from_ids(prompts, params)
        for w, g in zip(want, got):
            assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
            assert g.prompt_token_ids == w.prompt_token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
    assert got[0].text.endswith(stop) and got[0].finish_reason == "stop"
    seeds = [7, 7, 2**63 + 5]
    assert [c.token_ids for c in client.generate_from_ids(prompts, SamplingParams(max_tokens=8), seeds=seeds)] == \
        [c.token_ids for c in local.generate_from_ids(prompts, SamplingParams(max_tokens=8), seeds=seeds)]

    # The raw protocol, as a vLLM client sees it: a batch of prompts x n, text prompts, the stop string cut from the
    # text unless asked for, token ids only with return_token_ids, the legacy log-probs shape.
    body = {"model": "tiny", "prompt": prompts[:2], "n": 2, "seed": 3, "max_tokens": 6, "logprobs": 0,
            "return_token_ids": True}
    data = httpx.post(handle.url + "/completions", json=body).json()
    assert data["object"] == "text_completion" and [c["index"] for c in data["choices"]] == [0, 1, 2, 3]
    want = [local.generate_from_ids([p], SamplingParams(max_tokens=6), seeds=[row_seed(3, j)])[0]
            for p in prompts[:2] for j in range(2)]
    assert [c["token_ids"] for c in data["choices"]] == [w.token_ids for w in want]
    assert data["choices"][2]["prompt_token_ids"] == prompts[1]
    lp = data["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == len(lp["top_logprobs"]) == 6
    text = httpx.post(handle.url + "/completions", json={"prompt": "Task: set", "max_tokens": 3, "seed": 1}).json()
    assert text["choices"][0]["token_ids"] is None and text["usage"]["completion_tokens"] == 3
    cut = httpx.post(handle.url + "/completions", json={"prompt": prompts[0], "max_tokens": 24, "seed": 5,
                                                        "stop": stop}).json()["choices"][0]
    assert cut["stop_reason"] == stop and not cut["text"].endswith(stop) and cut["finish_reason"] == "stop"


def test_bad_requests_get_4xx_json_errors(served, tmp_path):
    handle, local = served
    url = handle.url
    prompt = local.prompt_ids(REQS[1])
    cases = [
        ("/completions", {"prompt": prompt, "model": "nope"}, 404, "not served here"),
        ("/completions", {"prompt": []}, 400, "empty"),
        ("/completions", {"prompt": [prompt, []]}, 400, "no tokens"),
        ("/completions", {"prompt": [1, 10**9]}, 400, "outside the vocabulary"),
        ("/completions", {"prompt": prompt, "logprobs": 2}, 400, "top alternatives"),
        ("/completions", {"prompt": prompt, "echo": True}, 400, "echo"),
        ("/completions", {"prompt": prompt, "stream": True}, 400, "stream"),
        ("/completions", {"prompt": prompt, "prompt_logprobs": 1}, 400, "prompt_logprobs"),
        ("/completions", {"prompt": prompt, "temperature": -1}, 400, "temperature"),
        ("/completions", {"prompt": [1] * 2040, "max_tokens": 16}, 400, "context length"),
        ("/completions", {"max_tokens": 2}, 400, "prompt"),
        ("/load_lora_adapter", {"lora_name": "x", "lora_path": str(tmp_path)}, 400, "adapter_config.json"),
        ("/load_lora_adapter", {"lora_name": "tiny", "lora_path": str(tmp_path)}, 400, "own name"),
        ("/load_lora_adapter", {"lora_name": "x"}, 400, "lora_path"),
        ("/unload_lora_adapter", {"lora_name": "never-loaded"}, 404, "cannot be found"),
    ]
    for path, body, status, words in cases:
        r = httpx.post(url + path, json=body)
        assert r.status_code == status, (path, body, r.text)
        assert words in r.json()["error"]["message"], (path, body, r.text)
    # A valid adapter loaded twice under one name: refused unless in place; unknown adapter names stay 404.
    _lora_policy(local.model, 0).save_pretrained(str(tmp_path / "a"))
    client = OpenAIHTTPBackend(url, model="tiny", max_retries=0)
    client.load_lora_adapter("dup", str(tmp_path / "a"))
    with pytest.raises(LLMEndpointError, match="already been loaded"):
        client.load_lora_adapter("dup", str(tmp_path / "a"))
    client.load_lora_adapter("dup", str(tmp_path / "a"), inplace=True)
    assert "dup" in client.models()
    client.unload_lora_adapter("dup")
    r = httpx.post(url + "/completions", json={"prompt": prompt, "model": "dup"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def _learner(backend, model_cfg=None):
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer

    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-3, micro_batch_tokens=16384), agent=DIAL_AGENT,
                           rollout=DIAL_ROLLOUT, model=model_cfg or ModelConfig(lora=True, lora_r=4), group_size=4,
                           tasks_per_iteration=3)
    return GRPOTrainer(backend, GRPOConfig(), common)


def test_pushed_adapter_logprobs_match_the_learner(served, tiny_preset):  # noqa: F811
    handle, local = served
    model, tok = tiny_preset
    with HTTPPolicyBackend(handle.url, _lora_policy(model, 1), tok, served_model="tiny", max_retries=0) as backend:
        trainer = _learner(backend)
        assert not trainer.sampler_matches_learner()
        prompts = [backend.prompt_ids(r) for r in REQS]
        params = SamplingParams(max_tokens=12, seed=4)
        for round_ in (1, 2):
            outs = backend.generate_from_ids(prompts, params)
            assert backend.pushes == round_ and backend.adapter == f"{backend.adapter_prefix}-{round_}"
            learner = trainer.learner_logprobs(prompts, [o.token_ids for o in outs])
            for o, lp in zip(outs, learner):
                assert o.logprobs == pytest.approx(lp, abs=1e-4)
            base = local.generate_from_ids(prompts, params)  # the bare base model samples something else
            assert [b.token_ids for b in base] != [o.token_ids for o in outs]
            backend.generate_from_ids(prompts[:1], params)  # unchanged weights: no new push
            assert backend.pushes == round_
            with torch.no_grad():  # an update, in place, as the optimiser makes it
                for name, p in trainer.model.named_parameters():
                    if "lora_A" in name:
                        p.mul_(1.5)
        listed = OpenAIHTTPBackend(handle.url, max_retries=0).models()
        assert listed == ["tiny", f"{backend.adapter_prefix}-2"]  # the first push was unloaded
        folders = sorted(p.name for p in backend.adapter_dir.iterdir())
        assert folders == [f"{backend.adapter_prefix}-2"]
        adapter_dir = backend.adapter_dir
    assert OpenAIHTTPBackend(handle.url, max_retries=0).models() == ["tiny"] and not adapter_dir.exists()


def test_serve_model_process_serves_the_pushed_adapter(tiny_preset):  # noqa: F811
    """The same through a `dreamgym serve-model` process: it reads the adapter folder the trainer's process wrote."""
    model, tok = tiny_preset
    with cli_server(["serve-model", "--preset", "tiny", "--port", "0", "--device", "cpu", "--threads", "1"]) as (_, base):
        with HTTPPolicyBackend(base + "/v1", _lora_policy(model, 2), tok, max_retries=0) as backend:
            trainer = _learner(backend)
            prompts = [backend.prompt_ids(r) for r in REQS]
            outs = backend.generate_from_ids(prompts, SamplingParams(max_tokens=10, seed=9, stop=["\n"]))
            assert backend.pushes == 1 and backend.client.models() == ["tiny", backend.adapter]
            learner = trainer.learner_logprobs(prompts, [o.token_ids for o in outs])
            for o, lp in zip(outs, learner):
                assert o.logprobs == pytest.approx(lp, abs=1e-4)


@pytest.mark.parametrize("failure", ["hangs", "dies"])
def test_closing_after_the_server_failed_is_brief_and_quiet(tiny_preset, failure, caplog):  # noqa: F811
    """Issue 69, 6: after a policy server hung (or died) mid-run, closing the backend waited another full timeout to
    unload the adapter (hang) and logged "could not unload policy-..." after the run's one-line error, so that line
    was the last the user saw. Now the unload is one try of at most CLOSE_TIMEOUT_S and, after the failure, quiet."""
    import logging
    import os
    import signal
    import time

    from dreamgym.llm.base import CLOSE_TIMEOUT_S
    from dreamgym.llm.http import LLMTimeoutError

    model, tok = tiny_preset
    timeout = CLOSE_TIMEOUT_S + 5
    with cli_server(["serve-model", "--preset", "tiny", "--port", "0", "--device", "cpu", "--threads", "1"]) as (
            proc, base):
        backend = HTTPPolicyBackend(base + "/v1", _lora_policy(model, 3), tok, max_retries=0, timeout=timeout)
        prompts = [backend.prompt_ids(REQS[0])]
        backend.generate_from_ids(prompts, SamplingParams(max_tokens=4, seed=1))
        assert backend.pushes == 1 and backend.adapter is not None
        os.kill(proc.pid, signal.SIGSTOP if failure == "hangs" else signal.SIGKILL)
        try:
            with pytest.raises(LLMTimeoutError if failure == "hangs" else LLMEndpointError):
                backend.generate_from_ids(prompts, SamplingParams(max_tokens=4, seed=2))
            assert backend.failure is not None
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="dreamgym.llm.http"):
                t0 = time.monotonic()
                backend.close()
                took = time.monotonic() - t0
            assert took < CLOSE_TIMEOUT_S + 2.0 < timeout, took
            unload = [r for r in caplog.records if "could not unload" in r.getMessage()]
            assert unload and all(r.levelno == logging.DEBUG for r in unload), [r.levelname for r in unload]
        finally:
            if failure == "hangs":
                os.kill(proc.pid, signal.SIGCONT)


def test_full_weight_policy_refuses_to_drift_from_the_server(served, tiny_preset):  # noqa: F811
    handle, _ = served
    model, tok = tiny_preset
    with HTTPPolicyBackend(handle.url, copy.deepcopy(model), tok, served_model="tiny", max_retries=0) as backend:
        prompt = backend.prompt_ids(REQS[0])
        assert len(backend.generate_from_ids([prompt], SamplingParams(max_tokens=2))[0].token_ids) == 2
        with torch.no_grad():
            next(backend.model.parameters()).add_(0.01)
        with pytest.raises(LLMEndpointError, match="full-weight policy changed"):
            backend.generate_from_ids([prompt], SamplingParams(max_tokens=2))


@pytest.mark.slow
def test_grpo_samples_from_the_server_and_pushes_each_update(warm_preset):
    """Real-environment GRPO on the dial with its policy samples from `serve-model` over HTTP: the first iteration
    trains, the adapter is pushed, and the next iteration's samples are the updated policy's (their server log-probs
    are the learner's, and not the pre-update policy's)."""
    from trainers.iterate import play_and_update

    from dreamgym.envs import dial
    from dreamgym.rl.rollout import run_rollouts

    model, tok = warm_preset
    warm = copy.deepcopy(model)
    handle = start_server(HFBackend(copy.deepcopy(warm), tok, batch_size=64), model_name="tiny-warm")
    try:
        with HTTPPolicyBackend(handle.url, warm, tok, max_retries=0) as backend:
            trainer = _learner(backend, ModelConfig(lora=True, lora_r=8))
            tasks = dial.make_tasks("train")[:6]
            episodes, m = play_and_update(trainer, tasks, dial.DialEnv)
            assert backend.pushes == 1 and m["samples"] > 0 and m["optimizer_steps"] == 1
            assert m["clip_frac"] == 0.0 and m["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # old = learner
            nxt = run_rollouts(backend, dial.DialEnv, tasks, group_size=4, seed=1, config=DIAL_ROLLOUT,
                               agent=DIAL_AGENT)
            assert backend.pushes == 2 and backend.adapter.endswith("-2")
            turns = [t for e in nxt for t in e.turns]
            learner = trainer.learner_logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
            worst = max(abs(a - b) for t, lp in zip(turns, learner) for a, b in zip(t.logprobs, lp))
            assert worst < 1e-4
            with trainer.model.disable_adapter():  # the policy before any update
                before = trainer.learner_logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
            moved = max(abs(a - b) for t, lp in zip(turns, before) for a, b in zip(t.logprobs, lp))
            assert moved > 1e-3
    finally:
        handle.stop()


@pytest.fixture
def fresh_server(tiny_preset, tmp_path, monkeypatch):  # noqa: F811
    """(a `dreamgym serve-model` of its own over the tiny model, the temp dir where HTTP policy backends make their
    adapter folders): what a run leaves on the server or in that folder is the test's to see."""
    model, tok = tiny_preset
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    handle = start_server(HFBackend(copy.deepcopy(model), tok, batch_size=64), model_name="tiny")
    try:
        yield handle, temp
    finally:
        handle.stop()


def test_dreamgym_train_samples_through_the_policy_url(fresh_server, tmp_path):
    """`dreamgym train model.policy_url=...` builds the HTTP policy backend: a real GRPO iteration on the dial samples
    on the server (its request count rises) while the LoRA policy trains here, and at the end the pushed adapter is
    unloaded from the server and its temporary folder deleted; without LoRA the URL is refused at start-up."""
    from dreamgym.config import ConfigError, load_config
    from dreamgym.rl.builders import build_backend
    from dreamgym.commands.train import TrainConfig, main

    with pytest.raises(ConfigError, match="policy_url"):
        load_config(TrainConfig, None, ["model.policy_url=http://127.0.0.1:1/v1"])  # lora left to auto
    with pytest.raises(ConfigError, match="policy_url"):
        load_config(TrainConfig, None, ["model.policy_url=ftp://x", "model.lora=true"])
    handle, temp = fresh_server
    url = f"{handle.url}#tiny"
    cfg = load_config(TrainConfig, None, [f"model.policy_url={url}", "model.lora=true"])
    backend = build_backend(cfg)
    assert isinstance(backend, HTTPPolicyBackend)
    backend.close()
    served = []
    batcher = handle._app.state.batcher  # counts what the server samples (no public hook for it)
    original = batcher.submit

    def counting(*a, **k):
        served.append(1)
        return original(*a, **k)

    batcher.submit = counting
    rc = main(["--algo", "grpo", "--env", "dial", f"run_dir={tmp_path / 'run'}", "iterations=1",
               f"model.policy_url={url}", "model.lora=true", "group_size=2", "tasks_per_iteration=2",
               "rollout.max_episode_steps=2", "rollout.max_new_tokens=8", "eval_at_start=false", "tensorboard=false",
               "save_every=0"])
    assert rc == 0 and len(served) >= 4  # 2 tasks x 2 episodes sampled their first turn on the server
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
    # Before: each run left its last adapter loaded on the server and its adapter folder in the temp dir.
    assert [m["id"] for m in httpx.get(f"{handle.url}/models").json()["data"]] == ["tiny"]
    assert not list(temp.glob("dreamgym-adapters-*"))


def test_recipe_rows_take_their_adapter_off_the_policy_server(fresh_server, tmp_path):
    """The recipe's rows sampling on a policy server (SFT's evaluation, a real GRPO row): after each, its pushed
    adapter is unloaded from the server and its temporary folder deleted (before: every row left both behind)."""
    from dreamgym.commands.recipe import Recipe

    handle, temp = fresh_server
    r = Recipe("dial", tmp_path / "run", eval_tasks=2, progress=False, threads=1,
               train_overrides=[f"model.policy_url={handle.url}#tiny", "model.lora=true", "rollout.max_episode_steps=2",
                                "rollout.max_new_tokens=8"])
    r.collect_offline(8, "oracle:1", "oracle")
    r.sft(epochs=1)
    r.run_method("GRPO real", algo="grpo", mode="real", budget=16, real_iterations=1, tasks_per_iteration=2,
                 group_size=2)
    assert {"SFT", "GRPO real"} <= set(r.results)
    assert [m["id"] for m in httpx.get(f"{handle.url}/models").json()["data"]] == ["tiny"]
    assert not list(temp.glob("dreamgym-adapters-*"))
