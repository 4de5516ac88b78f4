"""dreamgym serve-env: real and synthetic families served over OpenEnv's protocol, the remote TextEnv, OpenEnv's own
client, session isolation and cross-session batching, limits and token, the buffer's single owner surviving
SIGKILL, and a client pool failing over from a dead server."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openenv.cli._validation import validate_running_environment
from websockets.sync.client import connect

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.env import check_env
from dreamgym.envs import dial
from dreamgym.envserve.client import RemoteBuffer, RemoteEnvError, RemoteTextEnv
from dreamgym.envserve.pool import EnvPool
from dreamgym.envserve.server import EnvServerConfig, start_env_server
from dreamgym.types import Transition
from em_helpers import trained_dial_model
from servers import cli_server


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    """A served synthetic dial: the trained tiny experience model, a persistent buffer this server owns."""
    buf = tmp_path_factory.mktemp("served") / "buffer"
    cfg = EnvServerConfig(env="dial", dream=True, em=str(trained_dial_model()), buffer=str(buf), device="cpu",
                          max_sessions=16, batch_wait_ms=20)
    with start_env_server(cfg) as srv:
        yield srv


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def _play(env, seed: int, actions: list[str]) -> list[tuple]:
    obs, info = env.reset(seed=seed)
    trace = [obs]
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        trace.append((obs, r, term, trunc))
        if term or trunc:
            break
    return trace


def test_served_real_family_passes_check_env_and_speaks_openenv():
    from openenv.core.generic_client import GenericEnvClient

    with start_env_server(EnvServerConfig(env="dial")) as srv:
        env = RemoteTextEnv(srv.url)
        assert env.env_family == "dial" and not env.is_synthetic
        check_env(env)
        # The same episode as the real environment in this process, step for step.
        assert _play(RemoteTextEnv(srv.url), 7, ["turn up", "turn up", "submit"]) == \
            _play(dial.make_env("train"), 7, ["turn up", "turn up", "submit"])
        schema = httpx.get(srv.url + "/schema").json()
        assert "action" in schema["action"]["properties"] and "text" in schema["observation"]["properties"]
        # The state's schema lists what `state` returns beyond OpenEnv's base fields, and HTTP /state returns them.
        assert {"episode_id", "step_count", "task", "seed", "provenance", "terminated", "truncated"} <= \
            set(schema["state"]["properties"])
        state = httpx.get(srv.url + "/state").json()
        assert state["step_count"] == 0 and state["task"] is None and state["provenance"]["env"] == "dial"
        with GenericEnvClient(base_url=srv.url).sync() as client:  # OpenEnv's own client, unchanged
            first = client.reset(seed=7)
            assert first.observation["text"] == dial.make_env("train").reset(seed=7)[0] and not first.done
            assert first.observation["episode"]["seed"] == 7
            assert first.observation["episode"]["provenance"]["synthetic"] is False
            step = client.step({"action": "submit"})
            assert step.done and step.observation["terminated"] and step.reward in (0.0, 1.0)
            state = client.state()
            assert state["step_count"] == 1 and state["task"]["id"] == first.observation["episode"]["task"]["id"]
        # OpenEnv's stateless HTTP forms.
        r = httpx.post(srv.url + "/reset", json={"seed": 7, "task_id": "dial-4-2"})
        assert r.status_code == 200 and r.json()["observation"]["episode"]["task"]["id"] == "dial-4-2"
        # A stateless /step is taken on a fresh environment, as OpenEnv's HTTP /step is: the episode a reset with no
        # fields starts, named in the answer.
        r = httpx.post(srv.url + "/step", json={"action": {"action": "submit"}})
        assert r.status_code == 200 and r.json()["done"], r.text
        episode = r.json()["observation"]["episode"]
        assert episode["task"]["env"] == "dial" and episode["seed"] is None
        # OpenEnv's runtime checks, as `openenv validate --url` runs them.
        report = validate_running_environment(srv.url)
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]


def test_unknown_reset_fields_are_dropped_counted_and_named(caplog):
    """OpenEnv drops reset fields an environment does not take; a typo must not pass unnoticed, though."""
    with start_env_server(EnvServerConfig(env="dial")) as srv:
        caplog.set_level(logging.WARNING)
        for _ in range(2):
            r = httpx.post(srv.url + "/reset", json={"sead": 7, "colour": "red"})
            assert r.status_code == 200 and r.json()["observation"]["info"]["ignored_reset_fields"] == ["colour", "sead"]
        r = httpx.post(srv.url + "/reset", json={"seed": 7})
        assert "ignored_reset_fields" not in r.json()["observation"]["info"]
        stats = httpx.get(srv.url + "/stats").json()
        assert stats["ignored_reset_fields"] == {"colour": 2, "sead": 2} and stats["resets_with_ignored_fields"] == 2
    warned = [r.getMessage() for r in caplog.records if "not reset fields" in r.getMessage()]
    assert len(warned) == 1 and "colour, sead" in warned[0], warned  # once per name, not once per reset


def test_bad_requests_get_4xx_naming_the_problem_and_the_server_stays_up():
    cfg = EnvServerConfig(env="dial", max_body_mb=0.01, max_sessions=2)
    with start_env_server(cfg, token="s3cret") as srv:
        auth = {"Authorization": "Bearer s3cret"}
        assert httpx.get(srv.url + "/health").status_code == 200  # health checks need no token
        r = httpx.post(srv.url + "/reset", json={})
        assert r.status_code == 401 and "Bearer" in r.json()["message"]
        assert r.json()["detail"] == [{"type": "unauthorized", "loc": [], "msg": r.json()["message"]}]
        with pytest.raises(Exception, match="403"), connect(_ws(srv.url)):
            pass
        # FastAPI's (and OpenEnv's) error shape: `detail` a list of {type, loc, msg}, validation errors at 422.
        r = httpx.post(srv.url + "/reset", content=b'{"seed": ', headers={**auth, "content-type": "application/json"})
        assert r.status_code == 422 and "JSON" in r.json()["message"] and r.json()["detail"][0]["type"] == "json_invalid"
        r = httpx.post(srv.url + "/step", json={"action": {"action": "x" * 20_000}}, headers=auth)
        assert r.status_code == 413 and "limit of 10485 bytes" in r.json()["detail"][0]["msg"]
        r = httpx.post(srv.url + "/step", json={"action": {"move": "up"}}, headers=auth)
        assert r.status_code == 422 and "action: Field required" in r.json()["message"]
        assert {(e["type"], tuple(e["loc"])) for e in r.json()["detail"]} >= {("missing", ("action",))}
        r = httpx.post(srv.url + "/reset", json={"seed": "x"}, headers=auth)
        assert r.status_code == 422 and "seed: Input should be a valid integer" in r.json()["message"]
        assert r.json()["detail"][0]["loc"] == ["body", "seed"] and r.json()["detail"][0]["input"] == "x"
        r = httpx.post(srv.url + "/reset", json={"task_id": "nope"}, headers=auth)
        assert r.status_code == 400 and "'nope' is not a task of dial/train" in r.json()["detail"][0]["msg"]
        # A stock client takes no headers: the token goes in its URL as a password, sent as Basic credentials.
        from openenv.core.generic_client import GenericEnvClient

        with GenericEnvClient(base_url=srv.url.replace("http://", "http://token:s3cret@")).sync() as client:
            assert client.reset(seed=1).observation["episode"]["seed"] == 1
        with pytest.raises(ConnectionError, match="403"):
            GenericEnvClient(base_url=srv.url.replace("http://", "http://token:wrong@")).sync().connect()
        assert httpx.get(srv.url.replace("http://", "http://token:s3cret@") + "/stats").status_code == 200
        report = validate_running_environment(srv.url.replace("http://", "http://token:s3cret@"))
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
        env = RemoteTextEnv(srv.url, token="s3cret")
        env.reset(seed=1)
        ws = env._connect()
        for bad, code in (("{not json", "INVALID_JSON"), (json.dumps({"type": "jump"}), "UNKNOWN_TYPE"),
                          (json.dumps({"type": "step", "data": {"action": "a" * 20_000}}), "MESSAGE_TOO_LARGE"),
                          (json.dumps({"type": "reset", "data": {"task_id": "nope"}}), "EXECUTION_ERROR")):
            ws.send(bad)
            answer = json.loads(ws.recv(timeout=10))
            assert answer["type"] == "error" and answer["data"]["code"] == code, answer
        assert "'nope' is not a task of dial/train" in answer["data"]["message"]
        obs, r, term, trunc, info = env.step("submit")  # the session survived all of it
        assert term and isinstance(info["task"], dial.Task if hasattr(dial, "Task") else object)
        # Sessions past the limit are refused with OpenEnv's code; closing one frees its place.
        others = [RemoteTextEnv(srv.url, token="s3cret")]
        others[0].reset(seed=2)
        with pytest.raises(RemoteEnvError, match="CAPACITY_REACHED"):
            RemoteTextEnv(srv.url, token="s3cret").reset(seed=3)
        env.close()
        deadline = time.time() + 10  # the server frees a closed session's place right after its close message
        while True:
            try:
                assert RemoteTextEnv(srv.url, token="s3cret").reset(seed=3)[0]
                break
            except RemoteEnvError:
                assert time.time() < deadline, "a closed session's place was never freed"
                time.sleep(0.1)
        assert httpx.get(srv.url + "/stats", headers=auth).json()["episodes"] >= 3


def test_served_synthetic_family_passes_check_env_and_batches_concurrent_sessions(dream):
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.dream.synthetic_env import SyntheticEnv

    env = RemoteTextEnv(dream.url)
    assert env.is_synthetic and env.env_family == "dial"
    check_env(env, n_steps=3)
    # Sixteen concurrent sessions: each one's observations are what the same seed and actions give in-process,
    # and the server stepped them in shared experience-model batches.
    plans = {s: ["turn up", "turn down", "turn up", "submit"][: 2 + s % 3] for s in range(16)}
    before = httpx.get(dream.url + "/stats").json()["gatherer"]["largest_batch"]
    barrier = threading.Barrier(len(plans))

    def served(seed: int) -> list[tuple]:
        e = RemoteTextEnv(dream.url)
        e.reset(seed=seed)
        barrier.wait()
        try:
            return _play(e, seed, plans[seed])
        finally:
            e.close()

    with ThreadPoolExecutor(len(plans)) as ex:
        got = dict(zip(plans, ex.map(served, plans)))
    stats = httpx.get(dream.url + "/stats").json()
    assert max(before, stats["gatherer"]["largest_batch"]) > 1
    assert stats["experience_model_batches"]["largest_batch"] > 1
    em = trained_dial_model()
    model = ExperienceModel.load(em, buffer=checkpoint_buffer(em), device="cpu")
    for seed, actions in plans.items():
        assert got[seed] == _play(SyntheticEnv(model), seed, actions), f"session with seed {seed}"


def test_the_buffer_owner_takes_transitions_from_other_processes(dream):
    rb = RemoteBuffer(dream.url)
    n0 = len(rb)
    tr = Transition(task=dial.tasks("train")[0], history=[], state=dial.abstract_state(3), action="turn up",
                    next_state=dial.abstract_state(4), reward=0.0, done=False, source="real")
    assert rb.add([tr]) == 1 and rb.add([tr]) == 0 and len(rb) == n0 + 1  # deduplicated by the owner
    r = httpx.post(dream.url + "/buffer/transitions", json={"transitions": [tr.to_dict(), {"state": "x"}]})
    assert r.status_code == 400 and r.json()["message"].startswith("transitions[1]: not a transition record")


def test_a_killed_dream_server_leaves_every_answered_transition_in_its_buffer(tmp_path):
    buf = tmp_path / "buffer"
    acked: list[tuple[str, str, str]] = []
    stop = threading.Event()
    args = ["serve-env", "--env", "dial", "--dream", "--em", str(trained_dial_model()), "--buffer", str(buf),
            "--port", "0", "--device", "cpu", "--threads", "1"]
    with cli_server(args) as (proc, url):
        def worker(k: int) -> None:
            env = RemoteTextEnv(url)
            seed = 100 * k
            try:
                while not stop.is_set():
                    obs, info = env.reset(seed=seed)
                    seed += 1
                    done = False
                    while not done and not stop.is_set():
                        state = info["abstract_state"]
                        action = ["turn up", "turn down", "submit"][len(acked) % 3]
                        obs, r, term, trunc, info = env.step(action)
                        done = term or trunc
                        if info.get("buffered"):
                            acked.append((state, action, info["abstract_state"]))
            except Exception:  # noqa: BLE001 - the server is killed under it
                pass

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while len(acked) < 12 and time.time() < deadline:
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the workers are still stepping
        proc.wait()
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert len(acked) >= 12
    from dreamgym.replay.embed import HashingEmbedder  # the checkpoint's embedder

    with ReplayBuffer(buf, HashingEmbedder()) as reopened:
        stored = {(t.state, t.action, t.next_state) for t in reopened.transitions() if t.source == "synthetic"}
    missing = [a for a in acked if a not in stored]
    assert not missing, f"{len(missing)} of {len(acked)} answered transitions lost"


def test_a_pool_fails_a_dead_servers_sessions_over_to_a_live_one():
    a = start_env_server(EnvServerConfig(env="dial"))
    b = start_env_server(EnvServerConfig(env="dial"))
    try:
        pool = EnvPool([a.url, b.url], recheck_s=60)
        envs = [pool.make_env() for _ in range(4)]
        firsts = [e.reset(seed=10 + i) for i, e in enumerate(envs)]
        assert {e.remote.url for e in envs} == {a.url, b.url}  # round-robin
        for e in envs:
            e.step("turn up")
        a.stop()  # killed with two sessions on it, mid-episode
        outs = [e.step("turn up") for e in envs]
        moved = [e for e in envs if e.failovers]
        assert len(moved) == 2 and all(f["server"] == a.url and f["to"] == b.url for e in moved for f in e.failovers)
        assert all("failover" in o[4] for e, o in zip(envs, outs) if e.failovers)
        assert pool.events and pool.events[0]["server"] == a.url and pool.events[0]["reason"]
        # Each episode goes on exactly as it would have on one server.
        real = dial.make_env("train")
        for i, o in enumerate(outs):
            assert firsts[i][0] == real.reset(seed=10 + i)[0]
            real.step("turn up")
            assert o[0] == real.step("turn up")[0]
        assert pool.make_env().reset(seed=1)[0] and pool.check() == {a.url: False, b.url: True}
    finally:
        b.stop()
        a.stop()


def test_dreamgym_evaluation_runs_unchanged_against_a_served_environment():
    """The rollout engine (threads stepping sessions) and the budget accounting see a served real family as they see
    the in-process one: same episodes, same outcome, real steps charged."""
    from dreamgym.rl.evaluate import EvalConfig, evaluate_policy
    from dreamgym.llm.hf import HFBackend
    from dreamgym.rl.budget import RealStepBudget
    from dreamgym.rl.rollout import RolloutConfig

    backend = HFBackend.from_preset("tiny", device="cpu")
    tasks = dial.tasks("test")[:3]
    # The untrained tiny policy writes no <action> tags: its raw text goes to the environment as the action.
    cfg = EvalConfig(rollout=RolloutConfig(on_invalid_action="pass", max_new_tokens=8))
    local = evaluate_policy(backend, lambda: dial.make_env("test"), tasks, [0, 1], cfg)
    with start_env_server(EnvServerConfig(env="dial", split="test")) as srv:
        budget = RealStepBudget(10_000)
        served = evaluate_policy(backend, lambda: RemoteTextEnv(srv.url), tasks, [0, 1], cfg, budget=budget)
    assert (served.n, served.n_success, served.mean_steps, served.mean_reward) == \
        (local.n, local.n_success, local.mean_steps, local.mean_reward)
    assert budget.used == round(served.mean_steps * served.n) > 0


def test_serve_env_takes_a_config_file_then_key_value_then_its_field_options(tmp_path):
    """`dreamgym serve-env --config FILE key=value` as every command: the file's fields hold unless an override or a
    field option (`--env`, `--max-batch`, ...) given on the command line sets them; an option not given changes
    nothing; bad config fails naming the field."""
    from dreamgym.config import ConfigError
    from dreamgym.envserve.server import parse_command

    f = tmp_path / "serve.yaml"
    f.write_text("env: dial\nsplit: test\nmax_sessions: 3\nmax_batch: 7\nmax_body_mb: 0.01\n")
    cfg, args = parse_command(["--config", str(f), "max_sessions=2", "--port", "0"])
    assert (cfg.env, cfg.split, cfg.max_sessions, cfg.max_batch, cfg.max_body_mb, cfg.dream) == \
        ("dial", "test", 2, 7, 0.01, False)
    assert args.port == 0
    cfg, _ = parse_command(["--config", str(f), "--max-batch", "1", "--split", "train"])
    assert (cfg.split, cfg.max_batch, cfg.max_sessions) == ("train", 1, 3)
    with pytest.raises(ConfigError, match=r"^max_batch: 0 is out of range"):
        parse_command(["--config", str(f), "--max-batch", "0"])
    with pytest.raises(ConfigError, match=r"^em: "):
        parse_command(["--config", str(f), "dream=true", "em=/no/such/checkpoint"])
    # The served process honours the file: its body limit (0.01 MiB) and the override's session limit (1).
    with cli_server(["serve-env", "--config", str(f), "max_sessions=1", "--port", "0"]) as (_, url):
        r = httpx.post(url + "/reset", content=b"{" + b" " * 20_000 + b"}", headers={"content-type": "application/json"})
        assert r.status_code == 413 and "limit of 10485 bytes" in r.json()["message"]
        first = RemoteTextEnv(url)
        first.reset(seed=1)
        with pytest.raises(RemoteEnvError, match="CAPACITY_REACHED"):
            RemoteTextEnv(url).reset(seed=2)
        first.close()
