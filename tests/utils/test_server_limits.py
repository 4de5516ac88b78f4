"""Both HTTP servers (`dreamgym webshop serve`, `dreamgym serve-model`) under hostile requests on loopback.

Every bad request gets a 4xx/5xx answer with the server's JSON error document, the server stays up, a burst of
new connections is queued and answered, and a large rejected request does not stall anyone else. Real servers
on free ports and real clients (httpx, raw sockets where a library would hide what the server did).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import re

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import Answer, cli_server, connect, raw, read_answer

from dreamgym.llm.hf import HFBackend
from dreamgym.llm.server import CHUNK_CHARS, provably_over, start_server

BIG = 20_000_000  # over both servers' body limits (1 MiB WebShop, 4 MiB serve-model)


@dataclass
class Target:
    name: str
    base: str  # http://127.0.0.1:<port>
    health: str
    post: str  # a route taking a JSON object
    paths_wrong_method: list[tuple[str, str]]
    unknown_paths: list[str]

    def error(self, r: httpx.Response | Answer, status: int) -> str:
        """The message of a JSON error answer with this status, in this server's error shape."""
        assert _status(r) == status, (status, _text(r))
        assert r.headers["content-type"].startswith("application/json"), _text(r)
        err = r.json()["error"]
        message = err["message"] if self.name == "model" else err  # OpenAI's shape / the shop's
        assert isinstance(message, str) and message, _text(r)
        return message


def _text(r: httpx.Response | Answer) -> str:
    return r.text[:300] if isinstance(r, httpx.Response) else r.body[:300].decode("utf-8", "replace")


def _status(r: httpx.Response | Answer) -> int:
    return r.status_code if isinstance(r, httpx.Response) else r.status


def _webshop(base: str) -> Target:
    return Target("webshop", base, "/healthz", "/reset", [("PUT", "/"), ("GET", "/reset"), ("DELETE", "/healthz")],
                  ["/nope", "/s/zz/", "/s/0123456789abcdef/state"])


def _model(base: str) -> Target:
    return Target("model", base, "/health", "/v1/chat/completions",
                  [("GET", "/v1/chat/completions"), ("POST", "/health"), ("PUT", "/v1/models")],
                  ["/nope", "/v2/chat/completions"])


@pytest.fixture(scope="module")
def backend():
    torch.set_num_threads(1)
    return HFBackend.from_preset("tiny", device="cpu")


@pytest.fixture(scope="module")
def shop() -> Iterator[Target]:
    with cli_server(["webshop", "serve", "--port", "0", "--n-products", "300", "--split", "test"]) as (_, base):
        yield _webshop(base)


@pytest.fixture(scope="module")
def model(backend) -> Iterator[Target]:
    handle = start_server(backend, model_name="tiny")
    try:
        yield _model(f"http://127.0.0.1:{handle.port}")
    finally:
        handle.stop()


@pytest.fixture(params=["webshop", "model"])
def target(request) -> Target:
    return request.getfixturevalue("shop" if request.param == "webshop" else "model")


def _alive(t: Target) -> None:
    assert httpx.get(t.base + t.health, timeout=10).status_code == 200


# -- bodies -------------------------------------------------------------------------------------------------------
def test_oversized_body_by_content_length_is_refused_before_reading(target):
    # Only the head is sent: the answer must come from the Content-Length alone.
    head = f"POST {target.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {BIG}\r\n\r\n"
    r = raw(target.base, head.encode(), timeout=10)
    assert "limit" in target.error(r, 413)
    # A client that sends the whole body before reading (httpx does) still gets the 413, not a reset.
    r2 = httpx.post(target.base + target.post, content=b"x" * BIG, timeout=30)
    assert "limit" in target.error(r2, 413)
    _alive(target)


def test_chunked_body_is_cut_off_at_the_limit(target):
    # Stream up to 2 GB and stop as soon as the server answers: it must answer near its limit, not read on.
    sent = 0
    with connect(target.base) as s:
        s.sendall(f"POST {target.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
        try:
            while sent < 100 * BIG and not select.select([s], [], [], 0)[0]:
                s.sendall(chunk)
                sent += 1 << 16
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = read_answer(s)
    assert "limit" in target.error(r, 413)
    assert sent < 2 * BIG, f"the server took {sent} bytes before answering"  # its limit plus socket buffers
    _alive(target)


@pytest.mark.parametrize("body", [b"[1,2", b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000, b"null", b'"text"'],
                         ids=["truncated", "not-utf8", "deeply-nested", "null", "string"])
def test_malformed_json_is_400(target, body):
    r = httpx.post(target.base + target.post, content=body, headers={"Content-Type": "application/json"},
                   timeout=30)
    target.error(r, 400)
    _alive(target)


# -- heads, methods, paths, query values --------------------------------------------------------------------------
def test_huge_headers_get_431(target):
    r = httpx.get(target.base + target.health, headers={"X-Junk": "a" * 40_000}, timeout=10)
    assert "headers" in target.error(r, 431)
    # The same head arriving in pieces (h11 refuses it before it is complete).
    with connect(target.base) as s:
        s.sendall(f"GET {target.health} HTTP/1.1\r\nHost: x\r\n".encode())
        try:
            for i in range(16):
                s.sendall(f"X-Junk-{i}: {'a' * 4000}\r\n".encode())
                time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass
        r2 = read_answer(s, timeout=10)
    assert "headers" in target.error(r2, 431)
    _alive(target)


def test_wrong_methods_get_405_and_unknown_paths_404(target):
    for method, path in target.paths_wrong_method:
        target.error(httpx.request(method, target.base + path, timeout=10), 405)
    for path in target.unknown_paths:
        target.error(httpx.get(target.base + path, timeout=10), 404)
    _alive(target)


@pytest.mark.parametrize("query", ["seed=-1", "seed=99999999999999999999999", "split=bogus", "task=abc",
                                   "task=-3", "task=1e3", "seed=%00", "task=" + "9" * 5000])
def test_shop_answers_bad_query_values_with_400(shop, query):
    r = httpx.get(f"{shop.base}/?{query}", timeout=30)
    shop.error(r, 400)
    _alive(shop)


def test_shop_answers_bad_reset_fields_with_400(shop):
    for body in ({"seed": -1}, {"split": "bogus"}, {"task": "abc"}, {"task": -1}):
        shop.error(httpx.post(f"{shop.base}/reset", json=body, timeout=30), 400)
    state = httpx.post(f"{shop.base}/reset", json={"task": 3, "seed": 1}, timeout=30).json()
    shop.error(httpx.post(f"{shop.base}/s/{state['session']}/step", json={"action": 5}, timeout=30), 400)
    # A form Content-Type (what `curl -d` sends) still carries a JSON body.
    r = httpx.post(f"{shop.base}/s/{state['session']}/step", content=b'{"action": "search[red shoes]"}',
                   headers={"Content-Type": "application/x-www-form-urlencoded"}, timeout=30)
    assert r.status_code == 200 and r.json()["abstract_state"].startswith("[page] results")


# -- load ---------------------------------------------------------------------------------------------------------
def test_a_burst_of_new_connections_is_queued_and_answered(target):
    n = 96
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    host, port = target.base.split("//")[1].split(":")
    try:
        for s in socks:
            s.setblocking(False)
            s.connect_ex((host, int(port)))
        # The kernel completes handshakes into the listen backlog without the server's help, so all of them
        # finish at once unless the backlog is too small for the burst (then the rest wait for a SYN retry, 1 s).
        pending, deadline = set(socks), time.monotonic() + 0.9
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending), [], max(0.0, deadline - time.monotonic()))
            for s in writable:
                assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                pending.discard(s)
        assert not pending, f"{len(pending)} of {n} new connections were not taken into the backlog within 0.9 s"
        for s in socks:
            s.setblocking(True)
            s.sendall(f"GET {target.health} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        statuses = [read_answer(s, timeout=60).status for s in socks]
        assert statuses == [200] * n
    finally:
        for s in socks:
            s.close()


def test_health_answers_while_a_large_request_is_rejected(target):
    # A valid request whose one message is ~6 MB, streamed at ~3 MB/s: the server must reject it at its limit
    # (not read and parse it), and answer /health promptly all the while.
    piece = b"turn up " * 8192
    result: dict[str, Any] = {}

    def send_large() -> None:
        start = b'{"messages": [{"role": "user", "content": "' if target.name == "model" else b'{"action": "'
        with connect(target.base) as s:
            s.sendall(f"POST {target.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n".encode())
            try:
                for part in [start] + [piece] * 96 + [b'"}]}' if target.name == "model" else b'"}']:
                    s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
                    time.sleep(0.02)
                s.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            result["answer"] = read_answer(s, timeout=120)

    sender = threading.Thread(target=send_large)
    sender.start()
    slowest = 0.0
    while sender.is_alive():
        t = time.perf_counter()
        assert httpx.get(target.base + target.health, timeout=30).status_code == 200
        slowest = max(slowest, time.perf_counter() - t)
        time.sleep(0.05)
    sender.join()
    assert slowest < 1.0, f"/health took {slowest:.2f} s while a large request was handled"
    target.error(result["answer"], 413)


# -- limits that need short settings: servers in this process -----------------------------------------------------
@contextmanager
def _limited(kind: str, backend: Any, **limits: Any) -> Iterator[Target]:
    from dreamgym.utils import serving
    from dreamgym.envs.webshop import server as shop_server

    lim = serving.Limits(**limits)
    if kind == "model":
        handle = start_server(backend, model_name="tiny", limits=lim)
        try:
            yield _model(f"http://127.0.0.1:{handle.port}")
        finally:
            handle.stop()
    else:
        app = shop_server.create_app(lim, n_products=300, split="test")
        with serving.start(serving.make_server(app)) as running:
            yield _webshop(running.base)


@pytest.mark.parametrize("kind", ["webshop", "model"])
def test_slow_body_and_slow_head_get_408(kind, backend):
    with _limited(kind, backend, body_timeout_s=1.0, head_timeout_s=1.0) as t:
        with connect(t.base) as s:
            s.sendall(f"POST {t.post} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode())
            start = time.monotonic()
            r = read_answer(s, timeout=30)
        assert 0.9 <= time.monotonic() - start < 15
        assert "did not arrive" in t.error(r, 408)
        with connect(t.base) as s:
            s.sendall(f"GET {t.health} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode())  # a head never finished
            r = read_answer(s, timeout=30)
        assert "did not arrive" in t.error(r, 408)
        with connect(t.base) as s:  # a connection that never speaks is closed without an answer
            s.settimeout(30)
            assert s.recv(100) == b""
        _alive(t)


@pytest.mark.parametrize("kind", ["webshop", "model"])
def test_connections_past_the_limit_get_503(kind, backend):
    with _limited(kind, backend, max_connections=8) as t:
        idle = [connect(t.base) for _ in range(8)]
        try:
            time.sleep(0.5)  # let the server accept them
            r = raw(t.base, f"GET {t.health} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert "limit of 8" in t.error(r, 503)
        finally:
            for s in idle:
                s.close()
        time.sleep(0.5)
        _alive(t)


# -- prompts far over the model's context (serve-model) -----------------------------------------------------------
NEAR_LIMIT = "turn up the dial " * 220_000  # 3.7 MB: under the 4 MiB body limit, ~900k tokens, a 2048-token context


@pytest.mark.parametrize("route,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": NEAR_LIMIT}], "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": NEAR_LIMIT}]}),
    ("/v1/completions", {"prompt": NEAR_LIMIT, "max_tokens": 4}),
    ("/v1/completions", {"prompt": ["set the dial", NEAR_LIMIT], "max_tokens": 4}),
], ids=["chat", "chat-system", "completion", "completion-list"])
def test_a_prompt_far_over_the_context_is_refused_from_its_first_part(model, route, body):
    """The refusal is certain once about a context's worth of the prompt is tokenized: the count it gives is that
    part's (not the whole prompt's ~900k tokens), and the server answers a health check and a normal request after."""
    r = httpx.post(model.base + route, json=body, timeout=120)
    message = model.error(r, 400)
    assert r.json()["error"]["code"] == "context_length_exceeded", message
    proof = re.search(r"at least (\d+) tokens", message)
    assert proof, message  # refused from a count of part of the prompt, not of all of it
    counted = int(proof.group(1))
    assert 2048 - 256 < counted < 4 * 2048 + 4 * CHUNK_CHARS // 4, message
    _alive(model)
    ok = httpx.post(model.base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                              "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200, ok.text


def test_a_prompt_that_fits_is_not_refused_and_one_just_over_gets_its_exact_count(model, backend):
    words = "turn up the dial "
    per = len(backend.tokenizer(words * 100, add_special_tokens=False)["input_ids"]) / 100
    fits = words * int((2048 - 64 - 40) / per)
    r = httpx.post(model.base + "/v1/completions", json={"prompt": fits, "max_tokens": 8}, timeout=120)
    assert r.status_code == 200, r.text
    over = words * int((2048 + 20) / per)
    message = model.error(httpx.post(model.base + "/v1/completions", json={"prompt": over, "max_tokens": 8},
                                     timeout=120), 400)
    exact = len(backend.tokenizer(over)["input_ids"])
    assert f"the prompt has {exact} tokens" in message, message


FRAGMENTS = ["a", "b", "dial", "turn up", " ", "  ", "\n", "\u00e9", "e\u0301", "<|im_start|>", "0123", "\u4e2d"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=200).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(texts, min_size=1, max_size=3), size=st.integers(8, 400), room=st.integers(0, 300))
def test_an_early_refusal_never_overcounts(backend, parts, size, room):
    """Whatever the text and wherever the pieces are cut, the count that refuses a prompt early is one the whole
    prompt holds at least: as chat messages under the template, and as one completion prompt."""
    over = provably_over(backend.tokenizer, parts, room, size=size)
    if over is None:
        return
    assert over > room
    chat = backend.prompt_ids([{"role": "user", "content": p} for p in parts])
    assert len(chat) >= over
    assert len(backend.tokenizer("".join(parts))["input_ids"]) >= over
