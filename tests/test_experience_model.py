import dataclasses
import json

import pytest

from dreamgym.buffer import ReplayBuffer
from dreamgym.embed import HashingEmbedder
from dreamgym.envs.dial import abstract_state, parse_state
from dreamgym.experience_model import (FAILURE_STATE, RESET_ACTION, ExperienceModel, ExperienceModelConfig,
                                       balance_outcomes, buffer_spec, build_request, checkpoint_buffer, em_transitions, format_completion,
                                       parse_completion, query_for, train_main)
from dreamgym.llm.fake import FakeLLM
from dreamgym.types import Task, Transition
from em_helpers import dial_sim, dial_trajectories, trained_dial_model

TASK = Task(id="dial-3-5", env="dial", instruction="set the dial to 5 and press submit", goal={"target": 5, "start": 3})


def _q(v: int, action: str, history=None, tid: str = "q") -> Transition:
    return query_for(TASK, abstract_state(v), action, history=history, trajectory_id=tid)


# ------------------------------------------------------------------------------------------ output format

def test_format_and_parse_round_trip():
    text = format_completion(abstract_state(4), 1.0, True, "The dial  moves\nup.")
    assert text.startswith("<think>The dial moves up.</think>\n<state>\n[dial] 4")
    assert text.endswith("<reward>1</reward>\n<done>true</done>")
    p, err = parse_completion(text)
    assert err == "" and p.next_state == abstract_state(4) and p.reward == 1.0 and p.done and \
        p.reasoning == "The dial moves up."
    no_think = format_completion("s", 0.0, False, "ignored", use_reasoning=False)
    assert "<think>" not in no_think and parse_completion(no_think)[0].reasoning == ""


@pytest.mark.parametrize("text", [
    "<STATE>[dial] 2</STATE><Reward> 0.0 </Reward><done>False</done>",
    "junk before <think>x</think><state>\n[dial] 2\n<reward>0<done>no trailing text",
    "<state>[dial] 2</state>\n<reward>0</reward>\n<done>0</done>",
])
def test_parser_is_lenient_about_layout(text):
    p, err = parse_completion(text)
    assert err == "" and p.next_state == "[dial] 2" and p.reward == 0.0 and p.done is False


@pytest.mark.parametrize("text,reason", [
    ("", "empty output"),
    ("the dial turns", "no <state> block"),
    ("<state>   </state><reward>0</reward><done>true</done>", "empty <state>"),
    ("<state>x</state><reward>lots</reward><done>true</done>", "no parseable <reward>"),
    ("<state>x</state><reward>7</reward><done>true</done>", "reward 7 outside [0, 1]"),
    ("<state>x</state><reward>0</reward><done>maybe</done>", "no parseable <done>"),
    ("<state>x</state><reward>0</reward>", "no parseable <done>"),
])
def test_parser_rejects_malformed_output_with_a_reason(text, reason):
    p, err = parse_completion(text)
    assert p is None and err == reason


# ------------------------------------------------------------------------------------------- prompts

def test_prompt_has_task_examples_history_state_action_and_ablations_drop_them():
    ex = Transition(task=TASK, history=[], state=abstract_state(7), action="turn down",
                    next_state=abstract_state(6), reward=0.0, done=False)
    q = _q(3, "turn up", history=[(abstract_state(1), "turn up"), (abstract_state(2), "turn up")])
    cfg = ExperienceModelConfig(k=2, history=1)
    user = build_request(q, [ex], cfg)[-1]["content"]
    assert user.startswith("Task: set the dial to 5")
    assert "Examples:\n## 1\nState: [dial] 7" in user and "Action: turn down\n<state>\n[dial] 6" in user
    assert "</state>\n<reward>0</reward>\n<done>false</done>\nHistory" in user
    assert "History: turn up\n" in user  # only the last H=1 action
    assert user.endswith("State:\n" + abstract_state(3) + "\nAction: turn up")
    off = dataclasses.replace(cfg, use_retrieval=False, use_history=False)
    user_off = build_request(q, [ex], off)[-1]["content"]
    assert "Examples" not in user_off and "History" not in user_off and user_off.endswith("Action: turn up")
    assert build_request(q, [], dataclasses.replace(cfg, system_prompt=True))[0]["role"] == "system"
    # An example with a reasoning trace shows it, so the example reads exactly like an answer; off with the
    # switch or without reasoning in the output.
    traced = dataclasses.replace(ex, reasoning="Turning down moves the dial from 7 to 6.")
    user = build_request(q, [traced], cfg)[-1]["content"]
    assert "Action: turn down\n<think>Turning down moves the dial from 7 to 6.</think>\n<state>" in user
    for c in (dataclasses.replace(cfg, example_reasoning=False), dataclasses.replace(cfg, use_reasoning=False)):
        assert "<think>" not in build_request(q, [traced], c)[-1]["content"]


def test_prompt_is_fitted_to_the_token_budget():
    ex = [Transition(task=TASK, history=[], state=abstract_state(i), action="turn up",
                     next_state=abstract_state(i + 1), reward=0.0, done=False) for i in range(3)]
    q = _q(3, "turn up", history=[(abstract_state(2), "turn up")])
    words = lambda req: sum(len(m["content"].split()) for m in req)  # noqa: E731 - a simple token counter
    cfg = ExperienceModelConfig(k=3, max_prompt_tokens=words(build_request(q, ex, ExperienceModelConfig(k=3))) - 1)
    stats = {}
    from collections import Counter
    stats = Counter()
    req = build_request(q, ex, cfg, words, stats)
    assert words(req) <= cfg.max_prompt_tokens and req[-1]["content"].count("## ") == 2
    assert stats == {"examples_dropped": 1}
    tight = dataclasses.replace(cfg, max_prompt_tokens=12)
    req = build_request(q, ex, tight, words, stats)
    assert "Examples" not in req[-1]["content"] and "History" not in req[-1]["content"]
    assert stats["history_dropped"] == 1 and req[-1]["content"].endswith("Action: turn up")


def test_em_transitions_use_terminated_as_done_and_add_initial_states():
    trajs = dial_trajectories(8)
    trs = em_transitions(trajs, history=2)
    resets = [t for t in trs if t.action == RESET_ACTION]
    assert len(resets) == 8 and all(t.state == "" and t.next_state == tr.initial_state for t, tr in zip(resets, trajs))
    steps = [t for t in trs if t.action != RESET_ACTION]
    assert len(steps) == sum(len(t.steps) for t in trajs)
    flat = [s for t in trajs for s in t.steps]
    assert [t.done for t in steps] == [s.terminated for s in flat]  # truncation is not the model's to predict
    assert all(t.trajectory_id for t in trs) and all(len(t.history) <= 2 for t in trs)


# ------------------------------------------------------------------------------- prediction with FakeLLM

def test_balance_outcomes_repeats_the_rarer_final_transitions_only():
    def tr(i, done, reward):
        return Transition(task=TASK, history=[], state=abstract_state(i % 10), action="submit" if done else "turn up",
                          next_state=abstract_state(i % 10), reward=reward, done=done, trajectory_id=str(i))

    trs = [tr(i, False, 0.0) for i in range(10)] + [tr(i, True, 1.0) for i in range(7)] + [tr(7, True, 0.0),
                                                                                          tr(8, True, 0.0)]
    exs = [[t] for t in trs]
    out, out_ex = balance_outcomes(trs, exs, max_repeat=4)
    # 7 wins vs 2 losses: each loss now appears 3 times (7 // 2 = 3, under the cap); nothing else is repeated.
    assert sum(t.done and t.reward == 0 for t in out) == 6 and sum(t.done and t.reward == 1 for t in out) == 7
    assert sum(not t.done for t in out) == 10 and all(e == [t] for t, e in zip(out, out_ex))
    assert len(balance_outcomes(trs, exs, max_repeat=2)[0]) == len(trs) + 2  # the cap
    assert balance_outcomes(trs, exs, max_repeat=1)[0] == trs  # off


def test_buffer_spec_tells_apart_checkpoints_whose_seed_buffers_differ():
    def meta(**model):
        return {"env": "dial", "train": {"teacher": "env"},
                "model": {"embedder": "hashing", "history": 0, "use_reasoning": True, "example_reasoning": True,
                          **model}}

    base = buffer_spec(meta(), "d.jsonl")
    assert base == ("d.jsonl", "hashing", 0, True, "dial") == buffer_spec(meta(k=5), "d.jsonl")
    # Examples without traces (switched off, or no reasoning at all) come from an unannotated buffer.
    assert buffer_spec(meta(example_reasoning=False), "d.jsonl")[-1] is None
    assert buffer_spec(meta(use_reasoning=False), "d.jsonl")[-1] is None
    assert buffer_spec(meta(history=3), "d.jsonl") != base and buffer_spec(meta(), "e.jsonl") != base


def test_malformed_output_is_retried_then_becomes_the_failure_state_and_is_counted():
    good = format_completion(abstract_state(4), 0.0, False, "ok")

    def answer(req):
        return "I refuse to use the format" if "Action: submit" in req[-1]["content"] else good

    llm = FakeLLM(answer)
    m = ExperienceModel(llm, config=ExperienceModelConfig(retries=2))
    preds = m.predict([_q(3, "turn up"), _q(3, "submit"), _q(3, "turn up")])
    assert [p.failed for p in preds] == [False, True, False]
    fail = preds[1]
    assert fail.next_state == FAILURE_STATE and fail.reward == 0.0 and fail.done is True
    assert fail.attempts == 3 and fail.error == "no <state> block"
    # One generate call for the batch, then one per retry round holding only the malformed request.
    assert m.stats["generate_calls"] == 3 and len(llm.calls) == 3 + 2
    assert m.stats["malformed"] == 3 and m.stats["retries"] == 2 and m.stats["failures"] == 1
    assert m.stats["predictions"] == 3


def test_a_retry_can_recover_and_backend_errors_never_raise():
    llm = FakeLLM(["<state>cut off", format_completion(abstract_state(4), 0.0, False, "ok")])
    m = ExperienceModel(llm, config=ExperienceModelConfig(retries=1))
    (p,) = m.predict([_q(3, "turn up")])
    assert not p.failed and p.attempts == 2 and parse_state(p.next_state) == 4 and m.stats["failures"] == 0

    class Dead:
        def generate(self, requests, params):
            raise TimeoutError("backend down")

    dead = ExperienceModel(Dead(), config=ExperienceModelConfig(retries=1))
    (p,) = dead.predict([_q(3, "turn up")])
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


# ------------------------------------------------------------------------------ a trained tiny model

@pytest.fixture(scope="module")
def trained():
    return trained_dial_model()


@pytest.fixture(scope="module")
def trained_model(trained):
    return ExperienceModel.load(trained, buffer=checkpoint_buffer(trained), device="cpu")


PROBES = [(v, a) for v in (2, 5, 7) for a in ("turn up", "turn down", "submit")]  # TASK's target is 5


def test_trained_tiny_model_writes_a_loadable_checkpoint_and_learns_the_dynamics(trained, trained_model):
    meta = json.loads((trained / "em_config.json").read_text())
    assert meta["env"] == "dial" and meta["lora"] is False and meta["model"]["k"] == 2 and meta["final"]
    assert (trained / "model" / "config.json").is_file() and (trained / "trainer_state.pt").is_file()
    losses = [json.loads(line)["em/loss"] for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert losses[-1] < 0.05 * losses[0]
    m = trained_model
    m.stats.clear()
    preds = m.predict([_q(v, a) for v, a in PROBES])
    assert m.stats["failures"] == 0 and m.stats["generate_calls"] == 1
    # The dial's state arithmetic (8 of the 9 probes; the fixture measured 8) and which action ends the episode.
    want = [(v + {"turn up": 1, "turn down": -1, "submit": 0}[a], a == "submit") for v, a in PROBES]
    got = [(parse_state(p.next_state), p.done) for p in preds]
    assert sum(g[0] == w[0] for g, w in zip(got, want)) >= 8, [p.text for p in preds]
    assert [g[1] for g in got] == [w[1] for w in want]


@pytest.mark.xfail(strict=False, reason="known gap (issue 5): this fixture gives reward 0 to most winning submits "
                   "(reward-1 recall 0.14 on held-out steps) although the quickstart's model with the same settings "
                   "on other data reaches reward accuracy 0.996: the reward is learnt at the edge of this budget, and "
                   "a fixture built afresh on another machine (2026-12-01) did learn it (XPASS), so it is not strict")
def test_trained_tiny_model_predicts_the_submit_reward(trained_model):
    preds = trained_model.predict([_q(v, "submit") for v in (2, 5, 7)])
    assert [p.reward for p in preds] == [0.0, 1.0, 0.0], [p.text for p in preds]


def test_retrieval_changes_the_prediction(trained_model):
    """The model uses its k examples: on held-out real dial episodes, the same model with retrieval switched
    off at inference predicts different (and far worse) next states and rewards."""
    from dreamgym.fidelity import teacher_forced

    held = em_transitions(dial_trajectories(16, split="test", seed=3), history=0)
    on_preds = trained_model.predict(held)
    off_model = ExperienceModel(trained_model.llm, buffer=trained_model.buffer, env="dial",
                                config=dataclasses.replace(trained_model.config, use_retrieval=False))
    off_preds = off_model.predict(held)
    assert all(p.examples for p in on_preds) and not any(p.examples for p in off_preds)
    assert sum(a.text != b.text for a, b in zip(on_preds, off_preds)) >= len(held) // 4
    on, off = teacher_forced(trained_model, held), teacher_forced(off_model, held)
    assert on["state_em"] >= off["state_em"] + 0.15, (on, off)  # measured 0.98 vs 0.66


def test_train_em_cli_resumes_from_its_checkpoint(tmp_path, trained):
    from dreamgym.data import write_jsonl

    data = tmp_path / "d.jsonl"
    write_jsonl(data, dial_trajectories(20))
    out = tmp_path / "em"
    args = ["--env", "dial", "--data", str(data), "--out", str(out), "max_steps=4", "batch_size=4",
            "model.embedder=hashing", "model.k=1", "save_every=2", "log_every=2"]
    assert train_main(args) == 0
    s1 = json.loads((out / "train_summary.json").read_text())
    assert s1["steps"] == 4 and (out / "metrics.jsonl").is_file()
    assert train_main(args[:-4] + ["max_steps=6", "model.embedder=hashing", "model.k=1"]) == 0
    meta = json.loads((out / "em_config.json").read_text())
    assert meta["steps"] == 6 and json.loads((out / "train_summary.json").read_text())["steps"] == 6
    assert train_main(["--env", "dial", "--data", str(data), "nonsense.key=1"]) == 2


def test_lora_training_writes_a_peft_adapter_that_loads(tmp_path):
    from dreamgym.experience_model import TrainEMConfig, train

    out = tmp_path / "lora"
    cfg = TrainEMConfig(env="dial", data="unused", out=str(out), lora=True, max_steps=2, batch_size=4,
                        model=ExperienceModelConfig(k=0, use_retrieval=False), log_every=1)
    summary = train(cfg, trajectories=dial_trajectories(6))
    assert summary["lora"] and summary["steps"] == 2
    assert (out / "model" / "adapter_config.json").is_file() and not (out / "model" / "config.json").exists()
    m = ExperienceModel.load(out, device="cpu", config_overrides={"max_new_tokens": 24, "retries": 0})
    (p,) = m.predict([_q(3, "turn up")])
    assert isinstance(p.failed, bool) and m.stats["predictions"] == 1  # 2 steps teach nothing; it must run


def test_embedder_spec_is_checked_at_start_up():
    from dreamgym.config import ConfigError, load_config
    from dreamgym.experience_model import TrainEMConfig

    assert load_config(TrainEMConfig, None, ["model.embedder=hashing:64+action:2"]).model.embedder.endswith("+action:2")
    for bad in ("hashing+words", "hashing:x", "word2vec"):
        with pytest.raises(ConfigError, match="embedder"):
            load_config(TrainEMConfig, None, [f"model.embedder={bad}"])


def test_an_answer_that_contradicts_the_action_is_regenerated_like_a_malformed_one():
    """ALFWorld's `outcome_contradiction`: "go to shelf 1" answered "You arrive at desk 1." is rejected and
    re-generated; a second contradiction ends in the failure state; with the check off, it is kept."""
    from dreamgym.envs.alfworld.state import state_after

    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")
    state = "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", "Location: middle of the room",
                       "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none", "Known contents: none",
                       "Receptacles: desk 1, drawer 1, shelf 1"])
    wrong = format_completion("Observation: You arrive at desk 1. On the desk 1, you see a pen 2.", 0.0, False, "x")
    right = format_completion("Observation: You arrive at shelf 1. On the shelf 1, you see nothing.", 0.0, False, "x")
    query = query_for(task, state, "go to shelf 1")

    def predict(answers: list[str], check: bool = True):
        cfg = ExperienceModelConfig(use_retrieval=False, write_observation=True, retries=1,
                                    reject_contradictions=check)
        model = ExperienceModel(FakeLLM(answers), config=cfg, env="alfworld")
        return model.predict([query])[0], model.stats

    p, stats = predict([wrong, right])
    assert not p.failed and p.attempts == 2 and "Location: shelf 1" in p.next_state
    assert p.next_state == state_after(state, "Observation: You arrive at shelf 1. On the shelf 1, you see nothing.")
    assert stats["contradicted"] == 1 and stats["retries"] == 1 and stats["failures"] == 0
    p, stats = predict([wrong, wrong])
    assert p.failed and p.next_state == FAILURE_STATE and "go to desk 1" in p.error and stats["contradicted"] == 2
    p, stats = predict([wrong, right], check=False)
    assert not p.failed and "Location: desk 1" in p.next_state and stats["contradicted"] == 0


def test_outcomes_the_state_fixes_are_derived_without_a_model_call():
    """`derive_determined_outcomes`: a take within reach and a revisit of a known receptacle are answered by
    ALFWorld's own bookkeeping; a first look (hidden) still goes to the model; off, everything does."""
    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")
    at_desk = "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", "Location: desk 1",
                         "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none",
                         "Known contents: desk 1: book 1, pen 2", "Receptacles: desk 1, drawer 1, shelf 1"])
    away = at_desk.replace("Location: desk 1", "Location: shelf 1").replace("desk 1: book 1",
                                                                          "shelf 1: nothing; desk 1: book 1")
    guess = format_completion("Observation: You arrive at drawer 1. The drawer 1 is closed.", 0.0, False, "x")
    queries = [query_for(task, at_desk, "take book 1 from desk 1"), query_for(task, away, "go to desk 1"),
               query_for(task, away, "go to drawer 1")]

    def predict(on: bool):
        cfg = ExperienceModelConfig(use_retrieval=False, write_observation=True, derive_determined_outcomes=on)
        llm = FakeLLM([guess])
        model = ExperienceModel(llm, config=cfg, env="alfworld")
        return model.predict(queries), model.stats, llm.calls

    (take, back, first), stats, calls = predict(True)
    assert "Inventory: book 1" in take.next_state and "Known contents: desk 1: pen 2" in take.next_state
    assert "Observation: You arrive at desk 1. On the desk 1, you see a book 1, and a pen 2." in back.next_state
    assert "drawer 1 is closed" in first.next_state and len(calls) == 1 and stats["determined"] == 2
    assert stats["hidden_copied"] == 0 and stats["predictions"] == 3
    _, stats, calls = predict(False)
    assert len(calls) == 3 and stats["determined"] == 0
