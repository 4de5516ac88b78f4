import json
from pathlib import Path

import pytest

from dreamgym.data import write_jsonl
from dreamgym.envs import family
from dreamgym.envs.dial import abstract_state, parse_state
from dreamgym.experience import ExperienceModel, ExperienceModelConfig, em_transitions
from dreamgym.experience.format import format_completion
from dreamgym.experience.format import RESET_ACTION
from dreamgym.experience.train import HeldOutConfig
from dreamgym.experience.consistency import check_alfworld, check_dial, check_generic, check_webshop, checkers_for
from dreamgym.experience.fidelity import (action_kind, evaluate, exact_match, format_table, free_running, heldout_report, main, teacher_forced,
                               reward1_by_task, token_f1, worst_reward1_tasks)
from dreamgym.llm.fake import FakeLLM
from em_helpers import dial_sim, dial_trajectories, trained_dial_model
from servers import DropField


def test_token_f1_and_exact_match():
    assert token_f1("a b c", "a b c") == 1.0 and token_f1("a b", "c d") == 0.0
    assert token_f1("a b c d", "a b") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert token_f1("", "") == 1.0 and exact_match(" a\nb ", "a b") and not exact_match("a", "a b")


def test_dial_check_flags_changes_without_a_turn():
    assert check_dial([], abstract_state(3), "turn up", abstract_state(4)) == []
    assert check_dial([], abstract_state(9), "turn up", abstract_state(9)) == []
    assert check_dial([], abstract_state(3), "submit", abstract_state(5))
    assert check_dial([], abstract_state(3), "turn up", abstract_state(6))
    assert check_dial([], abstract_state(3), "turn up", "no dial here")


def test_generic_check_flags_a_state_change_after_an_unavailable_action():
    chk = check_generic(family("dial"))
    assert chk([], abstract_state(3), "dance", abstract_state(5))
    assert chk([], abstract_state(3), "dance", abstract_state(3)) == []
    assert chk([], abstract_state(3), "turn up", abstract_state(4)) == []


RESULTS = ('[page] results for "red mug", page 1 of 1 (2 total)\n[button] Back to Search\n'
           '[link] B000000001 | Red Mug | $5.00\n[link] B000000002 | Blue Mug | $6.00')


def _item(asin: str) -> str:
    return f"[page] item {asin}\n[button] Back to Search\n[button] < Prev\n[text] A mug\n[button] Buy Now"


def test_webshop_check_flags_an_item_page_not_in_the_results():
    search = "[page] search\n[searchbox] search"
    past = [(search, "search[red mug]")]
    assert check_webshop(past, RESULTS, "click[B000000001]", _item("B000000001")) == []
    assert check_webshop(past, RESULTS, "click[B000000001]", _item("B0ZZZZZZZ9"))
    assert any("clicked" in r for r in check_webshop(past, RESULTS, "click[B000000001]", _item("B000000002")))
    # Staying on the same item (choosing an option) is fine even when its listing is out of the window.
    assert check_webshop([], _item("B0ZZZZZZZ9"), "click[red]", _item("B0ZZZZZZZ9")) == []
    assert check_webshop([], _item("B000000001"), "click[Description]",
                         "[page] description of B000000002\n[button] < Prev")


ALF = ("Task: put a mug in desk.\nObservation: {obs}\nLocation: {loc}\nInventory: {inv}\nOpened: none\n"
       "Lamps on: none\nAltered: none\nKnown contents: {known}\nReceptacles: cabinet 1, desk 1, shelf 1")


def _alf(known: str, inv: str = "nothing", loc: str = "desk 1", obs: str = "ok") -> str:
    return ALF.format(known=known, inv=inv, loc=loc, obs=obs)


def test_alfworld_check_flags_objects_that_appear_or_vanish_without_an_action():
    s0 = _alf("desk 1: mug 1, pen 2; shelf 1: nothing")
    assert check_alfworld([], s0, "take mug 1 from desk 1", _alf("desk 1: pen 2; shelf 1: nothing", inv="mug 1")) == []
    s1 = _alf("desk 1: pen 2; shelf 1: nothing", inv="mug 1")
    assert check_alfworld([], s1, "put mug 1 in/on shelf 1", _alf("desk 1: pen 2; shelf 1: mug 1", loc="shelf 1")) == []
    assert check_alfworld([], s0, "go to shelf 1", _alf("desk 1: mug 1, pen 2; shelf 1: nothing", loc="shelf 1")) == []
    # A failed take (hands full in the real engine) keeps everything as it was: consistent too.
    assert check_alfworld([], s0, "take pen 2 from desk 1", s0) == []
    appear = check_alfworld([], s0, "go to shelf 1", _alf("desk 1: mug 1, pen 2; shelf 1: apple 3", loc="shelf 1"))
    assert appear and "+apple 3" in appear[0]
    assert check_alfworld([], s0, "look", _alf("desk 1: pen 2; shelf 1: nothing"))  # the mug vanished
    assert check_alfworld([], s0, "look", _alf("shelf 1: nothing"))  # the desk vanished from knowledge
    assert check_alfworld([], s0, "look", _alf("desk 1: mug 1, pen 2; shelf 1: nothing", inv="pen 2"))


def test_family_checks_find_nothing_on_real_dial_and_webshop_episodes():
    for name, trajs in (("dial", dial_trajectories(12)), ("webshop", _webshop_episodes(4))):
        checks = checkers_for(name)
        assert len(checks) == 2
        for t in trajs:
            past = []
            for s in t.steps:
                for c in checks:
                    assert c(past, s.state, s.action, s.next_state) == [], (name, s.action)
                past.append((s.state, s.action))


def _webshop_episodes(n: int):
    from dreamgym.commands.collect import run_episode

    ws = family("webshop")
    env = ws.make_env("train")
    tasks = ws.tasks("train")
    return [run_episode(env, ws.POLICIES[p](seed=i), seed=i, task=tasks[i], policy_name=p)
            for i in range(n) for p in ("oracle", "noisy", "random")]


def _fake(fn) -> ExperienceModel:
    return ExperienceModel(FakeLLM(fn), config=ExperienceModelConfig(k=0), env="dial")


def test_teacher_forced_and_free_running_with_a_perfect_and_a_lying_model():
    trajs = dial_trajectories(16, split="test", seed=3)
    trs = em_transitions(trajs, history=3)
    perfect = _fake(dial_sim)
    tf = teacher_forced(perfect, trs)
    assert tf["n"] == sum(len(t.steps) for t in trajs)
    assert tf["state_f1"] == 1.0 and tf["state_em"] == 1.0 and tf["reward_acc"] == 1.0 and tf["done_acc"] == 1.0
    assert sum(v["n"] for v in tf["by_action"].values()) == tf["n"] and len(tf["by_action"]) >= 2
    assert all(v["state_f1"] == 1.0 for v in tf["by_action"].values())
    fr = free_running(perfect, trajs, "dial")
    assert fr["false_success"] == 0.0 and fr["outcome_acc"] == 1.0 and fr["contradiction_rate"] == 0.0

    def liar(req):  # jumps the dial to 7 and always claims success
        return format_completion(abstract_state(7), 1.0, True, "Success!")

    bad = _fake(liar)
    tf = teacher_forced(bad, trs)
    assert tf["reward_acc"] < 1.0 and tf["done_acc"] < 1.0
    # the average is the n-weighted mean of the per-verb figures
    by = tf["by_action"]
    assert abs(sum(v["state_f1"] * v["n"] for v in by.values()) / tf["n"] - tf["state_f1"]) < 1e-9
    # the copy baseline is the model's floor, the same for both models: the current state scored as the next one
    steps = [t for t in trs if t.action != RESET_ACTION]
    unchanged = sum(" ".join(t.state.split()) == " ".join(t.next_state.split()) for t in steps) / len(steps)
    assert tf["copy_state_em"] == pytest.approx(unchanged) and unchanged < 1.0
    assert 0.0 < tf["copy_state_f1"] < 1.0 and tf["copy_state_f1"] == teacher_forced(perfect, trs)["copy_state_f1"]
    fr = free_running(bad, trajs, "dial")
    assert any(not t.won for t in trajs)
    assert fr["false_success"] == 1.0 and fr["contradiction_rate"] > 0.5 and fr["examples"]


def test_reward1_precision_and_recall_per_task_count_each_tasks_true_predicted_and_real_wins():
    """Hand-made steps whose per-task figures are known: the model's reward is written in each step's action
    (`say0`, `say1`), the real one is the transition's. Task b credits a win the real world does not give and
    misses none; task c misses one; task d credits one where there is none; task e has no win either way (left
    out); task a is right."""
    from dreamgym.types import Task, Transition

    def step(task: str, said: int, real: int, i: int) -> Transition:
        t = Task(id=task, env="dial", instruction=f"task {task}", goal={"target": 3, "start": 1})
        return Transition(task=t, history=[], state=abstract_state(i % 9), action=f"say{said} {i}",
                          next_state=abstract_state(i % 9), reward=float(real), done=bool(real),
                          trajectory_id=f"{task}-{i}", step_index=0)

    plan = {"a": [(1, 1), (0, 0)], "b": [(1, 1), (1, 0), (0, 0)], "c": [(1, 1), (0, 1)], "d": [(1, 0)],
            "e": [(0, 0), (0, 0)]}
    steps = [step(task, said, real, i) for task, rows in plan.items() for i, (said, real) in enumerate(rows)]

    def says(req):  # the state unchanged, the reward the action names
        user = req[-1]["content"]
        return format_completion(user.rsplit("State:\n", 1)[1].split("\nAction:")[0], 1.0 if "Action: say1" in user
                                 else 0.0, False, "ok")

    tf = teacher_forced(_fake(says), steps)
    by = tf["reward1_by_task"]
    assert list(by) == ["b", "d", "c", "a"]  # worst first: false wins, then missed ones, then by id
    assert by["b"] == {"n": 3, "tp": 1, "predicted": 2, "actual": 1, "precision": 0.5, "recall": 1.0}
    assert by["c"] == {"n": 2, "tp": 1, "predicted": 1, "actual": 2, "precision": 1.0, "recall": 0.5}
    assert by["d"] == {"n": 1, "tp": 0, "predicted": 1, "actual": 0, "precision": 0.0, "recall": None}
    assert by["a"] == {"n": 2, "tp": 1, "predicted": 1, "actual": 1, "precision": 1.0, "recall": 1.0}
    # The overall figures are the per-task counts summed.
    assert tf["reward1_precision"] == 3 / 5 and tf["reward1_recall"] == 3 / 4
    table = worst_reward1_tasks(by, n=2)
    assert table[0] == "reward 1 by task, worst 2 of 3 with a false or missed win (4 with any):"
    assert [line.split()[0] for line in table[2:]] == ["b", "d"] and table[2].split()[1:] == ["3", "1", "2", "1",
                                                                                              "0.50", "1.00"]
    assert worst_reward1_tasks({"a": by["a"]}) == []
    report = heldout_report(_fake(says), steps, HeldOutConfig())
    assert report["reward1_by_task"] == by and report["reward1_worst"] == worst_reward1_tasks(by)
    assert "reward 1 by task, worst 3 of 3" in format_table({"m": tf})


def test_reward1_per_task_counts_a_miniwob_page_once_over_its_seeds():
    """MiniWoB++ task ids carry the seed (`miniwob-click-button-11`); the figures are per page (`task_kind`), so a
    page that credits false wins on many seeds shows as one row with all of them."""
    pytest.importorskip("miniwob")
    from dreamgym.experience.format import Prediction
    from dreamgym.types import Task, Transition

    def step(page: str, seed: int, said: int, real: int) -> tuple[Transition, Prediction]:
        t = Task(id=f"miniwob-{page}-{seed}", env="miniwob", instruction="click", goal={"subdomain": page, "seed": seed})
        return (Transition(task=t, history=[], state="s", action="click('1')", next_state="s", reward=float(real),
                           done=bool(real), trajectory_id=f"{page}-{seed}", step_index=0),
                Prediction(next_state="s", reward=float(said), done=bool(said)))

    pairs = [step("click-button", s, 1, 0) for s in range(3)] + [step("click-link", 4, 1, 1)]
    by = reward1_by_task([t for t, _ in pairs], [p for _, p in pairs])
    assert by == {"click-button": {"n": 3, "tp": 0, "predicted": 3, "actual": 0, "precision": 0.0, "recall": None},
                  "click-link": {"n": 1, "tp": 1, "predicted": 1, "actual": 1, "precision": 1.0, "recall": 1.0}}


def test_action_kind_is_the_verb():
    assert action_kind("search[red shoes]") == "search" and action_kind("click[Buy Now]") == "click"
    assert action_kind("go to countertop 1") == "go" and action_kind("  ") == "(empty)"
    # The web family's BrowserGym calls, arguments with spaces included.
    assert action_kind("click('13')") == "click" and action_kind('fill("42", "red shoes")') == "fill"


def test_eval_em_cli_writes_table_and_json(tmp_path, capsys):
    model_dir = trained_dial_model()
    held = tmp_path / "held.jsonl"
    write_jsonl(held, dial_trajectories(8, split="test", seed=5))
    meta = json.loads((model_dir / "em_config.json").read_text())
    out = tmp_path / "fid.json"
    rc = main(["--env", "dial", "--model", str(model_dir), "--data", str(held), "--train-data", meta["train"]["data"],
               "--out", str(out), "--max-transitions", "24", "--max-episodes", "4", "--inference-ablations",
               "--grounded"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "rew acc" in text and "-retrieval@inf" in text and "-history@inf" in text
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert len(rows) == 6
    # The dial has neither ground_state nor a reward rule: its answers are the dream's, row for row.
    for label, r in rows.items():
        if label.endswith(" +grounded"):
            raw = rows[label.removesuffix(" +grounded")]
            assert r["grounded"] and not raw["grounded"]
            assert [r[k] for k in ("state_f1", "reward_acc", "false_success")] == \
                [raw[k] for k in ("state_f1", "reward_acc", "false_success")]
    for r in rows.values():
        for k in ("state_f1", "state_em", "reward_acc", "done_acc", "false_success", "contradiction_rate"):
            assert r[k] is None or 0.0 <= r[k] <= 1.0
        assert r["n"] == 24 and r["episodes"] == 4
        assert sum(v["n"] for v in r["by_action"].values()) == 24
    assert text.count("F1 by action: ") == 6
    assert main(["--env", "dial", "--model", str(tmp_path), "--data", str(held)]) == 2
    assert parse_state(abstract_state(3)) == 3


def test_grounded_figures_score_the_answers_the_dream_takes_not_the_model_s_raw_ones():
    """A MiniWoB++ model that copies the page and claims a win on every step: its raw answers credit every step
    and leave each fill's typed text out; as the dream takes them (`evaluate(grounded=True)`), the page's rule
    decides reward and end where it can and `ground_state` writes the typed text in, so reward accuracy, fill F1
    and false success move to what the dream trains on, while the model's own figures are unchanged."""
    from dreamgym.data import load_trajectories

    trajs = load_trajectories(Path(__file__).resolve().parents[1] / "fixtures" / "web" / "miniwob_episodes.jsonl")

    def copies_and_wins(req):
        body, _action = req[-1]["content"].rsplit("\nAction: ", 1)
        return format_completion(body.rsplit("State:\n", 1)[1], 1.0, True, "It wins.")

    model = ExperienceModel(FakeLLM(copies_and_wins), config=ExperienceModelConfig(k=0), env="miniwob")
    raw = evaluate(model, trajs, "miniwob")
    dream = evaluate(model, trajs, "miniwob", grounded=True)
    steps = [t for t in em_transitions(trajs, history=20) if t.action != RESET_ACTION]
    rule = family("miniwob").hooks.grounded_outcome
    decided = [t for t in steps if rule(t.task, t.state, t.action, t.next_state, t.history) is not None]
    wins = sum(t.reward >= 1.0 for t in steps)
    assert raw["n"] == dream["n"] == len(steps) and len(decided) < len(steps)
    assert raw["reward_acc"] == pytest.approx(wins / len(steps)) and raw["false_success"] == 1.0
    # every decided step is right (the rule agrees with the page), an open one keeps the model's claimed win
    open_wins = sum(t.reward >= 1.0 for t in steps if t not in decided)
    assert dream["reward_acc"] == pytest.approx((len(decided) + open_wins) / len(steps))
    assert dream["false_success"] == 0.0 and dream["reward1_recall"] == 1.0
    assert dream["by_action"]["fill"]["state_f1"] > raw["by_action"]["fill"]["state_f1"]
    assert dream["by_action"]["fill"]["state_em"] > raw["by_action"]["fill"]["state_em"]


def test_heldout_report_passes_a_faithful_model_and_flags_one_that_collapsed_to_one_answer():
    """The collapse detector: a model that writes one state for every action keeps a fair F1 on the dial (its
    states look alike) but has one distinct next state where the real world has many."""
    steps = [t for t in em_transitions(dial_trajectories(12, split="test", seed=4), history=3)
             if t.action != RESET_ACTION]
    good = heldout_report(_fake(dial_sim), steps, HeldOutConfig())
    assert good["fit"] and not good["reasons"] and "warning" not in good
    assert good["format_validity"] == 1.0 and good["reward1_recall"] == 1.0 and good["reward1_precision"] == 1.0
    assert good["distinct_share"] == 1.0 and good["metrics"]["fit"] is True

    def one_sentence(req):
        return format_completion(abstract_state(5), 0.0, False, "The dial moves.")

    bad = heldout_report(_fake(one_sentence), steps, HeldOutConfig())
    assert not bad["fit"] and bad["distinct_next_states"] == 1 / len({(t.state, t.action) for t in steps})
    assert any(r.startswith("distinct next states") for r in bad["reasons"])
    assert any(r.startswith("reward-1 recall 0.000") for r in bad["reasons"])
    assert "reward-1 precision" in bad["unmeasured"]  # it never says 1: nothing to measure, not gated
    assert "NOT FIT TO DREAM IN" in bad["warning"]
    off = HeldOutConfig(min_distinct_share=0, min_reward1_recall=0, min_state_f1=0, min_done_acc=0)
    assert heldout_report(_fake(one_sentence), steps, off)["fit"]


def test_the_tables_failure_share_counts_every_prediction_as_the_json_does():
    """eval-em's table showed `fail 0.000` while its JSON counted failure states: the table's share was of the
    teacher-forced steps only, the model's counters of every prediction (initial states and free-running too)."""
    def no_initial_states(req):
        return "no format" if req[-1]["content"].endswith(RESET_ACTION) else dial_sim(req)

    m = ExperienceModel(FakeLLM(no_initial_states), config=ExperienceModelConfig(k=0, retries=0), env="dial")
    row = evaluate(m, dial_trajectories(6, split="test", seed=2), "dial")
    assert row["failure_rate"] == 0.0 and row["init_failures"] == row["init_n"] > 0
    assert row["failures"] == m.stats["failures"] and row["predictions"] == m.stats["predictions"]
    table = format_table({"m": row})
    fail_column = table.splitlines()[2].split()[5]
    assert float(fail_column) == round(m.stats["failures"] / m.stats["predictions"], 3) > 0
    assert f"failure states {m.stats['failures']} of {m.stats['predictions']} predictions" in table


def _eval_em_on_a_server(tmp_path, capsys, served_as: str, context: int | None = None) -> tuple[int, list[str]]:
    """`dreamgym eval-em --url` on a few held-out dial steps against `dreamgym serve-model` serving the trained dial
    experience model under the name `served_as` (with a `context` shorter than its own where given). Returns (exit
    code, stderr lines)."""
    from dreamgym.llm.server import start_server

    model = ExperienceModel.load(trained_dial_model(), device="cpu")
    if context is not None:
        model.llm.model.config.max_position_embeddings = context
    held = tmp_path / "held.jsonl"
    write_jsonl(held, dial_trajectories(3, split="test", seed=5))
    meta = json.loads((trained_dial_model() / "em_config.json").read_text())
    with start_server(model.llm, model_name=served_as) as server:
        rc = main(["--env", "dial", "--model", str(trained_dial_model()), "--data", str(held), "--train-data",
                   meta["train"]["data"], "--out", str(tmp_path / "fid.json"), "--url", f"{server.url}#em",
                   "--max-transitions", "6", "--max-episodes", "2"])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_eval_em_refuses_a_server_that_cannot_serve_the_model_at_start_up_in_one_line(tmp_path, capsys):
    """A server that refuses every request (it serves another model) used to give exit code 0 and a full table of
    failure states; the start-up probe now finds it out before any prediction: exit 2, one line naming the model."""
    rc, err = _eval_em_on_a_server(tmp_path, capsys, served_as="another")
    assert rc == 2 and not (tmp_path / "fid.json").exists()
    assert err[-1].startswith("dreamgym eval-em: ") and "this server serves 'another'" in err[-1], err


def test_eval_em_exits_1_without_a_report_when_most_predictions_are_backend_errors(tmp_path, capsys):
    """A server that passes the start-up probe but refuses the experience model's own requests (here its context is
    shorter than their prompts: 400 context_length_exceeded) would leave a table of failure states that judges the
    model by a backend it never used: exit 1, the count and the server's reason on stderr, no report written."""
    rc, err = _eval_em_on_a_server(tmp_path, capsys, served_as="em", context=48)  # the probe fits; no prompt does
    assert rc == 1 and not (tmp_path / "fid.json").exists()
    assert err[-1].startswith("dreamgym eval-em: ") and "backend errors" in err[-1] and "context" in err[-1], err


def test_the_gate_leaves_out_reward_and_end_where_the_dream_takes_them_from_the_family_s_rule():
    """WebShop's dream takes a step's reward and end from `grounded_outcome` (reward_from=auto), so a model that
    never says reward 1 is not unfit for its reward-1 recall there (reported, not gated); told that the dream takes
    them from the model (heldout.reward_from=model), the gate judges them again."""
    steps = [t for t in em_transitions(_webshop_episodes(2), history=3) if t.action != RESET_ACTION]
    assert any(t.reward >= 1.0 for t in steps)

    def never_wins(req):
        return format_completion("WebShop\n[search]", 0.0, False, "Nothing changes.")

    model = ExperienceModel(FakeLLM(never_wins), config=ExperienceModelConfig(k=0), env="webshop")
    grounded = heldout_report(model, steps, HeldOutConfig())
    assert grounded["reward1_recall"] == 0.0  # still measured and reported
    assert not any(r.startswith(("reward-1", "done accuracy")) for r in grounded["reasons"]), grounded["reasons"]
    assert grounded["not_gated"] == ["reward-1 recall", "reward-1 precision", "done accuracy"]
    assert "grounded_outcome" in grounded["not_gated_reason"]
    judged = heldout_report(model, steps, HeldOutConfig(reward_from="model"))
    assert any(r.startswith("reward-1 recall 0.000") for r in judged["reasons"]) and not judged["not_gated"]


def test_where_the_family_s_rule_leaves_steps_open_the_gate_judges_the_model_s_outcomes_on_those_alone():
    """MiniWoB++'s rule decides most steps but not all (a dialog click; a password Submit whose fills are before the
    transitions' history window, here one step): the dream takes those steps' reward and end from the model, so a
    model that ends every step with a win is judged on the open steps alone (its done accuracy there is under the
    threshold), and the report says how many they are."""
    from dreamgym.data import load_trajectories
    from dreamgym.envs import family

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "web" / "miniwob_episodes.jsonl"
    steps = [t for t in em_transitions(load_trajectories(fixture), history=1) if t.action != RESET_ACTION]
    rule = family("miniwob").hooks.grounded_outcome
    open_steps = [t for t in steps if rule(t.task, t.state, t.action, t.next_state, t.history) is None]
    assert 0 < len(open_steps) < len(steps) and any(t.reward < 1.0 for t in open_steps)

    def always_wins(req):
        return format_completion("[goal] x\n[page] y", 1.0, True, "It wins.")

    model = ExperienceModel(FakeLLM(always_wins), config=ExperienceModelConfig(k=0), env="miniwob")
    report = heldout_report(model, steps, HeldOutConfig())
    assert report["model_outcome_steps"] == len(open_steps) and not report["not_gated"]
    wins = sum(t.reward >= 1.0 for t in open_steps) / len(open_steps)
    assert report["model_outcomes"]["reward1_precision"] == pytest.approx(wins)
    done = sum(t.done for t in open_steps) / len(open_steps)
    assert report["model_outcomes"]["done_acc"] == pytest.approx(done) and done < HeldOutConfig().min_done_acc
    assert any(r.startswith(f"done accuracy {done:.3f}") and f"on the {len(open_steps)} held-out steps" in r
               for r in report["reasons"]), report["reasons"]
    assert report["reward1_precision"] == pytest.approx(sum(t.reward >= 1.0 for t in steps) / len(steps))


def test_eval_em_on_a_server_without_structured_output_says_its_figures_do_not_compare(tmp_path, capsys):
    """A chat-only server decodes the experience model's answers unconstrained (26% failure states and F1 0.692
    against 0% and 0.770 in process): eval-em labels those rows, records how each was decoded and says last, on
    stderr, that the figures do not compare."""
    from dreamgym.llm.server import ServerHandle, create_app
    from dreamgym.utils import serving

    model = ExperienceModel.load(trained_dial_model(), device="cpu")
    held = tmp_path / "held.jsonl"
    write_jsonl(held, dial_trajectories(3, split="test", seed=5))
    meta = json.loads((trained_dial_model() / "em_config.json").read_text())
    app = create_app(model.llm, "em")
    app.add_middleware(DropField, name="structured_outputs")  # a chat server without structured output
    with ServerHandle(serving.start(serving.make_server(app), "127.0.0.1", 0), app) as server:
        rc = main(["--env", "dial", "--model", str(trained_dial_model()), "--data", str(held), "--train-data",
                   meta["train"]["data"], "--out", str(tmp_path / "fid.json"), "--url", f"{server.url}#em",
                   "--max-transitions", "6", "--max-episodes", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0
    rows = json.loads((tmp_path / "fid.json").read_text())["rows"]
    assert len(rows) == 1 and all(label.endswith("[unconstrained]") for label in rows)
    assert next(iter(rows.values()))["decoding"].startswith("unconstrained (no structured output on http://")
    assert err[-1].startswith("dreamgym eval-em: warning: ") and "do not compare" in err[-1], err
