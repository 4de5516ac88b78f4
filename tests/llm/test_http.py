"""The HTTP backend against `dreamgym serve-model` on loopback: same outputs as the local backend, errors, retries
(and the generation past its timeout that is not retried)."""

import dataclasses
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import torch

from dreamgym.llm import SamplingParams, row_seed
from dreamgym.llm.base import FieldBudget, OutputConstraint
from dreamgym.llm.load import load_llm
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.http import LLMEndpointError, LLMTimeoutError, OpenAIHTTPBackend
from dreamgym.llm.server import main as serve_main
from dreamgym.llm.server import start_server

REQS = [[{"role": "user", "content": t}] for t in ("Task: set the dial to 3", "hi", "State: [dial] 4 [button] submit")]


@pytest.fixture(scope="module")
def local():
    torch.set_num_threads(1)  # 2 threads on a shared 2-core machine decode 10x+ slower (spin waits)
    return HFBackend.from_preset("tiny", device="cpu")


@pytest.fixture(scope="module")
def server(local):
    handle = start_server(local, model_name="tiny")
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def remote(server):
    backend = load_llm(server.url + "#tiny", max_retries=1, backoff=0.05)
    yield backend
    backend.close()


def test_http_matches_local_greedy_and_seeded(local, remote):
    for params in (SamplingParams(temperature=0, max_tokens=16), SamplingParams(temperature=1.0, top_p=0.9,
                                                                                 max_tokens=16, seed=11)):
        want = local.generate(REQS, params)
        got = remote.generate(REQS, params)
        for w, g in zip(want, got):
            assert g.text == w.text and g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
            assert g.prompt_token_ids == w.prompt_token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def test_per_request_seeds_reach_the_server(local, remote):
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=11)
    seeds = [7, 7, 2**63 + 5][:len(REQS)]
    want = local.generate(REQS, params, seeds=seeds)
    got = remote.generate(REQS, params, seeds=seeds)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    with pytest.raises(ValueError, match="one per request"):
        remote.generate(REQS, params, seeds=[1] * (len(REQS) + 1))


def test_stop_string_kept_and_reported(local, remote, server):
    full = local.generate(REQS[:1], SamplingParams(temperature=1.0, max_tokens=24, seed=5))[0]
    stop = full.text[6:8]
    params = SamplingParams(temperature=1.0, max_tokens=24, seed=5, stop=[stop])
    got = remote.generate(REQS[:1], params)[0]
    assert got.text == local.generate(REQS[:1], params)[0].text == full.text[: full.text.find(stop) + len(stop)]
    raw = httpx.post(server.url + "/chat/completions", json={"messages": REQS[0], "stop": stop, "seed": 5,
                                                             "max_tokens": 24}).json()
    assert raw["choices"][0]["stop_reason"] == stop and raw["choices"][0]["finish_reason"] == "stop"


def test_n_choices_use_row_seeds_and_models_listing(local, server):
    body = {"model": "tiny", "messages": REQS[1], "n": 3, "seed": 2, "max_tokens": 8, "logprobs": True}
    data = httpx.post(server.url + "/chat/completions", json=body).json()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    ids = [c["token_ids"] for c in data["choices"]]
    prompt = local.prompt_ids(REQS[1])
    want = local.generate_from_ids([prompt] * 3, SamplingParams(max_tokens=8), seeds=[row_seed(2, j) for j in range(3)])
    assert ids == [w.token_ids for w in want] and len({tuple(i) for i in ids}) == 3
    assert data["usage"]["completion_tokens"] == 24 and data["prompt_token_ids"] == prompt
    assert len(data["choices"][0]["logprobs"]["content"]) == 8
    assert httpx.get(server.url + "/models").json()["data"][0]["id"] == "tiny"
    assert OpenAIHTTPBackend(server.url).model == "tiny"  # discovered from /models


REGEX = r"<a>[^<]*</a>\n<b>(yes|no)</b>"


def test_structured_outputs_regex_is_honoured_on_both_endpoints(local, remote, server):
    # The untrained tiny model never writes this by itself; through the server every answer matches it.
    budget = (FieldBudget(after=1, reserve=len(b"</a>\n<b>yes</b>")),)
    params = SamplingParams(temperature=1.2, max_tokens=32, seed=3, stop=["</b>"],
                            constraint=OutputConstraint(REGEX, budgets=budget))
    free = remote.generate(REQS, SamplingParams(temperature=1.2, max_tokens=32, seed=3, stop=["</b>"]))
    assert not any(re.fullmatch(REGEX, c.text) for c in free)
    chat = remote.generate(REQS, params)
    ids = remote.generate_from_ids([local.prompt_ids(r) for r in REQS], params)
    for c in chat + ids:
        # The budgets stay here (vLLM's field carries the regex only), so an answer may run out of max_tokens:
        # whatever was written is a prefix the regex allows.
        assert re.fullmatch(REGEX, c.text) or c.finish_reason == "length" and "<b>" not in c.text, c.text
        assert c.text.startswith("<a>")
    raw = httpx.post(server.url + "/chat/completions", json={
        "messages": REQS[1], "max_tokens": 8, "seed": 1, "structured_outputs": {"regex": "(yes|no)"}}).json()
    assert raw["choices"][0]["message"]["content"] in ("yes", "no")


def test_each_request_of_a_call_is_decoded_under_its_own_constraint_locally_and_through_the_server(local, remote,
                                                                                                   server):
    """`generate` with one `SamplingParams` per request (the experience model's edit format: each query's own state)
    gives each request its own regex, in process, on the chat endpoint and on the token-id one."""
    from dreamgym.llm.http import HTTPTokenBackend

    words = ("yes|no", "up|down", "left|right")
    plist = [SamplingParams(temperature=1.2, max_tokens=8, seed=3, constraint=OutputConstraint(f"({w})"))
             for w in words]
    tokens = HTTPTokenBackend([server.url], local.tokenizer, served_model="tiny")
    try:
        for backend in (local, remote, tokens):
            texts = [c.text for c in backend.generate(REQS, plist)]
            assert all(re.fullmatch(f"({w})", t) for w, t in zip(words, texts)), (backend, texts)
    finally:
        tokens.close()
    with pytest.raises(ValueError, match="one per request"):
        remote.generate(REQS, plist[:2])


def test_a_constraint_reaches_servers_as_its_bounded_regex_with_room_to_complete_it(local, remote):
    """A server cannot count a field's tokens: it gets the constraint's `server_regex` (fields bounded in characters)
    and, on token-id requests, max_tokens raised to `server_max_tokens` (the longest answer) as far as the model's
    context has room, so every answer completes; 6 tokens alone would cut them all."""
    bounded = r"<a>[^<]{0,3}</a>\n<b>(yes|no)</b>"
    constraint = OutputConstraint(REGEX, server_regex=bounded, server_max_tokens=len("<a>xxx</a>\n<b>yes</b>"))
    params = SamplingParams(temperature=1.2, max_tokens=6, seed=3, stop=["</b>"], constraint=constraint)
    prompts = [local.prompt_ids(r) for r in REQS]
    for c in remote.generate_from_ids(prompts, params):
        assert re.fullmatch(bounded, c.text) and 6 < len(c.token_ids) <= constraint.server_max_tokens, c.text
    # More than the context holds (2048 positions): raised only as far as it has room, so no request is refused.
    huge = dataclasses.replace(params, constraint=dataclasses.replace(constraint, server_max_tokens=10**6))
    assert all(re.fullmatch(bounded, c.text) for c in remote.generate_from_ids(prompts, huge))
    assert remote.context_length() == local.model.config.max_position_embeddings
    # A chat request's prompt length is not known here: its max_tokens is kept, the bounded regex still sent.
    for c in remote.generate(REQS, params):
        assert len(c.token_ids) <= 6 and c.text.startswith("<a>"), c.text


@pytest.mark.parametrize("extra, message", [
    ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"json": {"type": "object"}}}, "structured_outputs.json is not supported"),
    ({"structured_outputs": {}}, "structured_outputs has no regex"),
    ({"guided_regex": "(yes|no)"}, "guided_regex is not supported"),
])
def test_structured_outputs_it_cannot_honour_are_refused(server, extra, message):
    for path, body in (("/chat/completions", {"messages": REQS[0]}), ("/completions", {"prompt": [1, 2, 3]})):
        r = httpx.post(server.url + path, json={**body, "max_tokens": 4, **extra})
        assert r.status_code == 400 and message in r.json()["error"]["message"], r.text
    assert httpx.get(server.url.removesuffix("/v1") + "/health").status_code == 200


def test_rejections_are_isolated_or_reported(remote, server):
    too_long = [{"role": "user", "content": "turn up " * 3000}]  # beyond the tiny model's 2048-token context
    outs = remote.generate([REQS[0], too_long], SamplingParams(temperature=0, max_tokens=4))
    assert outs[0].finish_reason == "length" and len(outs[0].token_ids) == 4
    assert outs[1].finish_reason == "error" and remote.errors >= 1
    wrong = OpenAIHTTPBackend(server.url, model="gpt-9", max_retries=0)
    with pytest.raises(LLMEndpointError, match="not served here"):
        wrong.generate(REQS, SamplingParams(max_tokens=4))
    r = httpx.post(server.url + "/chat/completions", json={"messages": REQS[0], "temperature": -1})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]


def test_dead_endpoint_fails_fast_naming_the_url():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    backend = OpenAIHTTPBackend(url, model="tiny", max_retries=2, backoff=0.05)
    t = time.perf_counter()
    with pytest.raises(LLMEndpointError, match=f"127.0.0.1:{port}/v1/chat/completions.*3 attempts.*is the server running"):
        backend.generate(REQS, SamplingParams(max_tokens=4))
    assert time.perf_counter() - t < 3.0


class _Flaky(BaseHTTPRequestHandler):
    """A real HTTP server that answers 503, then 429 with Retry-After, then a valid completion."""

    calls = 0

    def do_POST(self):  # noqa: N802 - http.server's naming
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.calls <= 2:
            self.send_response(503 if self.calls == 1 else 429)
            self.send_header("Retry-After", "0.1")
            body = b'{"error": {"message": "busy"}}'
        else:
            self.send_response(200)
            body = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop",
                                            "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5}]}}]
                              }).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_retries_with_backoff_on_5xx_and_429():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        backend = OpenAIHTTPBackend(f"http://127.0.0.1:{srv.server_port}/v1", model="m", max_retries=3,
                                    backoff=0.01)
        t = time.perf_counter()
        out = backend.generate(REQS[:1], SamplingParams(max_tokens=4))[0]
        assert time.perf_counter() - t >= 0.1  # Retry-After honoured
        assert (out.text, out.token_ids, out.logprobs, _Flaky.calls) == ("ok", [7], [-0.5], 3)
        _Flaky.calls = -10  # now it keeps answering 429: retries run out with a clear error
        with pytest.raises(LLMEndpointError, match="2 attempts .HTTP 429: busy.; the server is reachable"):
            OpenAIHTTPBackend(backend.base_url, model="m", max_retries=1, backoff=0.01).generate(
                REQS[:1], SamplingParams())
    finally:
        srv.shutdown()
        srv.server_close()


class _Slow(BaseHTTPRequestHandler):
    """A real HTTP server that takes `delay` seconds over every answer, counting the requests of each method."""

    delay = 1.0
    calls: dict[str, int] = {}

    def _answer(self, body: bytes) -> None:
        type(self).calls[self.command] = self.calls.get(self.command, 0) + 1
        time.sleep(self.delay)
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up and closed the connection
            pass

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}).encode())

    def do_GET(self):  # noqa: N802
        self._answer(b'{"data": [{"id": "m"}]}')

    def log_message(self, *args):
        pass


def test_a_generation_past_its_timeout_is_not_sent_again_and_names_the_setting():
    """A read timeout on a generation (POST) raises at once: the server got the request and may still be working on
    it, so a re-send would only add to the load of a server already too slow. The error names the URL, the timeout
    and the setting to raise. The model listing (GET) is retried as before: it costs the server nothing."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        backend = OpenAIHTTPBackend(url, model="m", timeout=0.3, timeout_field="dream.em_timeout_s", max_retries=3,
                                    backoff=0.01)
        t = time.perf_counter()
        with pytest.raises(LLMTimeoutError, match=re.escape(f"{url}/chat/completions sent no answer within 0.3 s")
                           + ".*not sent again.*raise dream.em_timeout_s .now 0.3."):
            backend.generate(REQS[:1], SamplingParams(max_tokens=4))
        assert time.perf_counter() - t < 1.0 and _Slow.calls == {"POST": 1}  # before: 4 POSTs, then a vaguer error
        with pytest.raises(LLMEndpointError, match="4 attempts .ReadTimeout"):
            backend.models()
        assert _Slow.calls == {"POST": 1, "GET": 4}
        _Slow.delay = 0.0  # a server fast enough answers as before
        assert backend.generate(REQS[:1], SamplingParams(max_tokens=4))[0].text == "ok"
    finally:
        srv.shutdown()
        srv.server_close()


def test_serve_model_cli_reports_a_bad_preset(capsys):
    assert serve_main(["--preset", "no-such-preset-anywhere", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dreamgym serve-model: ") and "neither a preset" in err[0]
