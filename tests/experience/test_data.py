from dreamgym.envs.dial import abstract_state
from dreamgym.experience.data import balance_outcomes, buffer_spec, em_transitions
from dreamgym.experience.format import RESET_ACTION
from dreamgym.types import Transition
from em_helpers import DIAL_TASK, dial_trajectories


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


def test_balance_outcomes_repeats_the_rarer_final_transitions_only():
    def tr(i, done, reward):
        return Transition(task=DIAL_TASK, history=[], state=abstract_state(i % 10),
                          action="submit" if done else "turn up", next_state=abstract_state(i % 10), reward=reward,
                          done=done, trajectory_id=str(i))

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
