import dataclasses
import json

import pytest

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.envs.dial import abstract_state, parse_state
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.data import checkpoint_buffer, em_transitions
from dreamgym.experience.format import FAILURE_STATE, STOP, format_completion, query_for
from dreamgym.experience.model import ExperienceModel
from dreamgym.llm.fake import FakeLLM
from em_helpers import dial_query, dial_sim, dial_trajectories, family_steps, trained_dial_model
from model_fixtures import EM_PROBES, em_probe_score

# ------------------------------------------------------------------------------- prediction with FakeLLM


def test_malformed_output_is_retried_then_becomes_the_failure_state_and_is_counted():
    good = format_completion(abstract_state(4), 0.0, False, "ok")

    def answer(req):
        return "I refuse to use the format" if "Action: submit" in req[-1]["content"] else good

    llm = FakeLLM(answer)
    m = ExperienceModel(llm, config=ExperienceModelConfig(retries=2))
    preds = m.predict([dial_query(3, "turn up"), dial_query(3, "submit"), dial_query(3, "turn up")])
    assert [p.failed for p in preds] == [False, True, False]
    fail = preds[1]
    assert fail.next_state == FAILURE_STATE and fail.reward == 0.0 and fail.done is True
    assert fail.attempts == 3 and fail.error == "no <state> or <edit> block"
    # One generate call for the batch, then one per retry round holding only the malformed request.
    assert m.stats["generate_calls"] == 3 and len(llm.calls) == 3 + 2
    assert m.stats["malformed"] == 3 and m.stats["retries"] == 2 and m.stats["failures"] == 1
    assert m.stats["predictions"] == 3


def test_a_retry_can_recover_and_backend_errors_never_raise():
    llm = FakeLLM(["<state>cut off", format_completion(abstract_state(4), 0.0, False, "ok")])
    m = ExperienceModel(llm, config=ExperienceModelConfig(retries=1))
    (p,) = m.predict([dial_query(3, "turn up")])
    assert not p.failed and p.attempts == 2 and parse_state(p.next_state) == 4 and m.stats["failures"] == 0

    class Dead:
        def generate(self, requests, params):
            raise TimeoutError("backend down")

    dead = ExperienceModel(Dead(), config=ExperienceModelConfig(retries=1))
    (p,) = dead.predict([dial_query(3, "turn up")])
    assert p.failed and dead.stats["backend_errors"] == 2 and dead.stats["failures"] == 1


def test_predict_retrieves_from_the_buffer_excluding_the_own_trajectory():
    trajs = dial_trajectories(6)
    buf = ReplayBuffer(None, HashingEmbedder())
    buf.add(em_transitions(trajs, history=2), seed_data=True)
    llm = FakeLLM(dial_sim)
    m = ExperienceModel(llm, buffer=buf, config=ExperienceModelConfig(k=2), env="dial")
    own = trajs[0].id
    q = em_transitions([trajs[0]], history=2)[1]
    (p,) = m.predict([query_for(q.task, q.state, q.action, q.history, trajectory_id=own)])
    assert len(p.examples) == 2 and all(e.trajectory_id != own for e in p.examples)
    assert llm.calls[-1][-1]["content"].count("## ") == 2
    assert p.next_state == q.next_state  # the scripted dial rules
    no_ret = ExperienceModel(llm, buffer=buf, config=ExperienceModelConfig(use_retrieval=False))
    (p,) = no_ret.predict([q])
    assert p.examples == [] and "Examples" not in llm.calls[-1][-1]["content"]


def test_timings_split_prediction_into_its_parts_apart_from_the_counted_stats():
    """`timings` holds the wall seconds of retrieval, prompt building, the generate calls and parsing (retries
    included); `stats`, whose counts are logged as metrics, holds no timing."""
    trajs = dial_trajectories(6)
    buf = ReplayBuffer(None, HashingEmbedder())
    buf.add(em_transitions(trajs, history=2), seed_data=True)
    m = ExperienceModel(FakeLLM(["<state>cut off", format_completion(abstract_state(4), 0.0, False, "ok")]),
                        buffer=buf, config=ExperienceModelConfig(k=2, retries=1), env="dial")
    m.predict([em_transitions(trajs[:1], history=2)[1]])
    assert set(m.timings) == {"retrieval_s", "prompt_s", "generate_s", "parse_s"}
    assert all(v > 0 for v in m.timings.values())
    assert not any(k.endswith("_s") for k in m.stats)


# ------------------------------------------------------------------------------ a trained tiny model

@pytest.fixture(scope="module")
def trained():
    return trained_dial_model()


@pytest.fixture(scope="module")
def trained_model(trained):
    return ExperienceModel.load(trained, buffer=checkpoint_buffer(trained), device="cpu")


def test_trained_tiny_model_loads_and_predicts_the_dynamics(trained, trained_model):
    """The shipped dial experience model (tests/fixtures/models/dial-em, see `model_fixtures`) through today's
    checkpoint loading, retrieval, prompt and parser: it must still predict the dial's arithmetic and which action
    ends the episode. Measured on this fixture: 8 of the 9 next values right and all 9 `done`s, the same under
    default kernels with 1 and 2 threads, AVX2 kernels with 2 threads and ATen's non-vectorised kernels with 1
    (2026-12-05, AMD EPYC); the threshold leaves one probe of room for another CPU's rounding."""
    meta = json.loads((trained / "em_config.json").read_text())
    assert meta["env"] == "dial" and meta["lora"] is False and meta["model"]["k"] == 2 and meta["final"]
    assert (trained / "model" / "config.json").is_file()
    m = trained_model
    m.stats.clear()
    score = em_probe_score(m)
    assert m.stats["failures"] == 0 and m.stats["generate_calls"] == 1
    assert score["values_right"] >= 7, score["texts"]
    assert score["done_right"] == len(EM_PROBES), score["texts"]


def test_trained_tiny_model_never_credits_a_losing_submit(trained_model):
    """A false success is the error that breaks RL in the dream, so a losing submit must get reward 0 (measured
    0 and 0 on the shipped fixture under the four settings above).

    Whether the winning submit gets reward 1 is not asserted: the reward is learnt at the edge of this fixture's
    training budget (reward-1 recall 0.14 on held-out steps for one build, while the quickstart's model with the
    same settings on other data reaches reward accuracy 0.996)."""
    preds = trained_model.predict([dial_query(v, "submit") for v in (2, 5, 7)])
    assert [p.reward for p in (preds[0], preds[2])] == [0.0, 0.0], [p.text for p in preds]
    assert preds[1].reward in (0.0, 1.0) and all(p.done for p in preds), [p.text for p in preds]


def test_retrieval_changes_the_prediction(trained_model):
    """The model uses its k examples: on held-out real dial episodes, the same model with retrieval switched
    off at inference predicts different (and far worse) next states and rewards."""
    from dreamgym.experience.fidelity import teacher_forced

    held = em_transitions(dial_trajectories(16, split="test", seed=3), history=0)
    on_preds = trained_model.predict(held)
    off_model = ExperienceModel(trained_model.llm, buffer=trained_model.buffer, env="dial",
                                config=dataclasses.replace(trained_model.config, use_retrieval=False))
    off_preds = off_model.predict(held)
    assert all(p.examples for p in on_preds) and not any(p.examples for p in off_preds)
    assert sum(a.text != b.text for a, b in zip(on_preds, off_preds)) >= len(held) // 4
    on, off = teacher_forced(trained_model, held), teacher_forced(off_model, held)
    assert on["state_em"] >= off["state_em"] + 0.15, (on, off)  # measured 0.98 vs 0.66


# ------------------------------------------------------------------------------ structured decoding

def test_structured_decoding_leaves_no_malformed_answer_on_held_out_dial_steps_in_process_and_over_http(
        trained, trained_model):
    """Sampled at temperature 1.5, the shipped dial model's free answers were malformed on 5 of these 19 held-out
    steps (2026-12-05); decoded inside the output format, none is, locally and through `dreamgym serve-model`."""
    from dreamgym.llm.server import start_server

    held = em_transitions(dial_trajectories(4, split="test", seed=5), history=0)
    hot = ["temperature=1.5", "retries=0"]
    local = ExperienceModel(trained_model.llm, buffer=trained_model.buffer, env="dial",
                            config=dataclasses.replace(trained_model.config, temperature=1.5, retries=0))
    with start_server(trained_model.llm, model_name="em") as server:
        remote = ExperienceModel.load(trained, buffer=trained_model.buffer, url=f"{server.url}#em",
                                      config_overrides=hot)
        for m in (local, remote):
            preds = m.predict(held, seed=1)
            assert m.stats["malformed"] == 0 and m.stats["generate_calls"] == 1, [p.text for p in preds if p.failed]
            assert all(p.text.endswith(STOP) and p.reward in (0.0, 1.0) for p in preds)
        remote.llm.close()


def test_structured_decoding_makes_the_untrained_preset_write_the_format_and_stop_at_done():
    """The untrained tiny preset writes arbitrary tokens: every free answer is malformed, every structured one
    matches the format, holds a reward the config allows, and ends at `</done>` with nothing generated after it
    (the think budget and the reserves close each field in time within max_new_tokens)."""
    import re

    from dreamgym.experience.format import output_regex
    from dreamgym.llm.hf import HFBackend

    llm = HFBackend.from_preset("tiny", device="cpu")
    queries = [dial_query(v, a) for v, a in ((2, "turn up"), (5, "submit"), (7, "turn down"))]
    cfg = ExperienceModelConfig(embedder="hashing", max_new_tokens=80, max_think_tokens=12, temperature=1.0,
                                retries=0)
    free = ExperienceModel(llm, config=dataclasses.replace(cfg, structured_output=False), env="dial")
    assert all(p.failed for p in free.predict(queries, seed=2))
    m = ExperienceModel(llm, config=cfg, env="dial")
    preds = m.predict(queries, seed=2)
    assert m.stats["malformed"] == 0 and m.stats["retries"] == 0
    comps = llm.generate(m.requests(queries), m._params(1.0, 2))
    for c in comps:
        assert re.fullmatch(output_regex(cfg), c.text), c.text
        assert llm.tokenizer.decode(c.token_ids) == c.text and len(c.token_ids) <= cfg.max_new_tokens
    assert [p.text for p in preds] == [c.text for c in comps]


SHIPPED_FAMILIES = ("dial", "webshop", "alfworld", "textworld", "miniwob")


def family_available(env_name: str) -> bool:
    """Whether `env_name`'s real environment runs here (its engine installed; MiniWoB++: a Chromium)."""
    import importlib.util

    if env_name == "miniwob":
        from dreamgym.envs.web.browser import chromium_available

        return chromium_available()
    return env_name not in ("alfworld", "textworld") or importlib.util.find_spec(env_name) is not None


@pytest.fixture(scope="module")
def tiny_server():
    """`dreamgym serve-model` serving the untrained tiny preset, and the same preset in-process."""
    from dreamgym.llm.hf import HFBackend
    from servers import cli_server

    with cli_server(["serve-model", "--preset", "tiny", "--port", "0", "--device", "cpu", "--threads", "1"]) as (_, url):
        yield url + "/v1", HFBackend.from_preset("tiny", device="cpu")


@pytest.mark.parametrize("env_name", SHIPPED_FAMILIES)
def test_structured_decoding_on_real_steps_of_every_family_in_process_and_through_serve_model(env_name, tiny_server):
    """The hard case: the untrained tiny preset sampled at temperature 1.5 on 8 real steps of each shipped family,
    default budgets, no retry. In process the per-field token budgets close every field in time; through
    `dreamgym serve-model` they travel as character bounds in the regex (`server_regex`) with the request's max_tokens
    raised to its longest answer: every answer parses either way. Before the bounds, 7 of 8 dial answers over HTTP
    were cut at 512 tokens inside the <think> trace (docs/log/31-fidelity-gate.md)."""
    if not family_available(env_name):
        pytest.skip(f"{env_name} cannot run here")
    from dreamgym.llm.http import HTTPTokenBackend

    steps = family_steps(env_name, 8)
    cfg = ExperienceModelConfig(embedder="hashing", temperature=1.5, retries=0)
    url, local = tiny_server
    m = ExperienceModel(local, config=cfg, env=env_name)
    preds = m.predict(steps, seed=3)
    assert m.stats["malformed"] == 0 and m.stats["failures"] == 0, [p.error for p in preds if p.failed]
    assert all(p.text.endswith(STOP) and p.reward in (0.0, 1.0) for p in preds)
    remote_llm = HTTPTokenBackend([url], local.tokenizer, served_model="tiny")
    try:
        remote = ExperienceModel(remote_llm, config=cfg, env=env_name)
        preds = remote.predict(steps, seed=3)
    finally:
        remote_llm.close()
    assert remote.stats["malformed"] == 0 and remote.stats["failures"] == 0, [p.text[-80:] for p in preds if p.failed]
    assert all(p.text.endswith(STOP) and p.reward in (0.0, 1.0) for p in preds)
