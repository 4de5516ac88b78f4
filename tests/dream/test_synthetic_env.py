import dataclasses

import pytest

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.env import check_env
from dreamgym.envs import dial, family, register_family
from dreamgym.experience import FAILURE_STATE, ExperienceModel, ExperienceModelConfig, em_transitions
from dreamgym.experience.format import format_completion
from dreamgym.llm.fake import FakeLLM
from dreamgym.dream.synthetic_env import SyntheticEnv, is_admissible
from dreamgym.types import Task, Transition
from em_helpers import dial_sim, dial_trajectories, trained_dial_model


def _model(fn=dial_sim, buffer=None, **cfg) -> ExperienceModel:
    return ExperienceModel(FakeLLM(fn), buffer=buffer, config=ExperienceModelConfig(**cfg), env="dial")


def _buffer() -> ReplayBuffer:
    buf = ReplayBuffer(None, HashingEmbedder())
    buf.add(em_transitions(dial_trajectories(6), history=2), seed_data=True)
    return buf


def test_synthetic_env_passes_check_env_and_grows_the_buffer():
    buf = _buffer()
    n0 = len(buf)
    env = SyntheticEnv(_model(buffer=buf, k=2))
    assert env.is_synthetic and env.batched_step and env.env_family == "dial"
    check_env(env)
    synthetic = [t for t in buf.transitions() if t.source == "synthetic"]
    assert len(buf) > n0 and synthetic and all(t.trajectory_id.startswith("syn-dial-") for t in synthetic)
    assert all(t.next_state and t.reasoning for t in synthetic)


def test_reset_uses_the_real_initial_state_and_steps_follow_the_model():
    task = Task(id="dial-2-4", env="dial", instruction="set the dial to 4 and press submit", goal={"target": 4, "start": 2})
    env = SyntheticEnv(_model())
    obs, info = env.reset(options={"task": task})
    assert dial.parse_state(obs) == 2 and info["task"] is task and info["abstract_state"] == obs
    assert info["admissible_actions"] == ["turn up", "turn down", "submit"] and env.stats["real_initial_states"] == 1
    for _ in range(2):
        obs, r, term, trunc, info = env.step("turn up")
    assert dial.parse_state(obs) == 4 and not term and info["reasoning"]
    obs, r, term, trunc, info = env.step("submit")
    assert r == 1.0 and term and not trunc and info["won"] is True


def test_initial_state_comes_from_the_model_when_the_real_env_cannot_reset():
    # A curriculum-style variant without a structured goal: the real dial cannot start it, the model can.
    variant = Task(id="v1", env="dial", instruction="set the dial to 8 and press submit", goal={"note": "x"})
    model = _model()
    env = SyntheticEnv(model, tasks=[variant])
    obs, info = env.reset(seed=0)
    assert dial.parse_state(obs) == 3 and env.stats["model_initial_states"] == 1
    assert "Action: [reset]" in model.llm.calls[-1][-1]["content"]
    only_real = SyntheticEnv(model, tasks=[variant], initial_state="real")
    obs, info = only_real.reset(seed=0)
    assert info["em_failure"] and info["admissible_actions"] is None
    obs, r, term, trunc, info = only_real.step("turn up")
    assert trunc and r == 0.0 and info["em_failure"]


def test_step_batch_makes_one_model_call_for_all_live_envs_and_matches_single_steps():
    model = _model()
    envs = [SyntheticEnv(model) for _ in range(4)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    calls = model.stats["generate_calls"]
    actions = ["turn up", "turn down", "submit", "turn up"]
    batched = SyntheticEnv.step_batch(envs, actions)
    assert model.stats["generate_calls"] == calls + 1
    singles = []
    for i, (e, a) in enumerate(zip([SyntheticEnv(_model()) for _ in range(4)], actions)):
        e.reset(seed=i)
        singles.append(e.step(a))
    assert [b[:4] for b in batched] == [s[:4] for s in singles]
    # The ended episode answers after-end without a model call; the others keep going in one call.
    calls = model.stats["generate_calls"]
    again = SyntheticEnv.step_batch(envs, ["turn up"] * 4)
    assert again[2][4]["episode_over"] and model.stats["generate_calls"] == calls + 1


def test_invalid_action_is_a_noop_without_a_model_call_unless_asked():
    model = _model()
    env = SyntheticEnv(model)
    obs, _ = env.reset(seed=1)
    calls = model.stats["generate_calls"]
    o, r, term, trunc, info = env.step("dance")
    assert info["invalid_action"] and info["abstract_state"] == obs and "Nothing happens" in o
    assert r == 0.0 and not term and model.stats["generate_calls"] == calls and env.stats["invalid_actions"] == 1
    env2 = SyntheticEnv(model, invalid_action="model")
    env2.reset(seed=1)
    env2.step("dance")
    assert model.stats["generate_calls"] == calls + 1


def test_malformed_model_output_ends_the_episode_as_failure_state():
    model = _model(fn=lambda req: "the dial, probably?", retries=1)
    env = SyntheticEnv(model)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("turn up")
    assert trunc and not term and r == 0.0 and info["em_failure"] and info["won"] is False
    assert model.stats["failures"] == 1 and model.stats["malformed"] == 2 and env.stats["em_failures"] == 1
    assert FAILURE_STATE.startswith("[failure]")


def test_step_limit_truncates():
    env = SyntheticEnv(_model(), max_steps=3)
    env.reset(seed=0)
    outs = [env.step("turn down") for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True] and not any(o[2] for o in outs)


def test_the_step_limit_is_the_familys_unless_the_caller_sets_one():
    """A dream episode has the horizon of the family's real one (`EnvFamily.MAX_STEPS`), whatever attributes its
    real environment carries."""
    fam = dataclasses.replace(family("dial"), name="dial_short", MAX_STEPS=2,
                              make_env=lambda split="train", **kw: dial.DialEnv(split, max_steps=40))
    register_family("dial_short", fam)
    tasks = [dataclasses.replace(t, env="dial_short") for t in dial.make_tasks("train")]
    env = SyntheticEnv(_model(), tasks=tasks, env="dial_short")
    assert env.max_steps == 2 and SyntheticEnv(_model()).max_steps == dial.MAX_STEPS == 12
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step("xyzzy")
    assert not (term or trunc)
    _, _, term, trunc, _ = env.step("xyzzy")
    assert trunc and not term
    assert SyntheticEnv(_model(), tasks=tasks, env="dial_short", max_steps=5).max_steps == 5


def test_is_admissible_templates():
    assert is_admissible(" Turn  UP ", ["turn up"]) and not is_admissible("turn", ["turn up"])
    assert is_admissible("search[red shoes]", ["search[<query>]", "click[Next]"])
    assert not is_admissible("search[]", ["search[...]"]) and is_admissible("anything", [])


def test_synthetic_env_on_the_trained_tiny_model_is_deterministic():
    model = ExperienceModel.load(trained_dial_model(), buffer=_buffer(), device="cpu")
    env = SyntheticEnv(model)
    check_env(env, n_steps=3)
    assert model.stats["predictions"] > 0


def test_group_members_share_sampling_noise_for_the_same_action():
    model = _model()
    a, b, other = (SyntheticEnv(model) for _ in range(3))
    for e, seed in ((a, 5), (b, 5), (other, 6)):  # a and b: one GRPO group (same task, same reset seed)
        e.reset(seed=seed)
    SyntheticEnv.step_batch([a], ["turn up"])  # a is one step ahead of b: step counts and histories differ
    SyntheticEnv.step_batch([other, b, a], ["turn down", "turn down", "turn down"])
    seeds = model.llm.seeds[-1]
    assert seeds[1] == seeds[2] != seeds[0]  # same episode id and action -> same seed, wherever in the batch
    assert model.llm.seeds[-2][0] != seeds[2]  # another action of the same episode -> other noise
    indep = _model()
    c, d = SyntheticEnv(indep, shared_noise=False), SyntheticEnv(indep, shared_noise=False)
    for e in (c, d):
        e.reset(seed=5)
    SyntheticEnv.step_batch([c, d], ["turn down", "turn down"])
    assert indep.llm.seeds[-1] is None  # one seed for the call: its rows draw independent noise


def test_shared_noise_gives_group_members_the_same_sampled_world_on_the_tiny_model():
    model = ExperienceModel.load(trained_dial_model(), buffer=_buffer(), device="cpu",
                                 config_overrides=["temperature=1.5"])
    envs = [SyntheticEnv(model) for _ in range(8)]
    for i, e in enumerate(envs):
        e.reset(seed=3 if i < 4 else 4)
    out = SyntheticEnv.step_batch(envs, ["turn up"] * 8)
    # Members of a group see one world. Without shared noise the same prompts do come out differently at this
    # temperature, so the equalities are the seeding's doing, not a model too confident to vary.
    texts = [info["reasoning"] + obs for obs, *_, info in out]
    assert len(set(texts[:4])) == 1 and len(set(texts[4:])) == 1
    unshared = [SyntheticEnv(model, shared_noise=False) for _ in range(8)]
    for e in unshared:
        e.reset(seed=3)
    texts = [info["reasoning"] + obs for obs, *_, info in SyntheticEnv.step_batch(unshared, ["turn up"] * 8)]
    assert len(set(texts)) > 1


def _alf_state(known: str, location: str = "middle of the room", unexplored: str | None = None) -> str:
    lines = ["Task: put some book in shelf.", "Observation: You arrive.", f"Location: {location}",
             "Inventory: nothing", "Opened: none", "Lamps on: none", "Altered: none", f"Known contents: {known}"]
    lines.append("Receptacles: desk 1, drawer 1, shelf 1")
    return "\n".join(lines + ([f"Unexplored: {unexplored}"] if unexplored is not None else []))


def test_alfworld_model_states_get_the_derived_unexplored_line():
    """An experience model trained before ALFWorld states had the "Unexplored" line (or one that miscopies it)
    still gives the policy a line that holds what the real environment's would: the synthetic env recomputes its
    set and keeps the search order the model wrote."""
    from dreamgym.envs.alfworld.state import canonical_state

    def old_format(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1]
        if action == "go to desk 1":  # an old-format answer: no Unexplored line
            return format_completion(_alf_state("desk 1: book 1", "desk 1"), 0.0, False, "You arrive.")
        return format_completion(_alf_state("none", unexplored="shelf 1"), 0.0, False, "Start.")  # miscopied

    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")
    buf = ReplayBuffer(None, HashingEmbedder())
    model = ExperienceModel(FakeLLM(old_format), buffer=buf,
                            config=ExperienceModelConfig(use_retrieval=False, compact_states=False), env="alfworld")
    env = SyntheticEnv(model, tasks=[task], initial_state="model")
    obs, info = env.reset(seed=0)
    assert "Unexplored: shelf 1, desk 1, drawer 1" in obs  # its order first, the names it left out after
    obs, r, term, trunc, info = env.step("go to desk 1")
    assert "Unexplored: drawer 1, shelf 1" in obs and "Known contents: desk 1: book 1" in obs
    assert "take book 1 from desk 1" in info["admissible_actions"]
    assert [t.next_state for t in buf.transitions()] == [obs]  # the buffer holds what the policy was shown
    # Real states are fixed points; a text missing a line is left alone rather than emptied.
    assert canonical_state(obs) == obs
    assert canonical_state("The room is dark.") == "The room is dark."


def test_alfworld_compact_states_are_completed_from_the_previous_state():
    """With `compact_states` the model writes neither the receptacle list nor the unexplored line: its training
    target leaves them out, and the synthetic env shows the policy whole states, the lines carried from the state
    the action was taken in (the search order of the episode kept). A checkpoint saved before the field existed
    loads with it off."""
    from dreamgym.experience.format import written_state

    start = _alf_state("none", unexplored="shelf 1, desk 1, drawer 1")
    seen = []

    def compact(req):
        seen.append(req[-1]["content"])
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1]
        if action == "go to desk 1":
            body = _alf_state("desk 1: book 1", "desk 1").replace("\nReceptacles: desk 1, drawer 1, shelf 1", "")
            return format_completion(body, 0.0, False, "You arrive.")
        return format_completion(start, 0.0, False, "Start.")  # [reset]: the whole state

    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")
    buf = ReplayBuffer(None, HashingEmbedder())
    model = ExperienceModel(FakeLLM(compact), buffer=buf, config=ExperienceModelConfig(use_retrieval=False),
                            env="alfworld")
    env = SyntheticEnv(model, tasks=[task], initial_state="model")
    obs, _ = env.reset(seed=0)
    assert obs == start
    obs, r, term, trunc, info = env.step("go to desk 1")
    assert obs == _alf_state("desk 1: book 1", "desk 1", unexplored="shelf 1, drawer 1")  # order carried
    assert "take book 1 from desk 1" in info["admissible_actions"]
    # Training targets: the compact part after a step, the whole state after [reset].
    tr = buf.transitions()[-1]
    assert tr.next_state == obs
    assert written_state(tr, model.config) == obs.rsplit("\nReceptacles:", 1)[0]
    assert written_state(tr, ExperienceModelConfig(compact_states=False)) == obs
    assert written_state(dataclasses.replace(tr, state=""), model.config) == obs  # a [reset] answer is whole


def test_alfworld_observation_writing_derives_the_state_with_the_real_bookkeeping():
    """With `write_observation` the model writes only the engine's feedback; the synthetic env folds it into the
    previous state the way the real environment does: the task line, inventory and known contents follow from
    the feedback, whatever else the model wrote, and the grounded reward ends the episode when the goal holds."""
    from dreamgym.experience.format import written_state

    start = _alf_state("none", unexplored="shelf 1, desk 1, drawer 1")
    feedback = {"go to desk 1": "You arrive at desk 1. On the desk 1, you see a book 1.",
                "take book 1 from desk 1": "You pick up the book 1 from the desk 1.",
                "go to shelf 1": "You arrive at shelf 1. On the shelf 1, you see nothing.",
                "move book 1 to shelf 1": "You move the book 1 to the shelf 1."}

    def observe(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1]
        if action in feedback:  # a wrong task line and inventory beside the observation are ignored
            return format_completion(f"Task: eat a cake.\nObservation: {feedback[action]}\nInventory: sofa 1",
                                     0.0, False, "ok")
        return format_completion(start, 0.0, False, "Start.")  # [reset]: the whole state

    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")
    buf = ReplayBuffer(None, HashingEmbedder())
    cfg = ExperienceModelConfig(use_retrieval=False, write_observation=True)
    env = SyntheticEnv(ExperienceModel(FakeLLM(observe), buffer=buf, config=cfg, env="alfworld"), tasks=[task],
                       initial_state="model", reward_from="state")
    env.reset(seed=0)
    obs, _, _, _, _ = env.step("go to desk 1")
    assert obs == _alf_state("desk 1: book 1", "desk 1", unexplored="shelf 1, drawer 1").replace(
        "Observation: You arrive.", "Observation: " + feedback["go to desk 1"])
    obs, _, _, _, info = env.step("take book 1 from desk 1")
    assert "Inventory: book 1" in obs and "Known contents: desk 1: nothing" in obs
    assert obs.startswith("Task: put some book")
    env.step("go to shelf 1")
    obs, r, term, _, info = env.step("move book 1 to shelf 1")
    assert "Known contents: desk 1: nothing; shelf 1: book 1" in obs
    assert (r, term, info["won"]) == (1.0, True, True)  # grounded in the derived state, not the model's reward
    # Training targets: the observation line after a step, the whole state after [reset].
    tr = buf.transitions()[-1]
    assert written_state(tr, cfg) == "Observation: " + feedback["move book 1 to shelf 1"]
    assert written_state(dataclasses.replace(tr, state=""), cfg) == tr.next_state


def test_checkpoints_without_compact_states_load_with_it_off(tmp_path):
    """Checkpoints saved before `compact_states` existed were trained on whole states, so they load with it off;
    new ones keep what they were trained with."""
    import json
    import shutil

    from em_helpers import trained_dial_model

    for saved, expected in ((None, False), (True, True), (False, False)):
        ckpt = tmp_path / f"em-{saved}"
        shutil.copytree(trained_dial_model(), ckpt)
        meta = json.loads((ckpt / "em_config.json").read_text())
        meta["model"].pop("compact_states", None)
        if saved is not None:
            meta["model"]["compact_states"] = saved
        (ckpt / "em_config.json").write_text(json.dumps(meta))
        assert ExperienceModel.load(ckpt, device="cpu").config.compact_states is expected


def _alf(known: str, location: str, inventory: str = "nothing") -> str:
    return "\n".join(["Task: put some book in shelf.", "Observation: You arrive.", f"Location: {location}",
                      f"Inventory: {inventory}", "Opened: none", "Lamps on: none", "Altered: none",
                      f"Known contents: {known}", "Receptacles: desk 1, drawer 1, shelf 1"])


def test_alfworld_success_is_grounded_in_the_written_state():
    """With `reward_from="state"` the family's goal check on the model's state decides reward and end: a win the
    model credits while its state has the book on the desk is overruled (the episode goes on, `model_won` keeps
    the claim), and placing the book on the shelf wins although the model wrote reward 0. `reward_from="model"`
    keeps the model's verdict, and a family without a goal check cannot be asked for the state's."""
    from dreamgym.episode import Episode, Turn, rollout_metrics

    answers = {
        "go to desk 1": (_alf("desk 1: book 1", "desk 1"), 1.0, True),  # an invented win
        "take book 1 from desk 1": (_alf("desk 1: nothing", "desk 1", "book 1"), 0.0, False),
        "go to shelf 1": (_alf("desk 1: nothing; shelf 1: nothing", "shelf 1", "book 1"), 0.0, False),
        "move book 1 to shelf 1": (_alf("desk 1: nothing; shelf 1: book 1", "shelf 1"), 0.0, False),
    }

    def sim(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1]
        state, reward, done = answers.get(action, (_alf("none", "middle of the room"), 0.0, False))
        return format_completion(state, reward, done, "Because.")

    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={}, split="train")

    def env(reward_from):
        model = ExperienceModel(FakeLLM(sim), buffer=ReplayBuffer(None, HashingEmbedder()),
                                config=ExperienceModelConfig(use_retrieval=False, compact_states=False), env="alfworld")
        e = SyntheticEnv(model, tasks=[task], initial_state="model", reward_from=reward_from)
        e.reset(seed=0)
        return e

    grounded = env("state")
    _, r, term, trunc, info = grounded.step("go to desk 1")
    assert (r, term, trunc, info["won"], info["model_won"]) == (0.0, False, False, False, True)
    assert grounded.buffer.transitions()[-1].reward == 0.0 and not grounded.buffer.transitions()[-1].done
    for a in ("take book 1 from desk 1", "go to shelf 1"):
        _, r, term, _, info = grounded.step(a)
        assert (r, term, info["model_won"]) == (0.0, False, False)
    _, r, term, _, info = grounded.step("move book 1 to shelf 1")
    assert (r, term, info["won"], info["model_won"]) == (1.0, True, True, False)
    assert grounded.stats["wins_overruled"] == 1 and grounded.stats["wins_granted"] == 1
    assert env("auto").grounded

    trusting = env("model")
    _, r, term, _, info = trusting.step("go to desk 1")
    assert (r, term, info["won"]) == (1.0, True, True) and "model_won" not in info

    turn = Turn(state="", prompt_ids=[], completion_ids=[], logprobs=[], text="go to desk 1", action="go to desk 1")
    ep = Episode(task=task, seed=0, group=0, member=0, turns=[turn], end_reason="truncated", model_claimed_wins=1)
    assert rollout_metrics([ep])["overruled_win_rate"] == 1.0
    with pytest.raises(ValueError, match="grounded_outcome"):
        SyntheticEnv(_model(), reward_from="state")
    assert not SyntheticEnv(_model(), reward_from="auto").grounded


def test_a_curriculum_variant_starts_in_its_parents_real_game():
    """A variant (split "generated", goal merged over its parent's) gets its initial state from the real ALFWorld
    environment of the synthetic env's split: the parent's room, its own Task line, no model call."""
    from dreamgym.envs import alfworld
    from dreamgym.envs.alfworld.goals import parse_goal

    parent = alfworld.tasks("train")[0]
    text = f"find two {parent.goal['object']} and put them in {parent.goal['receptacle']}"
    variant = Task(id=f"{parent.id}~g1.0", env="alfworld", instruction=text,
                   goal={**parent.goal, **parse_goal(text)}, split="generated", parent_id=parent.id, iteration=1)
    llm = FakeLLM(["never asked"])
    model = ExperienceModel(llm, config=ExperienceModelConfig(use_retrieval=False, write_observation=True),
                            env="alfworld")
    env = SyntheticEnv(model, tasks=[parent, variant], split="train")
    parent_state, _ = env.reset(options={"task": parent})
    state, _ = env.reset(options={"task": variant})
    assert state.splitlines()[0] == f"Task: {text}." and state.splitlines()[1:3] == parent_state.splitlines()[1:3]
    assert env.stats["real_initial_states"] == 2 and env.stats["model_initial_states"] == 0 and llm.calls == []


def test_hidden_outcomes_are_copied_from_real_transitions_of_the_same_game():
    """With `copy_hidden_outcomes`, a step whose outcome only the game's hidden layout decides (the first look
    into a receptacle) gets the observation a real transition of the same game recorded, without a model call;
    every other step (a known receptacle, a take, another game) is still the model's. Off, the model answers. A
    curriculum variant of the task (another goal, its parent's game) is answered from the parent's steps."""
    from dreamgym.envs.alfworld.goals import parse_goal
    from dreamgym.envs.alfworld.state import state_after

    game = {"generator": "v1", "seed": 0, "split": "train"}
    task = Task(id="alf-x", env="alfworld", instruction="put some book in shelf", goal={**game, "game_id": "g-x"},
                split="train")
    other = Task(id="alf-y", env="alfworld", instruction="put some book in shelf", goal={**game, "game_id": "g-y"},
                 split="train")
    # As `Curriculum.propose` builds one: the parsed variant goal merged over the parent's.
    variant = Task(id="alf-x~g1.0", env="alfworld", instruction="put some pen in shelf",
                   goal={**task.goal, **parse_goal("put some pen in shelf")}, split="generated", parent_id="alf-x",
                   iteration=1)
    start = _alf_state("none", unexplored="shelf 1, desk 1, drawer 1")
    real_obs = "You arrive at desk 1. On the desk 1, you see a book 1, a pen 2."
    # The real step came from another episode that had already seen the shelf: the outcome does not depend on it.
    seen = _alf_state("shelf 1: nothing", "shelf 1", unexplored="desk 1, drawer 1")
    real = Transition(task=task, history=[], state=seen, action="go to desk 1",
                      next_state=state_after(seen, "Observation: " + real_obs), reward=0.0, done=False,
                      source="real", trajectory_id="real-0")

    def dreamt(req):
        action = req[-1]["content"].rsplit("\nAction: ", 1)[1]
        if action == "[reset]":
            return format_completion(start, 0.0, False, "Start.")
        if action.startswith("go to"):
            return format_completion(f"Observation: You arrive at {action[6:]}. On the {action[6:]}, you see a cake 9.",
                                     0.0, False, "guess")
        return format_completion("Observation: You pick up the book 1 from the desk 1.", 0.0, False, "take")

    def dream(copy: bool, t: Task = task):
        llm = FakeLLM(dreamt)
        buf = ReplayBuffer(None, HashingEmbedder())
        buf.add([real])
        cfg = ExperienceModelConfig(use_retrieval=False, write_observation=True, copy_hidden_outcomes=copy)
        model = ExperienceModel(llm, buffer=buf, config=cfg, env="alfworld")
        env = SyntheticEnv(model, tasks=[t], initial_state="model", reward_from="state")
        env.reset(seed=0)
        llm.calls.clear()  # count the steps' model calls only
        return env, llm, model

    env, llm, model = dream(copy=True)
    obs, _, _, _, _ = env.step("go to desk 1")
    assert f"Observation: {real_obs}" in obs and "Known contents: desk 1: book 1, pen 2" in obs
    assert llm.calls == [] and model.stats["hidden_copied"] == 1
    obs, _, _, _, _ = env.step("take book 1 from desk 1")  # follows from the state: the model's step
    assert len(llm.calls) == 1 and "Inventory: book 1" in obs
    env.step("go to shelf 1")  # no real transition holds it: the model's guess
    assert len(llm.calls) == 2 and model.stats["hidden_copied"] == 1
    obs, _, _, _, _ = env.step("go to desk 1")  # desk 1 is known now: not hidden any more, so the model's
    assert len(llm.calls) == 3 and "cake 9" in obs

    env, llm, _ = dream(copy=False)
    obs, _, _, _, _ = env.step("go to desk 1")
    assert "cake 9" in obs and len(llm.calls) == 1
    env, llm, _ = dream(copy=True, t=other)  # the same command in another game: its layout is not known
    obs, _, _, _, _ = env.step("go to desk 1")
    assert "cake 9" in obs and len(llm.calls) == 1
    env, llm, model = dream(copy=True, t=variant)
    obs, _, _, _, _ = env.step("go to desk 1")
    assert f"Observation: {real_obs}" in obs and llm.calls == [] and model.stats["hidden_copied"] == 1


def test_dream_batches_step_alike_with_and_without_sharing_on_the_tiny_model():
    """A dream batch as GRPO makes it (groups of one task and reset seed): the experience model's backend shares
    repeated queries and common prefixes, and every greedy step comes out as it does without sharing."""
    model = ExperienceModel.load(trained_dial_model(), buffer=_buffer(), device="cpu")
    assert model.llm.share_prompts

    def dream(share: bool) -> tuple[list, dict]:
        model.llm.share_prompts = share
        model.llm.stats = dict.fromkeys(model.llm.stats, 0)
        envs = [SyntheticEnv(model, add_to_buffer=False) for _ in range(8)]
        for i, e in enumerate(envs):
            e.reset(seed=i // 4)
        steps = []
        for actions in (["turn up", "turn up", "turn down", "submit"] * 2, ["turn up"] * 8):
            live = [e for e in envs if not e._done]
            steps += SyntheticEnv.step_batch(live, actions[:len(live)])
        return [(obs, r, term, trunc, info["reasoning"]) for obs, r, term, trunc, info in steps], model.llm.stats

    plain, plain_stats = dream(False)
    shared, stats = dream(True)
    assert shared == plain
    assert stats["rows"] == plain_stats["rows"] and stats["rows_decoded"] < plain_stats["rows_decoded"]
    assert stats["prefilled_tokens"] < plain_stats["prefilled_tokens"]
