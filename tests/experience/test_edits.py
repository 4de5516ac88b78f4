"""The experience model writing what changed (`state_format: edit`): line edits derived from recorded states and
applied back, the answer format that carries them under structured decoding, the failure state of an edit that
cannot apply, the prompt it shrinks, and a tiny model trained on it."""

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamgym.config import ConfigError, from_dict
from dreamgym.experience.checkpoint import checkpoint_model_config
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.data import em_transitions
from dreamgym.experience.edits import (EDIT_BODY, MAX_NAMED_CHARS, EditError, apply_edit, bounded_state_edit_body,
                                       bounded_state_edit_chars, clip_edit, derive_edit, format_edit, nameable_lines,
                                       parse_edit, repeated_insertions, state_edit_body, state_lines)
from dreamgym.experience.format import (FAILURE_STATE, RESET_ACTION, answer_state, build_request, edit_named_lines,
                                        format_completion, format_edit_completion, output_constraint, output_regex,
                                        parse_completion, render_example, target_completion, written_edit)
from dreamgym.experience.model import ExperienceModel
from dreamgym.llm.fake import FakeLLM
from dreamgym.types import Transition
from em_helpers import dial_query, dial_trajectories, family_steps

MINIWOB = Path(__file__).resolve().parents[1] / "fixtures" / "web" / "miniwob_episodes.jsonl"
EDIT = ExperienceModelConfig(state_format="edit", embedder="hashing")


def miniwob_steps() -> list[Transition]:
    """Real MiniWoB++ transitions recorded in Chromium (tests/fixtures/web/miniwob_episodes.jsonl, see its README
    line in tests/fixtures/web/README.md), reset pseudo-steps included."""
    from dreamgym.data import load_trajectories

    return em_transitions(load_trajectories(MINIWOB), history=3)


def recorded_steps() -> dict[str, list[Transition]]:
    """Real steps of three families: dial (played here), WebShop (its fixture catalog, played here), MiniWoB++
    (recorded)."""
    return {"dial": [t for t in em_transitions(dial_trajectories(6)) if t.action != RESET_ACTION],
            "webshop": family_steps("webshop", 16),
            "miniwob": [t for t in miniwob_steps() if t.action != RESET_ACTION]}


@pytest.fixture(scope="module")
def steps() -> dict[str, list[Transition]]:
    return recorded_steps()


# ------------------------------------------------------------------------------------------------ the edit


def test_an_edit_round_trips_every_recorded_state_of_three_families(steps):
    for env, trs in steps.items():
        assert len(trs) >= 10, env
        for tr in trs:
            ops = derive_edit(tr.state, tr.next_state)
            assert apply_edit(tr.state, ops) == tr.next_state.strip(), (env, tr.action)
            back, err = parse_edit(format_edit(ops))
            assert err == "" and back == ops
    # On MiniWoB++ most steps change a line or two (a changed line is two operations): the edit names a few lines
    # of a page of many, and is shorter than the page on at least 3 steps in 4.
    mw = steps["miniwob"]
    named = sorted(len(derive_edit(t.state, t.next_state)) for t in mw)
    lines = sorted(len(state_lines(t.next_state)) for t in mw)
    assert named[len(named) // 2] <= 4 and lines[len(lines) // 2] >= 10
    shorter = [len(format_edit(derive_edit(t.state, t.next_state))) < len(t.next_state) for t in mw]
    assert sum(shorter) >= 0.75 * len(mw)


LINES = st.lists(st.sampled_from(["a", "b", "c", "  indented b", "[1] button 'OK'", ""]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(before=LINES, after=LINES)
def test_an_edit_round_trips_any_pair_of_states_repeated_lines_included(before, after):
    """Repeated lines are where a reference by content could name the wrong copy: anchors tell them apart."""
    b, a = "\n".join(before), "\n".join(after)
    ops = derive_edit(b, a)
    assert apply_edit(b, ops) == a.strip()
    assert parse_edit(format_edit(ops))[0] == [(op, line) for op, line in ops]
    # The state's own grammar admits every edit derived from it, its anchors on repeated lines included.
    assert re.fullmatch(state_edit_body(nameable_lines(b)), format_edit(ops))


def test_a_changed_line_lands_where_it_was_and_an_insertion_after_its_anchor():
    page = "[goal] Click.\n[page] Task\n[15] textbox '', clickable\n[16] button 'Submit', clickable"
    filled = page.replace("textbox ''", "textbox 'Tora'")
    assert format_edit(derive_edit(page, filled)) == ("- [15] textbox '', clickable\n"
                                                      "+ [15] textbox 'Tora', clickable\n")
    err = page + "\n[error] ValueError: no element"
    assert format_edit(derive_edit(page, err)) == "= [16] button 'Submit', clickable\n+ [error] ValueError: no element\n"
    assert apply_edit(page, [("+", "[top]")]).startswith("[top]\n[goal]")
    assert apply_edit(page, []) == page


def test_an_edit_naming_a_line_the_state_does_not_hold_cannot_apply():
    page = "[goal] g\n[15] textbox ''\n[16] button 'Submit'"
    with pytest.raises(EditError, match="not in the state"):
        apply_edit(page, [("-", "[17] link 'x'")])
    # The cursor only moves forward: a line above the last one named is not found again.
    with pytest.raises(EditError, match="after line 3"):
        apply_edit(page, [("=", "[16] button 'Submit'"), ("-", "[goal] g")])
    # Lenient about whitespace only: a re-spaced copy applies, a changed word does not.
    assert apply_edit(page, [("-", "[15]  textbox  ''")]) == "[goal] g\n[16] button 'Submit'"
    with pytest.raises(EditError):
        apply_edit(page, [("-", "[15] textbox 'x'")])


def test_a_states_own_edit_body_names_its_lines_verbatim_in_order_each_once():
    """The per-request grammar (`state_edit_body`): `-` and `=` name a line of the state, whole and verbatim, after
    the line named before it, each occurrence at most once; `+` writes any line without "<". So every edit decoded
    under it applies. The generic body (`EDIT_BODY`, the only one before) admits any text after `-`."""
    page = "[goal] Click (a)+?\n[15] textbox '', clickable\n  StaticText 'x'\n  StaticText 'x'\n[16] link '<b>'"
    named = nameable_lines(page)
    assert named == ["[goal] Click (a)+?", "[15] textbox '', clickable", "  StaticText 'x'", "  StaticText 'x'"]
    body = state_edit_body(named)
    for edit in ("- [goal] Click (a)+?\n", "- [15] textbox '', clickable\n+ [15] new\n+ two", "+ top\n= [goal] Click (a)+?\n",
                 "-   StaticText 'x'\n-   StaticText 'x'\n", "+ anything at all\n", ""):
        assert re.fullmatch(body, edit), edit
        assert apply_edit(page, parse_edit(edit)[0]) is not None  # applies
    for edit in ("- [17] link 'not here'\n",  # a line the page lacks: what 66 of 100 held-out edits did
                 "- [15] textbox ''\n",  # a prefix of a line is not the line
                 "- [goal] Click a\n",  # metacharacters are literal
                 "= [15] textbox '', clickable, focused\n", "-  StaticText 'x'\n", "- [16] link '<b>'\n",
                 # a line the cursor has passed: what every failed held-out answer of the step-700 model did
                 "= [15] textbox '', clickable\n+ [15] new\n- [15] textbox '', clickable\n",
                 "- [15] textbox '', clickable\n- [goal] Click (a)+?\n",
                 "-   StaticText 'x'\n" * 3,  # twice on the page, so at most twice
                 "- [goal] Click (a)+?"):  # a named line ends with its line break
        assert not re.fullmatch(body, edit), edit
    assert re.fullmatch(EDIT_BODY, "- [17] link 'not here'\n")
    assert re.fullmatch(state_edit_body([]), "+ a\n+ b") and re.fullmatch(state_edit_body([]), "")
    assert not re.fullmatch(state_edit_body([]), "- a\n")  # an empty state: insertions only
    # Bounded for servers: at most `lines` + 1 lines, an inserted one of at most `line_chars`; the longest match.
    bounded = bounded_state_edit_body(named, 30, 2)
    longest = "+ " + "y" * 30 + "\n"
    assert re.fullmatch(bounded, longest * 2 + longest[:-1])
    assert len(longest * 2 + longest[:-1]) == bounded_state_edit_chars(named, 30, 2)
    assert not re.fullmatch(bounded, longest * 3 + "+ y") and not re.fullmatch(bounded, "+ " + "y" * 31)
    # A page too long for a regex gets the generic body (None), which the model counts.
    assert nameable_lines("\n".join(f"[{i}] " + "x" * 60 for i in range(MAX_NAMED_CHARS // 60))) is None


def test_clip_edit_keeps_whole_operations():
    edit = "- aaaa\n+ bbbb\n+ cccc\n"
    assert clip_edit(edit, 100) == edit
    assert clip_edit(edit, 15) == "- aaaa\n+ bbbb\n…\n"
    assert clip_edit(edit, 4) == "- aa …\n"  # a first line longer than the limit is cut inside


# --------------------------------------------------------------------------------------- the answer format


def test_the_regex_accepts_every_derived_target_and_the_parser_reads_back_the_whole_next_state(steps):
    kinds: Counter[str] = Counter()
    checked: Counter[str] = Counter()
    for cfg in (EDIT, dataclasses.replace(EDIT, use_reasoning=False, binary_reward=False)):
        regex, server = output_regex(cfg), output_constraint(cfg).server_regex
        assert server is not None
        for env, trs in steps.items():
            for tr in trs:
                if "<" in tr.state + tr.next_state:
                    continue  # a page holding "<" (WebShop's "< Prev") cannot be written in either form
                target = target_completion(tr, cfg)
                kinds[env] += "<edit>" in target
                checked[env] += 1
                assert re.fullmatch(regex, target), target
                assert re.fullmatch(server, target), target
                own = output_constraint(cfg, edit_named_lines(tr, cfg))  # the query state's own grammar
                assert re.fullmatch(own.regex, target) and re.fullmatch(own.server_regex or "", target), target
                assert len(target) <= own.server_max_tokens
                parsed, err = parse_completion(target)
                assert err == "" and parsed is not None
                assert answer_state(parsed, tr, cfg) == tr.next_state.strip(), (env, tr.action)
    assert all(checked[env] >= 10 for env in steps), checked
    assert kinds["dial"] and kinds["miniwob"] > checked["miniwob"] / 2, kinds  # WebShop's new pages: mostly whole
    # The whole-state format is unchanged: no <edit> in its regex, and its targets are what they were.
    tr = steps["dial"][0]
    assert "<edit>" not in output_regex(ExperienceModelConfig())
    assert target_completion(tr, ExperienceModelConfig()) == format_completion(
        tr.next_state, tr.reward, tr.done, tr.reasoning)


def test_the_model_writes_the_whole_state_where_the_edit_would_be_longer():
    page = "[page] search\n[searchbox] search"
    results = "[page] results\n[button] Back to Search\n[link] B01 | Mug | $5"
    tr = Transition(task=dial_query(3, "x").task, history=[], state=page, action="search[mug]", next_state=results,
                    reward=0.0, done=False)
    assert written_edit(tr, EDIT) is None and "<state>" in target_completion(tr, EDIT)
    reset = dataclasses.replace(tr, state="", action=RESET_ACTION)
    assert written_edit(reset, EDIT) is None  # nothing to edit: an initial state is written whole
    assert written_edit(dataclasses.replace(tr, next_state=page), EDIT) == ""  # nothing changed: the empty edit


@pytest.mark.parametrize("text, ops", [
    ("<edit>\n- a\n+ b\n</edit>\n<reward>0</reward>\n<done>false</done>", [("-", "a"), ("+", "b")]),
    ("<EDIT>-a\r\n\n+b</EDIT><reward>0<done>no", [("-", "a"), ("+", "b")]),  # no spaces, CRLF, blank line
    ("<think>x</think><edit>\n= a\n+ b\n<reward>0</reward><done>0</done>", [("=", "a"), ("+", "b")]),  # no </edit>
    ("<edit>\n</edit><reward>1</reward><done>true</done>", []),  # nothing changed
])
def test_the_parser_is_lenient_about_an_edits_layout(text, ops):
    p, err = parse_completion(text)
    assert err == "" and p is not None and p.edit == ops and p.next_state == ""


def test_the_parser_rejects_an_edit_line_without_an_operation():
    p, err = parse_completion("<edit>\n- a\nb\n</edit><reward>0</reward><done>false</done>")
    assert p is None and err == "edit line 2 has no operation (-, + or =)"


def test_the_server_regex_bounds_an_edit_and_its_longest_answer_fills_server_max_tokens():
    from dreamgym.experience.edits import bounded_edit_chars

    cfg = dataclasses.replace(EDIT, max_new_tokens=90, max_think_tokens=5)
    c = output_constraint(cfg)
    whole = output_constraint(dataclasses.replace(cfg, state_format="whole"))
    assert c.regex != whole.regex and c.budgets == whole.budgets
    tail = "</state>\n<reward>1</reward>\n<done>false</done>"
    units = 4 * (cfg.max_new_tokens - len("<think></think>\n<state>\n") - len(tail))
    # The longest edit: every unit a line break with its operation (3 characters).
    longest = "<think>" + "t" * 20 + "</think>\n<edit>\n- " + "\n+ " * units + "\n</edit>\n<reward>1</reward>\n" \
        "<done>false</done>"
    assert len(longest) == c.server_max_tokens > whole.server_max_tokens
    assert bounded_edit_chars(units) == len("- " + "\n+ " * units + "\n")
    assert re.fullmatch(c.server_regex, longest) and re.fullmatch(c.regex, longest)
    assert not re.fullmatch(c.server_regex, longest.replace("- ", "- \n+ ", 1))


def test_a_budget_closes_an_edit_mid_line_token_by_token():
    """The constraint as the local backend enforces it: once only the answer's tail fits in `max_new_tokens`, the
    next token must hold the "<" that closes the edit, even in the middle of a line (whose last line break the
    regex lets it skip), and the rest of the answer still fits."""
    from dreamgym.experience.checkpoint import load_checkpoint_tokenizer
    from dreamgym.llm.grammar import Grammars
    from em_helpers import trained_dial_model

    tok = load_checkpoint_tokenizer(trained_dial_model())
    grammars = Grammars(tok, len(tok))
    prefix = tok("<think>x</think>\n<edit>\n- [dial] 3\n+ [dial", add_special_tokens=False)["input_ids"]
    tail = len("</state>\n<reward>1</reward>\n<done>false</done>")
    row = grammars.row(output_constraint(EDIT), len(prefix) + tail)
    assert all(row.accept(t) for t in prefix)
    mask = grammars.bitmask(1)
    row.fill(mask, 0)
    allowed = [t for t in range(len(tok)) if (int(mask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed and all("<" in tok.decode([t]) for t in allowed) and row.forced == 1
    rest = tok("</edit>\n<reward>0</reward>\n<done>false</done>", add_special_tokens=False)["input_ids"]
    assert all(row.accept(t) for t in rest) and len(rest) <= tail
    parsed, _ = parse_completion(tok.decode(prefix + rest))
    assert parsed is not None and parsed.edit == [("-", "[dial] 3"), ("+", "[dial")]


# ------------------------------------------------------------------------------------- prediction and failure


def _answer_edit(edit: str) -> str:
    return format_edit_completion(edit, 0.0, False, "The dial moves.")


def test_an_insertion_repeated_in_a_loop_is_dropped_counted_and_never_a_training_target():
    """A greedy decoding loop (`+ X` many times over) applies as one insertion of X and is counted; a recorded change
    that inserts a line twice in a row is trained on as the whole state, so the rule never drops a real line."""
    loop = _answer_edit("- [dial] 3\n" + "+ [dial] 4\n" * 6 + "+ [dial] 4 \n")  # a re-spaced copy is a new line
    m = ExperienceModel(FakeLLM([loop]), config=dataclasses.replace(EDIT, retries=0, k=0), env="dial")
    (p,) = m.predict([dial_query(3, "turn up")])
    assert not p.failed and p.next_state.startswith("[dial] 4\n[dial] 4 \n[button] turn up")
    assert m.stats["repeated_insertions"] == 5 and m.stats["malformed"] == 0
    assert repeated_insertions([("+", "a"), ("=", "a"), ("+", "a"), ("+", "a"), ("-", "b"), ("-", "b")]) == [3]
    twice = "[page] p\n[1] item 'x'\n[1] item 'x'\n[2] button 'OK'"
    tr = Transition(task=dial_query(3, "x").task, history=[], state="[page] p\n[2] button 'OK'", action="add",
                    next_state=twice, reward=0.0, done=False)
    assert repeated_insertions(derive_edit(tr.state, twice)) and written_edit(tr, EDIT) is None
    assert "<state>" in target_completion(tr, EDIT)


def test_an_inapplicable_edit_is_retried_then_becomes_the_failure_state_and_is_counted():
    good = _answer_edit("- [dial] 3\n+ [dial] 4\n")
    bad = _answer_edit("- [dial] 7\n+ [dial] 8\n")  # the dial is at 3: there is no line "[dial] 7"
    llm = FakeLLM(lambda req: bad if "Action: submit" in req[-1]["content"] else good)
    m = ExperienceModel(llm, config=dataclasses.replace(EDIT, retries=1, k=0), env="dial")
    ok, fail = m.predict([dial_query(3, "turn up"), dial_query(3, "submit")])
    assert not ok.failed and ok.next_state == "[dial] 4\n[button] turn up\n[button] turn down\n[button] submit"
    assert fail.failed and fail.next_state == FAILURE_STATE and fail.reward == 0.0 and fail.done is True
    assert fail.error.startswith("edit does not apply: operation 1 (-) names a line not in the state")
    assert fail.attempts == 2 and fail.text == bad
    assert m.stats["inapplicable_edits"] == 2 and m.stats["malformed"] == 2 and m.stats["retries"] == 1
    assert m.stats["failures"] == 1 and m.stats["predictions"] == 2
    # An edit that removes every line leaves no state: malformed too.
    (empty,) = ExperienceModel(FakeLLM([_answer_edit("- [dial] 3\n- [button] turn up\n- [button] turn down\n"
                                                     "- [button] submit\n")]),
                               config=dataclasses.replace(EDIT, retries=0, k=0), env="dial").predict(
        [dial_query(3, "turn up")])
    assert empty.failed and empty.error == "edit does not apply: the edit leaves an empty state"


def test_the_synthetic_environment_steps_on_applied_edits_and_ends_on_an_inapplicable_one():
    from dreamgym.envs import dial
    from dreamgym.dream.synthetic_env import SyntheticEnv
    from dreamgym.types import Task

    def answer(req):
        user = req[-1]["content"]
        v = dial.parse_state(user.rsplit("State:\n", 1)[1])
        if user.endswith("Action: turn up"):
            return _answer_edit(f"- [dial] {v}\n+ [dial] {v + 1}\n")
        return _answer_edit("- [dial] 9\n")  # a line that is not there

    model = ExperienceModel(FakeLLM(answer), config=dataclasses.replace(EDIT, retries=0, k=0), env="dial")
    env = SyntheticEnv(model, add_to_buffer=False)
    task = Task(id="dial-2-4", env="dial", instruction="set the dial to 4 and press submit", goal={"target": 4, "start": 2})
    obs, _ = env.reset(options={"task": task})
    obs, r, term, trunc, info = env.step("turn up")
    assert dial.parse_state(obs) == 3 and obs == dial.abstract_state(3) and not (term or trunc)
    assert info["em_failure"] is False
    obs, r, term, trunc, info = env.step("turn down")
    assert info["em_failure"] is True and trunc and not term and r == 0.0
    assert "edit does not apply" in info["em_error"] and env.stats["em_failures"] == 1


def test_fidelity_scores_the_whole_next_state_after_the_edit_and_counts_an_inapplicable_one():
    from dreamgym.envs import dial
    from dreamgym.experience.fidelity import teacher_forced

    steps = [t for t in em_transitions(dial_trajectories(4)) if t.action != RESET_ACTION][:12]

    def answer(req):  # the true edit for "turn up", an inapplicable one for everything else
        user = req[-1]["content"]
        v = dial.parse_state(user.rsplit("State:\n", 1)[1])
        if user.endswith("Action: turn up"):
            return _answer_edit(f"- [dial] {v}\n+ [dial] {min(v + 1, 9)}\n")
        return _answer_edit("- no such line\n")

    m = ExperienceModel(FakeLLM(answer), config=dataclasses.replace(EDIT, retries=0, k=0), env="dial")
    res = teacher_forced(m, steps)
    ups = sum(t.action == "turn up" for t in steps)
    assert 0 < ups < len(steps)
    assert res["failures"] == len(steps) - ups == m.stats["inapplicable_edits"]
    assert res["by_action"]["turn"]["n"] >= ups
    assert res["state_em"] == pytest.approx(ups / len(steps))  # exact on the full state where the edit applied


# ------------------------------------------------------------------------------------------ config and prompts


def test_state_format_is_validated_saved_and_old_checkpoints_decode_whole():
    with pytest.raises(ConfigError, match="state_format"):
        from_dict(ExperienceModelConfig, {"state_format": "diff"})
    assert from_dict(ExperienceModelConfig, {"state_format": "edit"}).state_format == "edit"
    assert checkpoint_model_config({"model": {}}).state_format == "whole"  # before the field: whole states
    saved = {"model": dataclasses.asdict(EDIT)}
    assert checkpoint_model_config(json.loads(json.dumps(saved))).state_format == "edit"


def test_retrieved_examples_show_their_edit_and_the_prompt_shrinks_on_a_miniwob_step(tiny_tokenizer):
    trs = [t for t in miniwob_steps() if t.action != RESET_ACTION and written_edit(t, EDIT)]
    query = trs[0]
    examples = trs[1:3]
    whole_cfg = dataclasses.replace(EDIT, state_format="whole")

    def tokens(text: str) -> int:
        return len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])

    ex = render_example(1, examples[0], EDIT)
    assert "<edit>\n" in ex and "<state>" not in ex and written_edit(examples[0], EDIT).splitlines()[0] in ex
    prompt = {c.state_format: build_request(query, examples, c)[-1]["content"] for c in (EDIT, whole_cfg)}
    target = {c.state_format: target_completion(query, c) for c in (EDIT, whole_cfg)}
    assert prompt["edit"].count("<edit>") == 2 and prompt["whole"].count("<state>") == 2
    assert tokens(prompt["edit"]) < tokens(prompt["whole"])
    assert tokens(target["edit"]) < tokens(target["whole"])


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    from dreamgym.llm.presets import resolve

    return AutoTokenizer.from_pretrained(str(resolve("tiny")))


# ------------------------------------------------------------------------------------------------ tiny models


@pytest.fixture(scope="module")
def tiny():
    from dreamgym.llm.hf import HFBackend

    return HFBackend.from_preset("tiny", device="cpu")


def _named_outside(pred_text: str, query: Transition, cfg: ExperienceModelConfig) -> list[str]:
    """The lines an answer's edit names with `-` or `=` that the query's state does not hold."""
    parsed, _ = parse_completion(pred_text)
    lines = set(state_lines(query.state))
    return [line for op, line in (parsed.edit or []) if op != "+" and line not in lines] if parsed else []


def test_structured_decoding_closes_an_edit_in_time_on_real_miniwob_steps_in_process_and_over_http(tiny):
    """The untrained tiny preset sampled at temperature 1.5 with tight budgets, in the edit format, each request
    decoded under its own state's grammar, in process and through `dreamgym serve-model`: every answer matches its
    query's regex (a budget may close an edit mid-line, or once a named line is whole) and parses; an edit names only
    lines of its page, so the only malformed ones are edits naming them out of the cursor's order, each counted."""
    from dreamgym.llm.http import HTTPTokenBackend
    from dreamgym.llm.server import start_server

    steps = [t for t in miniwob_steps() if t.action != RESET_ACTION][:8]
    cfg = dataclasses.replace(EDIT, temperature=1.5, retries=0, k=0, max_new_tokens=96, max_think_tokens=16)
    local = ExperienceModel(tiny, config=cfg, env="miniwob")
    with start_server(tiny, model_name="tiny") as server:
        remote_llm = HTTPTokenBackend([server.url], tiny.tokenizer, served_model="tiny")
        try:
            remote = ExperienceModel(remote_llm, config=cfg, env="miniwob")
            for m in (local, remote):
                preds = m.predict(steps, seed=3)
                for q, p in zip(steps, preds):
                    assert re.fullmatch(output_regex(cfg, edit_named_lines(q, cfg)), p.text), p.text
                    assert parse_completion(p.text)[0] and not _named_outside(p.text, q, cfg), p.text
                assert m.stats["malformed"] == m.stats["inapplicable_edits"] == m.stats["failures"] == \
                    sum(p.failed for p in preds)
                assert m.stats["edit_constraint_fallbacks"] == 0
        finally:
            remote_llm.close()


def _sample_line(llm, grammars, prompt: list[int], regex_constraint, seed: int, longest: int) -> str:
    """The line the model writes after `<edit>\n- ` under `regex_constraint`, sampled at temperature 1.5 token by
    token from the model's masked logits (the in-process backend's masking: `Grammars.row`, `fill`, `apply`); cut
    once longer than `longest` characters (then it is no line of the state)."""
    import torch

    opening = llm.tokenizer("<edit>\n- ", add_special_tokens=False)["input_ids"]
    row = grammars.row(regex_constraint, 512)
    assert all(row.accept(t) for t in opening)
    ids, out = list(prompt) + opening, []
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        for _ in range(80):
            logits = llm.model(torch.tensor([ids])).logits[:, -1, :].float()
            mask = grammars.bitmask(1)
            row.fill(mask, 0)
            probs = torch.softmax(grammars.apply(logits, mask, [0]) / 1.5, dim=-1)
            token = int(torch.multinomial(probs[0], 1, generator=gen))
            assert row.accept(token)
            ids.append(token)
            out.append(token)
            text = llm.tokenizer.decode(out)
            if "\n" in text or "<" in text or len(text) > longest:
                break
    return text.split("\n")[0].split("<")[0]


def test_a_removal_the_tiny_model_writes_under_its_states_grammar_names_a_line_of_that_state(tiny):
    """A real model (the untrained tiny preset) opening a `-` line on real MiniWoB++ pages: under the query state's
    own grammar the line it writes is one of the page's lines, every time; under the generic grammar (before this
    constraint) it writes lines the page lacks, which cannot apply (the 66 of 100 held-out edits at step 400)."""
    from dreamgym.llm.grammar import Grammars

    cfg = dataclasses.replace(EDIT, k=0, use_reasoning=False)
    grammars = Grammars(tiny.tokenizer, int(tiny.model.config.vocab_size))
    steps = [t for t in miniwob_steps() if t.action != RESET_ACTION][::4][:5]
    outside_generic = 0
    for i, q in enumerate(steps):
        prompt = tiny.prompt_ids(build_request(q, [], cfg))
        named = edit_named_lines(q, cfg)
        longest = max(map(len, named))
        own = _sample_line(tiny, grammars, prompt, output_constraint(cfg, named), i, longest)
        assert own in named and own in state_lines(q.state), own
        outside_generic += _sample_line(tiny, grammars, prompt, output_constraint(cfg), i, longest) not in named
    assert outside_generic >= len(steps) - 1, outside_generic


def test_each_request_carries_its_own_states_grammar_and_a_page_too_long_falls_back_counted():
    """Under the edit format a call gets one `SamplingParams` per request, each constrained to its query's state;
    a state whose alternation would pass `MAX_NAMED_CHARS` is decoded under the generic body, counted; the whole
    format keeps one shared `SamplingParams`."""
    long_page = "\n".join(f"[{i}] StaticText '" + "w" * 60 + "'" for i in range(MAX_NAMED_CHARS // 60))
    queries = [dial_query(3, "turn up"), dial_query(5, "turn down"), dataclasses.replace(dial_query(1, "x"),
                                                                                         state=long_page)]
    llm = FakeLLM([_answer_edit("")])
    m = ExperienceModel(llm, config=dataclasses.replace(EDIT, k=0, retries=0), env="dial")
    preds = m.predict(queries)
    assert not any(p.failed for p in preds)
    (params,) = llm.params
    regexes = [p.constraint.regex for p in params]
    assert "- \\[dial\\] 3" not in regexes[0] and r"\[dial\] 3" in regexes[0] and r"\[dial\] 5" in regexes[1]
    assert r"\[dial\] 3" not in regexes[1] and regexes[2] == output_regex(m.config)
    assert m.stats["edit_constraint_fallbacks"] == 1
    whole = FakeLLM([format_completion("[dial] 4", 0.0, False, "up")])
    ExperienceModel(whole, config=dataclasses.replace(EDIT, state_format="whole", k=0), env="dial").predict(queries)
    assert len({id(p) for p in whole.params[0]}) == 1


def test_a_tiny_model_trained_a_few_steps_on_edits_is_decoded_as_edits_and_its_answers_parse(tmp_path):
    """30 steps on real dial data in the edit format (every step's target an edit: the dial's line changes). The
    checkpoint keeps the format, so the loaded model decodes edits (greedy, the untrained preset opens `<state>`
    on every step); each answer parses, and each one either applies to the query's state, giving a whole dial state,
    or is the failure state and counted."""
    from dreamgym.envs import dial
    from dreamgym.experience.train import TrainEMConfig, train_em
    from dreamgym.trainers.common import OptimConfig

    em = dataclasses.replace(EDIT, k=0, use_retrieval=False, use_reasoning=False, max_new_tokens=48)
    trajs = dial_trajectories(30)
    assert all(written_edit(t, em) is not None for t in em_transitions(trajs) if t.action != RESET_ACTION)
    cfg = TrainEMConfig(env="dial", data="unused", out=str(tmp_path / "em"), max_steps=30, batch_size=8, em=em,
                        optim=OptimConfig(lr=3e-3, warmup_steps=5), threads=1, task_writing=0, save_every=0)
    train_em(cfg, trajectories=trajs)
    m = ExperienceModel.load(tmp_path / "em", device="cpu", config_overrides=["retries=0"])
    assert m.config.state_format == "edit"
    queries = [t for t in em_transitions(dial_trajectories(4, split="test")) if t.action != RESET_ACTION][:12]
    preds = m.predict(queries)
    assert all(re.fullmatch(output_regex(m.config), p.text) and parse_completion(p.text)[0] for p in preds)
    assert all(p.text.startswith("<edit>\n") for p in preds)
    for p in preds:
        assert p.failed or (dial.parse_state(p.next_state) is not None and p.next_state.endswith("[button] submit"))
    assert sum(p.failed for p in preds) == m.stats["inapplicable_edits"] == m.stats["failures"]
