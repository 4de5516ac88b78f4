"""`dreamgym serve-model`'s guards against a hostile or careless client (issue 69, 5 and 7): a structured-output regex
that matches nothing or costs too much to compile, the bearer token, the one folder adapters load from, and the
start-up warning of a server (serve-model or serve-env) bound beyond loopback without a token."""

from __future__ import annotations

import copy
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import torch

from dreamgym.llm.hf import HFBackend
from dreamgym.llm.base import adapter_root
from dreamgym.llm.http import OpenAIHTTPBackend
from dreamgym.llm.server import MAX_REGEX_CHARS, start_server
from dreamgym.trainers.common import ModelConfig, prepare_policy

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1}


@pytest.fixture(scope="module")
def local():
    torch.set_num_threads(1)
    return HFBackend.from_preset("tiny", device="cpu")


@pytest.fixture(scope="module")
def gated(local):
    """A server whose regexes must compile within 0.5 s."""
    handle = start_server(local, model_name="tiny", regex_timeout_s=0.5)
    yield handle
    handle.stop()


def _regex(url: str, regex: str, timeout: float = 30.0) -> tuple[httpx.Response, float]:
    t0 = time.perf_counter()
    r = httpx.post(url + "/chat/completions", json={**CHAT, "structured_outputs": {"regex": regex}}, timeout=timeout)
    return r, time.perf_counter() - t0


def test_a_regex_that_matches_nothing_is_refused(gated):
    """It was answered 200 with text that does not match it (decoding had no allowed token, so it wrote anything)."""
    for regex in (r"[^\s\S]", r"ab[^\s\S]c"):
        r, _ = _regex(gated.url, regex)
        assert r.status_code == 400 and "matches no text this model can write" in r.json()["error"]["message"], r.text
    r, _ = _regex(gated.url, "(yes|no)")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] in ("yes", "no")


def test_a_regex_over_the_length_cap_is_refused_at_once(gated):
    """A 1 MB regex got no answer in 60 s (compile cost grows faster than length); now it is refused unparsed."""
    r, took = _regex(gated.url, "a" * (1 << 20))
    assert r.status_code == 400 and r.json()["error"]["code"] == "regex_too_long", r.text
    assert f"at most {MAX_REGEX_CHARS}" in r.json()["error"]["message"] and took < 1.0, took


def test_a_regex_past_the_compile_timeout_is_refused_then(gated):
    """Within the length cap, alternations compile for seconds (2.6 s for 16 kB: benchmarks/bench_serve_model_regex.py):
    refused once the server's timeout (0.5 s here) passes, and /health answers meanwhile."""
    costly = "(a|b)" * 3200 + "z"
    r, took = _regex(gated.url, costly)
    assert r.status_code == 400 and r.json()["error"]["code"] == "regex_too_costly", r.text
    assert "within 0.5 s" in r.json()["error"]["message"] and took < 0.5 + 2.0, took
    assert httpx.get(gated.url.removesuffix("/v1") + "/health", timeout=5).status_code == 200
    # A regex queued behind that compile is told to come again (503, which clients retry), not that it is costly.
    r, _ = _regex(gated.url, "(yes|no)")
    assert r.status_code == 200 or r.status_code == 503 and r.json()["error"]["code"] == "regex_compiler_busy", r.text


def test_with_a_token_every_route_but_health_needs_it(local):
    handle = start_server(local, model_name="tiny", token="s3cret")
    try:
        base = handle.url.removesuffix("/v1")
        for method, path, body in (("GET", "/v1/models", None), ("POST", "/v1/chat/completions", CHAT),
                                   ("POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 2}),
                                   ("POST", "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/etc"}),
                                   ("POST", "/v1/unload_lora_adapter", {"lora_name": "x"})):
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                r = httpx.request(method, base + path, json=body, headers=headers)
                assert r.status_code == 401 and "needs Authorization" in r.json()["error"]["message"], (path, r.text)
        assert httpx.get(base + "/health").status_code == 200
        assert httpx.get(base + "/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        # DreamGym's own clients: a key, or the token in the URL (Basic), as for serve-env.
        assert OpenAIHTTPBackend(handle.url, api_key="s3cret", max_retries=0).models() == ["tiny"]
        assert OpenAIHTTPBackend(handle.url.replace("http://", "http://token:s3cret@"), max_retries=0).models() == \
            ["tiny"]
    finally:
        handle.stop()


def test_adapters_load_only_from_the_configured_folder(local, tmp_path):
    """Any client could make the server read an adapter from any path on its disk."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    policy = prepare_policy(copy.deepcopy(local.model), ModelConfig(lora=True, lora_r=4))
    policy.save_pretrained(str(outside / "a"))
    policy.save_pretrained(str(allowed / "a"))
    (allowed / "link").symlink_to(outside / "a")
    handle = start_server(HFBackend(copy.deepcopy(local.model), local.tokenizer), model_name="tiny",
                          adapter_dir=allowed)
    try:
        for path in (outside / "a", allowed / "link", allowed / ".." / "outside" / "a", Path("/etc")):
            r = httpx.post(handle.url + "/load_lora_adapter", json={"lora_name": "x", "lora_path": str(path)})
            assert r.status_code == 403 and r.json()["error"]["code"] == "adapter_path_not_allowed", (path, r.text)
            assert str(allowed) in r.json()["error"]["message"]
        r = httpx.post(handle.url + "/load_lora_adapter", json={"lora_name": "x", "lora_path": str(allowed / "a")})
        assert r.status_code == 200, r.text
    finally:
        handle.stop()
    # By default the folder is the one DreamGym's policy backends write under, not the whole disk.
    default = start_server(local, model_name="tiny")
    try:
        r = httpx.post(default.url + "/load_lora_adapter", json={"lora_name": "x", "lora_path": str(outside / "a")})
        assert r.status_code == 403 and str(adapter_root().resolve()) in r.json()["error"]["message"], r.text
    finally:
        default.stop()


def _started(argv: list[str], env: dict[str, str]) -> tuple[str, str]:
    """Run `python -m dreamgym.cli *argv` until it prints the URL it serves; return (that line, its stderr so far)."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dreamgym.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=log, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
        try:
            assert proc.stdout is not None
            line, deadline = "", time.time() + 180
            while not line and time.time() < deadline and proc.poll() is None:
                if select.select([proc.stdout], [], [], 1.0)[0]:
                    line = proc.stdout.readline()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        log.seek(0)
        return line, log.read()


@pytest.mark.parametrize("argv, env_var", [
    (["serve-model", "--preset", "tiny", "--device", "cpu", "--threads", "1"], "DREAMGYM_MODEL_TOKEN"),
    (["serve-env", "--env", "dial"], "DREAMGYM_ENV_TOKEN"),
])
def test_a_server_bound_beyond_loopback_without_a_token_warns_at_start_up(argv, env_var):
    argv = [*argv, "--port", "0"]
    line, err = _started([*argv, "--host", "0.0.0.0"], {env_var: ""})
    assert re.search(r"http://0\.0\.0\.0:\d+", line), (line, err)
    [warning] = [x for x in err.splitlines() if "warning:" in x]
    assert warning.startswith(f"dreamgym {argv[0]}: warning: listening on 0.0.0.0 with no token") and env_var in warning
    for host, env in (("0.0.0.0", {env_var: "s3cret"}), ("127.0.0.1", {env_var: ""})):
        line, err = _started([*argv, "--host", host], env)
        assert "http://" in line and "warning:" not in err, (host, line, err)
