"""The real-step budget: a hard cap that many environment threads take from at once, what one more iteration can
afford, the steps other processes charge to it, and its checkpoint state."""

import threading

from dreamgym.rl.budget import RealStepBudget


def test_budget_is_thread_safe():
    budget = RealStepBudget(1000)
    threads = [threading.Thread(target=lambda: [budget.take() for _ in range(300)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.used == 1000 and not budget.take()


def test_an_iteration_affords_the_tasks_whose_episodes_can_all_run_to_the_turn_cap():
    budget = RealStepBudget(100)
    assert budget.affordable(8, 4, 12) == 2  # each task: 4 episodes x 12 turns = 48 steps
    assert budget.take(60) and budget.affordable(8, 4, 12) == 0 and budget.remaining == 40  # not one fits
    assert budget.affordable(8, 1, 12) == 3
    assert RealStepBudget(None).affordable(8, 4, 12) == 8  # no limit: every task


def test_steps_charged_from_other_processes_count_and_the_state_round_trips():
    budget = RealStepBudget(50)
    assert budget.take(10)
    budget.charge(30)  # taken by other processes, each within its share
    assert budget.used == 40 and budget.remaining == 10 and not budget.exhausted
    again = RealStepBudget(50)
    again.load_state_dict(budget.state_dict())
    assert (again.limit, again.used) == (50, 40) and not again.take(11) and again.take(10) and again.exhausted


def test_a_resumed_run_keeps_its_own_limit_and_the_steps_used():
    """S2R continues a dream's run folder, whose checkpoint saved no limit: the S2R run's budget holds (a MiniWoB++
    S2R at B/16 = 80 steps took 192 before, the dream's unlimited budget restored over its own)."""
    dream = RealStepBudget(None)
    s2r = RealStepBudget(80)
    s2r.load_state_dict(dream.state_dict())
    assert (s2r.limit, s2r.used) == (80, 0) and s2r.take(80) and not s2r.take(1)
    raised = RealStepBudget(200)
    raised.load_state_dict(s2r.state_dict())
    assert (raised.limit, raised.remaining) == (200, 120)
