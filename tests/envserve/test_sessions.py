"""serve-env sessions under hostile clients: a bad message (a JSON value that is not an object, a binary frame, a
string with a lone surrogate, JSON nested too deeply) gets an error naming the problem and the session goes on with
its episode; sessions exist only as documented (WebSocket connections at /ws), so OpenEnv's MCP routes cannot take
the session slots; a client that leaves in the middle of a step is logged in one line. Real servers in this
process (the real dial, and a dream on the fake LM for a step that takes a while), real WebSocket and HTTP clients.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from dreamgym.envserve.server import EnvServerConfig, start_env_server


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def _ask(ws, message: str | bytes) -> dict:
    ws.send(message)
    return json.loads(ws.recv(timeout=30))


@pytest.fixture(scope="module")
def server():
    with start_env_server(EnvServerConfig(env="dial", max_sessions=4)) as srv:
        yield srv


@pytest.fixture(scope="module")
def session(server):
    """One session, reset once: every bad message below goes to it, and it must still be playing that episode."""
    with connect(_ws(server.url)) as ws:
        answer = _ask(ws, json.dumps({"type": "reset", "data": {"seed": 7}}))
        assert answer["type"] == "observation", answer
        yield ws


def _still_playing(ws) -> None:
    """The session answers a step of its episode, and its state counts the step."""
    before = _ask(ws, json.dumps({"type": "state"}))["data"]
    step = _ask(ws, json.dumps({"type": "step", "data": {"action": "look"}}))
    assert step["type"] == "observation", step
    after = _ask(ws, json.dumps({"type": "state"}))["data"]
    assert after["episode_id"] == before["episode_id"] and after["step_count"] == before["step_count"] + 1


@pytest.mark.parametrize("message,code,says", [
    ("[1, 2]", "VALIDATION_ERROR", "a JSON object"),
    ("\"step\"", "VALIDATION_ERROR", "got a JSON string"),
    ("null", "VALIDATION_ERROR", "got JSON null"),
    (b'{"type": "step", "data": {"action": "look"}}', "INVALID_JSON", "binary frame"),
    ('{"type": "step", "data": {"action": "turn up \\ud800"}}', "VALIDATION_ERROR", "lone surrogate"),
    ('{"type": "reset", "data": {"seed": 1, "task": {"id": "dial-3-5", "env": "dial", "instruction": '
     '"set the dial to 5 \\udfff", "goal": {"target": 5, "start": 3}}}}', "VALIDATION_ERROR", "lone surrogate"),
    ("[" * 200_000 + "]" * 200_000, "INVALID_JSON", "nested too deeply"),
], ids=["array", "string", "null", "binary-frame", "surrogate-in-action", "surrogate-in-task", "nested"])
def test_a_bad_message_gets_an_error_naming_it_and_the_session_keeps_its_episode(session, message, code, says):
    answer = _ask(session, message)
    assert answer["type"] == "error" and answer["data"]["code"] == code, answer
    assert says in answer["data"]["message"], answer
    _still_playing(session)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(json_values.map(json.dumps),
                 st.fixed_dictionaries({"type": st.sampled_from(["step", "reset", "state", "jump"]),
                                        "data": json_values}).map(json.dumps),
                 st.text().map(lambda a: json.dumps({"type": "step", "data": {"action": a}})),
                 st.binary(max_size=64)))
def test_no_message_ends_a_session(session, message):
    """Whatever a client sends, the session answers it (an observation, a state or an error) and stays open."""
    answer = _ask(session, message)
    assert answer["type"] in ("observation", "state", "error"), answer
    if answer["type"] == "error":
        assert answer["data"]["code"] != "SESSION_ERROR" and answer["data"]["message"], answer
    _ask(session, json.dumps({"type": "reset", "data": {"seed": 3}}))  # an episode may have ended: a fresh one
    _still_playing(session)


def test_sessions_are_websocket_connections_only(server):
    """OpenEnv's HTTP MCP route created sessions that no connection held: 64 POSTs took every slot until the idle
    timeout. This server serves no MCP tools; the route is refused, naming where sessions are."""
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    for _ in range(6):  # more than the server's 4 session slots
        r = httpx.post(server.url + "/mcp", json=create)  # a JSON-RPC error (as OpenEnv's tools expect) naming /ws
        assert r.status_code == 200 and r.json()["error"]["code"] == -32601 and "/ws" in r.json()["error"]["message"]
    assert httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).json()[
        "result"] == {"tools": []}
    with pytest.raises(Exception, match="4404|404"), connect(server.url.replace("http://", "ws://") + "/mcp") as ws:
        ws.send(json.dumps(create))
        ws.recv(timeout=10)
    with contextlib.ExitStack() as stack:
        for _ in range(3):  # the module's session holds the fourth slot
            ws = stack.enter_context(connect(_ws(server.url)))
            assert _ask(ws, json.dumps({"type": "reset", "data": {"seed": 1}}))["type"] == "observation"


def test_a_client_leaving_mid_step_is_logged_in_one_line(tmp_path, caplog):
    from fake_lm_dream_server import fake_dream_model

    from dreamgym.replay.buffer import ReplayBuffer
    from dreamgym.replay.embed import HashingEmbedder

    buffer = ReplayBuffer(tmp_path / "buffer", HashingEmbedder())
    # A synthetic step waits 300 ms for other sessions' steps to batch with: the client is gone when it is answered.
    cfg = EnvServerConfig(env="dial", dream=True, buffer=str(tmp_path / "buffer"), batch_wait_ms=300)
    caplog.set_level(logging.INFO)
    with start_env_server(cfg, model=fake_dream_model(buffer), buffer=buffer) as srv:
        for _ in range(3):
            with connect(_ws(srv.url)) as ws:
                assert _ask(ws, json.dumps({"type": "reset", "data": {"seed": 2}}))["type"] == "observation"
                ws.send(json.dumps({"type": "step", "data": {"action": "turn up"}}))
        time.sleep(1.5)
        assert httpx.get(srv.url + "/health").status_code == 200
    records = [r for r in caplog.records if r.levelno >= logging.WARNING or "left" in r.getMessage()]
    assert not [r for r in records if r.exc_info or "Traceback" in r.getMessage()], [r.getMessage() for r in records]
    left = [r.getMessage() for r in caplog.records if "left during" in r.getMessage()]
    assert len(left) == 3 and all("\n" not in m for m in left), [r.getMessage() for r in caplog.records]
