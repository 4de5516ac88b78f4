import numpy as np
import pytest

from dreamgym.config import ConfigError
from dreamgym.curriculum.pools import check_strata, informative_task_ids, iteration_tasks, stratified_tasks
from dreamgym.curriculum.generator import (Curriculum, CurriculumConfig, cluster_groups, reward_variance,
                                 solved_task_steps, writing_examples)
from dreamgym.envs.dial import make_tasks, parse_goal
from dreamgym.llm.fake import FakeLLM
from dreamgym.types import Task


def test_reward_variance_formula():
    assert reward_variance([1, 1, 1, 1]) == 0.0
    assert reward_variance([0, 0, 0, 0]) == 0.0
    assert reward_variance([1, 0, 1, 0]) == pytest.approx(0.25)  # the maximum, an even mix
    assert reward_variance([1, 0, 0, 0]) == pytest.approx(0.1875)  # (0.75² + 3·0.25²) / 4


def _fake(req):
    content = req[-1]["content"]
    if content.startswith("Original:"):
        return "Choice: 2"
    return ("Variant: set the dial to 9 and press submit\n"
            "Variant: set the dial to 8 and press submit\n"
            "Variant: make me a sandwich\n"
            "Variant: set the dial to 99 and press submit")


def test_curriculum_generates_validated_variants_with_lineage(tmp_path):
    base = [t for t in make_tasks("train") if t.goal["target"] <= 5]
    cur = Curriculum(base, parse_goal, FakeLLM(_fake), CurriculumConfig(n_seeds=2, max_share=0.25), seed=0,
                     log_path=tmp_path / "curriculum.jsonl")
    by_id = {t.id: t for t in base}
    rewards = {base[0].id: [1, 0, 1, 0], base[1].id: [1, 0, 0, 0], base[2].id: [1, 1, 1, 1]}
    report = cur.update(0, rewards, by_id)
    # Two seeds (the two informative tasks), each proposing 4: two valid, two invalid.
    assert cur.stats.proposed == 8 and cur.stats.valid == 4 and cur.stats.dropped_invalid == 4
    assert report["curriculum/informative_tasks"] == 2.0
    # The selection prompt chose candidate 2 for both seeds; the second seed's copy is a duplicate.
    assert [t.instruction for t in cur.generated] == ["set the dial to 8 and press submit"]
    assert cur.stats.dropped_duplicate == 1
    assert cur.generated[0].parent_id == base[0].id and cur.generated[0].iteration == 0
    assert cur.generated[0].goal["target"] == 8
    batch = cur.sample(100)
    assert sum(t.split == "generated" for t in batch) <= 25
    assert (tmp_path / "curriculum.jsonl").read_text().count("\n") == 1


def test_base_tasks_are_drawn_without_replacement_like_real_iterations():
    """16 of 16 base tasks are 16 distinct ones (with replacement ~10 would be); more than the pool repeats."""
    base = make_tasks("train")[:16]
    cur = Curriculum(base, parse_goal, None, CurriculumConfig(enabled=False), seed=3)
    for _ in range(5):
        assert sorted(t.id for t in cur.sample(16)) == sorted(t.id for t in base)
    many = cur.sample(40)
    assert len(many) == 40 and {t.id for t in many} <= {t.id for t in base}


def test_a_stratified_draw_deals_every_stratum_once_before_any_twice_and_every_task_of_one_before_a_repeat():
    """The dial's 72 train tasks over their 10 targets (7-8 each), 3 an iteration: across iterations the targets come
    in rounds (each once before any twice), a target's tasks come in passes (each once before any twice), and the
    draw is a function of (pool, n, seed, iteration): a resumed run draws what the first one would have."""
    pool = make_tasks("train")
    target = {t.id: t.goal["target"] for t in pool}
    sizes = {v: list(target.values()).count(v) for v in set(target.values())}
    assert len(sizes) == 10 and set(sizes.values()) == {7, 8}
    draws = [stratified_tasks(pool, 3, 5, it, "target") for it in range(80)]  # 240 draws: 24 of each target
    flat = [target[t.id] for d in draws for t in d]
    for r in range(0, len(flat), 10):  # every round of 10 draws holds the 10 targets once
        assert sorted(flat[r:r + 10]) == sorted(sizes)
    per_target: dict[int, list[str]] = {}
    for t in (t for d in draws for t in d):
        per_target.setdefault(target[t.id], []).append(t.id)
    for v, ids in per_target.items():  # a target's draws in passes of its size: each pass all of its tasks
        m = sizes[v]
        assert len(ids) == 24
        for p in range(0, 24 - m + 1, m):
            assert len(set(ids[p:p + m])) == m
    assert stratified_tasks(pool, 3, 5, 7, "target") == draws[7]
    assert iteration_tasks(pool, 3, 5, 7, "target") == draws[7]
    assert stratified_tasks(pool, 3, 6, 7, "target") != draws[7]  # another seed, another draw
    assert iteration_tasks(pool, 3, 5, 7) != draws[7]  # without strata: the uniform draw


def test_a_stratum_field_the_tasks_lack_fails_naming_the_config_field():
    check_strata(make_tasks("train"), "target")
    with pytest.raises(ConfigError, match="task_strata: .*no goal field 'family'.*start, target"):
        check_strata(make_tasks("train"), "family")


def test_curriculum_disabled_and_uninformative_groups_generate_nothing():
    base = make_tasks("train")
    llm = FakeLLM(_fake)
    cur = Curriculum(base, parse_goal, llm, CurriculumConfig(enabled=False))
    cur.update(0, {base[0].id: [1, 0]}, {t.id: t for t in base})
    assert not cur.generated and not llm.calls
    cur = Curriculum(base, parse_goal, llm, CurriculumConfig())
    cur.update(0, {base[0].id: [1, 1]}, {t.id: t for t in base})
    assert not cur.generated and not llm.calls


def test_informative_task_ids_are_the_tasks_whose_latest_group_had_mixed_outcomes(tmp_path):
    """S2R's real pool: a task mixed earlier but settled in its latest group drops out, and the reverse."""
    base = make_tasks("train")[:4]
    log = tmp_path / "curriculum.jsonl"
    cur = Curriculum(base, parse_goal, None, CurriculumConfig(enabled=False), log_path=log)
    a, b, c, d = (t.id for t in base)
    cur.update(0, {a: [1, 0, 1, 1], b: [0, 0, 0, 0], c: [1, 0, 0, 0]}, {t.id: t for t in base})
    cur.update(1, {a: [1, 1, 1, 1], b: [1, 0, 0, 0], d: [0, 0, 0, 0]}, {t.id: t for t in base})
    assert informative_task_ids(log) == [b, c]


def test_a_log_row_torn_by_a_kill_is_skipped_by_the_reader_and_cut_off_by_the_next_write(tmp_path):
    from dreamgym.data import iter_jsonl_records

    base = make_tasks("train")[:2]
    log = tmp_path / "curriculum.jsonl"
    cur = Curriculum(base, parse_goal, None, CurriculumConfig(enabled=False), log_path=log)
    a, b = (t.id for t in base)
    cur.update(0, {a: [1, 0], b: [0, 0]}, {t.id: t for t in base})
    with open(log, "ab") as fh:
        fh.write(b'{"iteration": 1, "variance": [{"task_id"')  # what a kill mid-write leaves
    assert informative_task_ids(log) == [a]
    cur.update(1, {a: [1, 1], b: [1, 0]}, {t.id: t for t in base})
    assert [rec["iteration"] for _, rec in iter_jsonl_records(log)] == [0, 1]  # strict read: no garbage mid-file
    assert informative_task_ids(log) == [b] and (tmp_path / "curriculum.jsonl.torn").is_file()


def test_cluster_groups_pools_rewards_of_similar_tasks():
    emb = np.array([[1, 0], [0.99, 0.01], [0, 1], [0.01, 0.99]])
    groups = cluster_groups(["a", "b", "c", "d"], [1, 0, 1, 1], emb, n_clusters=2)
    assert sorted(groups["a"]) == [0, 1] and sorted(groups["c"]) == [1, 1]


def test_writing_examples_teach_harder_solved_variants_and_the_hardest_choice(tmp_path):
    from dreamgym.commands.collect import collect
    from dreamgym.data import load_trajectories
    from dreamgym.envs.webshop import parse_goal as ws_parse_goal

    collect("webshop", {"oracle": 0.7, "random": 0.3}, 60, tmp_path / "d.jsonl", seed=3, progress=False)
    trajs = load_trajectories(tmp_path / "d.jsonl")
    solved = solved_task_steps(trajs)
    assert solved and all(any(t.won and t.task.id == tid for t in trajs) for tid in solved)
    by_text = {task.instruction: steps for task, steps in solved.values()}
    pairs = writing_examples(solved, n_variants=3, seed=0)
    variants = [(req, out) for req, out in pairs if out.startswith("Variant:")]
    choices = [(req, out) for req, out in pairs if out.startswith("Choice:")]
    assert variants and choices
    for req, out in variants:
        parent = req[-1]["content"].split("\n")[0].removeprefix("Task: ")
        lines = Curriculum.parse_variants(out)
        assert 1 <= len(lines) <= 3
        # Every target is a real solved task that took at least as many steps as the parent, and parses as a goal.
        assert all(by_text[v] >= by_text[parent] and ws_parse_goal(v) is not None for v in lines)
    for req, out in choices:
        listed = [line.split(". ", 1)[1] for line in req[-1]["content"].split("\n")[2:]]
        picked = listed[int(out.removeprefix("Choice: ")) - 1]
        assert by_text[picked] == max(by_text[c] for c in listed)


def test_the_family_writer_keeps_every_valid_page_question_once_per_page_without_a_model():
    """`curriculum.writer=family`: the family's variants of each seed task's page are all kept (no model, no
    selection step); the same question on two pages is two tasks, and a page never gets one question twice."""
    import random

    from dreamgym.envs import family

    miniwob = family("miniwob")
    pages = {}
    for seed, names in ((0, ("Ab", "Cd", "Ef")), (1, ("Gh", "Ab", "Ij"))):
        rows = "\n".join(f"[{10 + 3 * i}] LabelText '', clickable\n  [{11 + 3 * i}] radio '{n}', clickable, "
                         f"checked='false'\n  StaticText '{n}'" for i, n in enumerate(names))
        pages[seed] = (f"[goal] Select {names[0]} and click Submit.\n[page] Click Option Task\n{rows}\n"
                       "[30] button 'Submit', clickable")
    base = [Task(id=f"miniwob-click-option-{s}", env="miniwob", instruction=pages[s].splitlines()[0][7:],
                 goal={"subdomain": "click-option", "seed": s}, split="train") for s in pages]

    def write(task: Task, n: int, rng: random.Random) -> list[str]:
        return miniwob.hooks.task_variants(task, pages[task.goal["seed"]], n, rng)

    with pytest.raises(ValueError, match="writer=family"):
        Curriculum(base, miniwob.parse_goal, None, CurriculumConfig(writer="family"))
    cur = Curriculum(base, miniwob.parse_goal, None, CurriculumConfig(writer="family", n_seeds=2, n_variants=4),
                     write_variants=write)
    mixed = {t.id: [1.0, 0.0] for t in base}
    cur.update(0, mixed, {t.id: t for t in base})
    asked = sorted((t.parent_id, t.instruction) for t in cur.generated)
    assert asked == [("miniwob-click-option-0", "Select Cd and click Submit."),
                     ("miniwob-click-option-0", "Select Ef and click Submit."),
                     ("miniwob-click-option-1", "Select Ab and click Submit."),
                     ("miniwob-click-option-1", "Select Ij and click Submit.")]
    # "Select Ab" is page 0's own question and a new one on page 1
    assert cur.stats.proposed == 4 and cur.stats.valid == 4 and cur.stats.dropped_duplicate == 0
    assert all(t.split == "generated" and t.goal["seed"] == int(t.parent_id[-1]) for t in cur.generated)
    cur.update(1, mixed, {t.id: t for t in base})
    assert len(cur.generated) == 4 and cur.stats.dropped_duplicate == 4
