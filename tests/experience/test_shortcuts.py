import dataclasses

from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.format import FAILURE_STATE, Prediction, format_completion, query_for
from dreamgym.experience.model import ExperienceModel
from dreamgym.experience.shortcuts import FamilyShortcuts
from dreamgym.llm.fake import FakeLLM
from dreamgym.types import Task
from em_helpers import dial_query

ALF_TASK = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")


def test_an_answer_that_contradicts_the_action_is_regenerated_like_a_malformed_one():
    """ALFWorld's `outcome_contradiction`: "go to shelf 1" answered "You arrive at desk 1." is rejected and
    re-generated; a second contradiction ends in the failure state; with the check off, it is kept."""
    from dreamgym.envs.alfworld.state import state_after

    state = "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", "Location: middle of the room",
                       "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none", "Known contents: none",
                       "Receptacles: desk 1, drawer 1, shelf 1"])
    wrong = format_completion("Observation: You arrive at desk 1. On the desk 1, you see a pen 2.", 0.0, False, "x")
    right = format_completion("Observation: You arrive at shelf 1. On the shelf 1, you see nothing.", 0.0, False, "x")
    query = query_for(ALF_TASK, state, "go to shelf 1")

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
    at_desk = "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", "Location: desk 1",
                         "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none",
                         "Known contents: desk 1: book 1, pen 2", "Receptacles: desk 1, drawer 1, shelf 1"])
    away = at_desk.replace("Location: desk 1", "Location: shelf 1").replace("desk 1: book 1",
                                                                          "shelf 1: nothing; desk 1: book 1")
    guess = format_completion("Observation: You arrive at drawer 1. The drawer 1 is closed.", 0.0, False, "x")
    queries = [query_for(ALF_TASK, at_desk, "take book 1 from desk 1"), query_for(ALF_TASK, away, "go to desk 1"),
               query_for(ALF_TASK, away, "go to drawer 1")]

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


def test_the_shortcuts_follow_the_models_current_config():
    """`dreamgym eval-em` swaps `model.config` for its inference ablations: the default shortcuts read the config
    at each call, and count into the model's own stats."""
    state = "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", "Location: desk 1",
                       "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none",
                       "Known contents: desk 1: book 1", "Receptacles: desk 1, shelf 1"])
    guess = format_completion("Observation: Nothing happens.", 0.0, False, "x")
    llm = FakeLLM(lambda req: guess)
    cfg = ExperienceModelConfig(use_retrieval=False, write_observation=True)
    model = ExperienceModel(llm, config=cfg, env="alfworld")
    assert isinstance(model.shortcuts, FamilyShortcuts) and model.shortcuts.stats is model.stats
    take = query_for(ALF_TASK, state, "take book 1 from desk 1")
    model.predict([take])
    model.config = dataclasses.replace(cfg, derive_determined_outcomes=True)
    (p,) = model.predict([take])
    assert len(llm.calls) == 1 and p.attempts == 0 and "Inventory: book 1" in p.next_state
    assert model.stats["determined"] == 1 and model.stats["predictions"] == 2


def test_an_injected_resolver_answers_before_the_model_and_vetoes_its_answers():
    """The seam: `resolve` answers some queries without a call; `contradiction` rejects a generated answer,
    which is then re-generated like a malformed one."""

    class Resolver:
        def __init__(self):
            self.seen = []

        def resolve(self, queries, config, buffer):
            return {i: Prediction("[dial] 9", 0.0, False, attempts=0) for i, q in enumerate(queries)
                    if q.action == "submit"}

        def contradiction(self, query, next_state, config):
            self.seen.append(next_state)
            return "too low" if next_state == "[dial] 1" else ""

    answers = iter([format_completion("[dial] 1", 0.0, False, "x"), format_completion("[dial] 4", 0.0, False, "x")])
    llm = FakeLLM(lambda req: next(answers))
    resolver = Resolver()
    model = ExperienceModel(llm, config=ExperienceModelConfig(retries=1), shortcuts=resolver)
    up, submit = model.predict([dial_query(3, "turn up"), dial_query(3, "submit")])
    assert submit.next_state == "[dial] 9" and submit.attempts == 0
    assert up.next_state == "[dial] 4" and up.attempts == 2 and resolver.seen == ["[dial] 1", "[dial] 4"]
    assert len(llm.calls) == 2 and model.stats["contradicted"] == 1 and model.stats["predictions"] == 2
