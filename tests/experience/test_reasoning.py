from dreamgym.envs.dial import abstract_state
from dreamgym.llm.fake import FakeLLM
from dreamgym.experience.reasoning import EnvTeacher, LLMTeacher, annotate, annotate_trajectories, llm_teacher_request
from dreamgym.types import Task, Transition
from em_helpers import dial_trajectories

TASK = Task(id="dial-3-5", env="dial", instruction="set the dial to 5 and press submit", goal={"target": 5, "start": 3})


def _tr(v: int, action: str, v2: int, reward: float = 0.0, done: bool = False, **kw) -> Transition:
    return Transition(task=kw.pop("task", TASK), history=[], state=abstract_state(v), action=action,
                      next_state=abstract_state(v2), reward=reward, done=done, **kw)


def test_env_teacher_explains_from_the_environment():
    t = EnvTeacher()
    up, sub = t.explain([_tr(3, "turn up", 4), _tr(5, "submit", 5, 1.0, True)])
    assert "from 3 to 4" in up and "target is 5" in up
    assert "with reward 1" in sub and "target is 5, equal" in sub
    assert t.stats == {"explained": 2}


def test_env_teacher_isolates_a_transition_it_cannot_explain():
    bad = _tr(3, "turn up", 4, task=Task(id="x", env="no-such-family", instruction="?"))
    t = EnvTeacher()
    out = t.explain([bad, _tr(3, "turn down", 2)])
    assert out[0] == "" and "from 3 to 2" in out[1]
    assert t.stats["failed"] == 1 and t.stats["explained"] == 1


def test_annotate_fills_missing_traces_and_keeps_existing_ones():
    trs = [_tr(3, "turn up", 4), _tr(4, "turn up", 5, reasoning="kept")]
    out = annotate(trs, EnvTeacher())
    assert out[0].reasoning and "from 3 to 4" in out[0].reasoning and out[1].reasoning == "kept"
    assert trs[0].reasoning is None  # copies, the input is untouched
    assert "from 4 to 5" in annotate(trs, EnvTeacher(), overwrite=True)[1].reasoning


def test_annotate_trajectories_stores_traces_on_steps():
    trajs = annotate_trajectories(dial_trajectories(3), EnvTeacher())
    assert all(s.reasoning for t in trajs for s in t.steps)


def test_llm_teacher_prompt_batching_cleaning_and_failures():
    tr = _tr(3, "turn up", 4)
    req = llm_teacher_request(tr)
    assert req[0]["role"] == "system" and "[dial] 3" in req[1]["content"] and "[dial] 4" in req[1]["content"]
    assert "Action: turn up" in req[1]["content"] and "Reward: 0" in req[1]["content"]
    llm = FakeLLM(lambda r: "<think> The dial\n moves   up by one. </think>" if "[dial] 3" in r[1]["content"] else "")
    t = LLMTeacher(llm, batch_size=2)
    out = t.explain([tr, _tr(7, "turn up", 8), tr])
    assert out == ["The dial moves up by one.", "", "The dial moves up by one."]
    assert len(llm.calls) == 3 and t.stats == {"explained": 2, "failed": 1}

    class Dead:
        def generate(self, requests, params):
            raise ConnectionError("endpoint down")

    dead = LLMTeacher(Dead())
    assert dead.explain([tr]) == [""] and dead.stats["failed"] == 1
