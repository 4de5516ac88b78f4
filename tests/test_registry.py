"""The environment-family registry: `EnvFamily`, `family`/`family_names`/`register_family`, families of other
packages found through the `dreamgym.envs` entry point (a real `importlib.metadata` lookup of a temporary
`*.dist-info`), the gymnasium ids, and `check_family` on every built-in family and on a broken one."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import gymnasium
import pytest

from dreamgym.commands.collect import collect
from dreamgym.envs import (CheckFamilyError, EnvFamily, FamilyHooks, FamilyImportError, UnknownFamilyError,
                           check_family, family, family_names, register_family)
from dreamgym.envs.dial import ACTIONS, DialEnv
from plugins import dist_info as _dist_info

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
BUILTIN = ("dial", "webshop", "alfworld", "textworld")


@pytest.fixture
def lamps_installed(tmp_path, monkeypatch):
    """The fixture package `familypkg` installed as a user's package would be: importable, with its entry point."""
    _dist_info(tmp_path / "site", {"lamps": "familypkg.lamps"})
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def _python(code: str, *paths: Path) -> subprocess.CompletedProcess:
    env_path = ":".join([str(ROOT), *map(str, paths)])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


# ----------------------------------------------------------------------------------------------- the registry


def test_builtin_families_are_listed_first_and_load_as_env_families():
    assert family_names()[:4] == BUILTIN
    dial = family("dial")
    assert isinstance(dial, EnvFamily) and dial is family("dial") and dial.name == "dial"
    assert {t.env for t in dial.tasks("train")} == {"dial"} and dial.make_env("test").tasks == dial.tasks("test")
    assert set(dial.POLICIES) >= {"oracle", "noisy", "random"}


def test_a_family_module_s_hook_functions_are_its_hooks_and_a_missing_one_is_the_default():
    dial, ws = family("dial"), family("webshop")
    from dreamgym.envs import webshop

    assert ws.hooks.noop_state("[page] search", "click[x]") == webshop.noop_state("[page] search", "click[x]")
    assert ws.hooks.grounds_outcomes and ws.hooks.writes_observations and "canonical_state" not in ws.hooks.defined
    assert ws.hooks.defined == {"corpus_text", "grounded_outcome", "model_observation", "noop_state", "state_after",
                                "hidden_outcome_key", "determined_outcome"}
    # The dial defines no hook: every call is the generic behaviour.
    task = dial.tasks("train")[0]
    assert dial.hooks.defined == frozenset() and not dial.hooks.grounds_outcomes
    assert dial.hooks.noop_state("[dial] 3", "dance") is None and dial.hooks.corpus_text() is None
    assert dial.hooks.canonical_state("[dial] 3") == dial.hooks.model_state("[dial] 3") == "[dial] 3"
    assert dial.hooks.complete_state("w", "prev") == dial.hooks.state_after("prev", "w") == "w"
    assert dial.hooks.grounded_outcome(task, "a", "b", "c") is None
    assert dial.hooks.hidden_outcome_key(task, "a", "b") is dial.hooks.determined_outcome(task, "a", "b") is None
    assert dial.hooks.outcome_contradiction(task, "a", "b", "c") == ""


def test_a_family_written_as_a_class_overrides_only_the_hooks_it_has():
    class NoopOnly(FamilyHooks):
        def noop_state(self, state: str, action: str) -> str:
            return state + "\nNothing happens."

    dial = family("dial")
    fam = dataclasses.replace(dial, hooks=NoopOnly())
    assert fam.hooks.defined == {"noop_state"} and fam.hooks.noop_state("s", "a") == "s\nNothing happens."
    assert fam.hooks.model_state("s") == "s" and not fam.hooks.grounds_outcomes  # the rest: defaults
    with pytest.raises(CheckFamilyError) as e:  # the dial shows no such line after an action it cannot carry out
        check_family(fam)
    assert {c for c, n in e.value.report.disagreements.items() if n} == {"noop_state"}


def test_env_family_rejects_unknown_hooks_a_bad_step_limit_and_is_immutable():
    dial = family("dial")
    with pytest.raises(ValueError, match="unknown hooks \\['noop_sate'\\]"):
        FamilyHooks.of({"noop_sate": len})
    with pytest.raises(ValueError, match="unknown hooks \\['noop_sate'\\]"):
        type("Typo", (FamilyHooks,), {"noop_sate": lambda self, s, a: s})
    with pytest.raises(TypeError, match="hooks must be a FamilyHooks"):
        dataclasses.replace(dial, hooks={"noop_state": len})
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="MAX_STEPS must be an int >= 1"):
            dataclasses.replace(dial, MAX_STEPS=bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        dial.tasks = None


def test_a_family_module_without_a_step_limit_is_refused(tmp_path, monkeypatch):
    sys.path.insert(0, str(FIXTURES))
    try:
        from familypkg import lamps
    finally:
        sys.path.remove(str(FIXTURES))
    monkeypatch.delattr(lamps, "MAX_STEPS")
    with pytest.raises(TypeError, match="'lamps' .* lacks MAX_STEPS"):
        EnvFamily.from_module("lamps", lamps)


@pytest.mark.parametrize("module, env_default", [
    ("dreamgym.envs.dial", "dreamgym.envs.dial:DialEnv"),
    ("dreamgym.envs.webshop", "dreamgym.envs.webshop.env:WebShopEnv"),
    ("dreamgym.envs.alfworld", "dreamgym.envs.alfworld.env:ALFWorldEnv"),
    ("dreamgym.envs.textworld_env", "dreamgym.envs.textworld_env:TextWorldEnv"),
    ("dreamgym.envs.web.miniwob", "dreamgym.envs.web.miniwob:make_env"),
    ("dreamgym.envs.web.webarena", "dreamgym.envs.web.webarena:make_env"),
])
def test_each_shipped_family_s_step_limit_is_its_real_environment_s(module, env_default):
    """The limit a dream of the family runs to is the one its real environment enforces by default (before the
    contract had it, the synthetic environment read the real environment's `max_steps`: the same numbers)."""
    import importlib
    import inspect

    mod = importlib.import_module(module)
    where, name = env_default.split(":")
    default = inspect.signature(getattr(importlib.import_module(where), name)).parameters["max_steps"].default
    assert mod.MAX_STEPS == default == {"dial": 12, "webshop": 15, "alfworld": 50, "textworld_env": 50,
                                        "miniwob": 10, "webarena": 30}[module.rsplit(".", 1)[1]]


def test_unknown_name_and_conflicting_registrations_are_errors():
    with pytest.raises(UnknownFamilyError, match="unknown environment family 'nope'; known: dial, webshop") as e:
        family("nope")
    assert isinstance(e.value, ValueError)  # what callers that skip unknown families catch
    register_family("dial", "dreamgym.envs.dial")  # the same registration again: nothing happens
    with pytest.raises(ValueError, match="'dial' is already registered"):
        register_family("dial", "somewhere.else")
    with pytest.raises(ValueError, match="env_entry_point needs a gym_id"):
        register_family("orphan", "somewhere.else", env_entry_point="somewhere.else:Env")
    with pytest.raises(ValueError, match="identifier"):
        register_family("not a name", "somewhere.else")
    assert "orphan" not in family_names()


# ----------------------------------------------------------------------------- a family from another package


def test_a_package_adds_a_family_through_its_entry_point(lamps_installed):
    assert "lamps" in family_names()
    lamps = family("lamps")
    assert lamps.name == "lamps" and sorted(lamps.hooks.defined) == ["grounded_outcome", "noop_state"]
    assert lamps.MAX_STEPS == 6
    check_family("lamps")
    env = gymnasium.make("dreamgym/Lamps-v0", split="test")  # the id it got when it was discovered
    obs, info = env.reset(seed=0)
    assert info["task"].split == "test" and obs.startswith("Your task is to: light only the")


def test_collect_plays_a_family_of_another_package(lamps_installed, tmp_path):
    out = tmp_path / "lamps.jsonl"
    summary = collect("lamps", {"oracle": 0.5, "noisy": 0.25, "random": 0.25}, episodes=12, out_path=out,
                      progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 12 and {r["task"]["env"] for r in records} == {"lamps"}
    assert summary["per_policy"]["oracle"]["success_rate"] == 1.0
    assert all(1 <= len(r["steps"]) <= 6 for r in records)


def test_a_family_that_fails_to_import_is_named_never_skipped(tmp_path):
    _dist_info(tmp_path, {"broken": "familypkg.does_not_exist", "lamps": "familypkg.lamps"})
    run = _python("""
        from dreamgym.envs import FamilyImportError, family, family_names
        assert family_names()[-2:] == ("broken", "lamps"), family_names()  # listing imports nothing
        try:
            family("broken")
        except FamilyImportError as e:
            assert isinstance(e, ImportError) and isinstance(e.__cause__, ModuleNotFoundError)
            print(e)
        assert family("lamps").name == "lamps"  # a broken neighbour does not hide the others
    """, tmp_path, FIXTURES)
    assert run.returncode == 0, run.stderr
    assert ("environment family 'broken' (entry point broken = familypkg.does_not_exist of package familypkg) failed "
            "to import: ModuleNotFoundError") in run.stdout
    assert FamilyImportError.__mro__[1] is ImportError


def test_an_entry_point_taking_a_builtin_name_is_an_error_of_that_name_only(tmp_path):
    """Both sources are named when the name is used; listing and the other families are untouched (issue 69, 3: the
    listing raised, so every command of every family failed in a traceback)."""
    _dist_info(tmp_path, {"dial": "familypkg.lamps", "lamps": "familypkg.lamps"})
    run = _python("""
        from dreamgym.envs import FamilyImportError, family, family_names
        assert family_names()[:2] == ("dial", "webshop") and "lamps" in family_names()
        assert family("lamps").name == "lamps"
        try:
            family("dial")
        except FamilyImportError as e:
            print(e)
    """, tmp_path, FIXTURES)
    assert run.returncode == 0, run.stderr
    assert "'dial' is already registered (register_family: 'dreamgym.envs.dial')" in run.stdout
    assert "entry point dial = familypkg.lamps of package familypkg" in run.stdout


_BROKEN_MODULES = {
    "raises": ('raise RuntimeError("boom at import")\n', "failed to import: RuntimeError: boom at import"),
    "syntax": ("def f(:\n", "failed to import: SyntaxError: invalid syntax"),
    "exits": ("import sys\nsys.exit(3)\n", "failed to import: SystemExit: 3"),
    "hookless": ("X = 1\n", "cannot be used: environment family 'hookless' (badfams.hookless) lacks make_env"),
}


def test_a_family_package_that_fails_at_import_is_one_line_exit_2_and_the_others_keep_working(tmp_path):
    """Issue 69, 3: a family module that raises, has a syntax error, calls sys.exit(3) or lacks its hooks, and a
    package re-registering `dial`: `check-family` and `collect` said it in a traceback (or, for sys.exit(3), exited
    3 with no output). Now each is one line naming the family, its entry point and package, exit 2; `lamps` and the
    built-in families of the same install still run."""
    pkg = tmp_path / "badfams"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, (code, _) in _BROKEN_MODULES.items():
        (pkg / f"{name}.py").write_text(code)
    _dist_info(tmp_path, {name: f"badfams.{name}" for name in _BROKEN_MODULES} | {"dial": "badfams.hookless"},
               name="badfams")
    _dist_info(tmp_path / "other", {"lamps": "familypkg.lamps"})
    env = {"PYTHONPATH": ":".join(map(str, (ROOT, tmp_path, tmp_path / "other", FIXTURES))), "PATH": "/usr/bin:/bin",
           "HF_HUB_OFFLINE": "1"}

    def dreamgym(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dreamgym.cli", *argv], capture_output=True, text=True,
                              timeout=300, env=env)

    expected = {name: words for name, (_, words) in _BROKEN_MODULES.items()}
    expected["dial"] = "'dial' is already registered (register_family: 'dreamgym.envs.dial'); entry point dial = " \
                       "badfams.hookless of package badfams"
    for name, words in expected.items():
        for argv in (["check-family", "--env", name], ["collect", "--env", name, "--episodes", "1", "--out",
                                                       str(tmp_path / "out.jsonl")]):
            run = dreamgym(*argv)
            assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, \
                (argv, run.returncode, run.stderr)
            assert f"dreamgym {argv[0]}: " in run.stderr and words in run.stderr, (argv, run.stderr)
            if name != "dial":
                assert f"entry point {name} = badfams.{name} of package badfams" in run.stderr, run.stderr
    assert not (tmp_path / "out.jsonl").exists()
    ok = dreamgym("collect", "--env", "lamps", "--episodes", "2", "--out", str(tmp_path / "lamps.jsonl"))
    assert ok.returncode == 0, ok.stderr
    assert len((tmp_path / "lamps.jsonl").read_text().splitlines()) == 2


# ------------------------------------------------------------------------------------- gymnasium, import cost


def test_import_dreamgym_registers_the_gym_ids_and_imports_no_family():
    run = _python("""
        import sys
        import gymnasium
        import dreamgym
        heavy = [m for m in sys.modules if m.startswith(("dreamgym.envs.webshop", "dreamgym.envs.alfworld",
                 "dreamgym.envs.dial", "dreamgym.envs.textworld_env", "torch", "transformers"))]
        assert not heavy, heavy
        assert {"dreamgym/Dial-v0", "dreamgym/WebShop-v0", "dreamgym/ALFWorld-v0", "dreamgym/TextWorld-v0"} <= \\
            set(gymnasium.registry)
        env = gymnasium.make("dreamgym/Dial-v0")
        print(env.reset(seed=3)[0])
    """)
    assert run.returncode == 0, run.stderr
    assert "The dial shows" in run.stdout


def test_import_dreamgym_registers_the_gym_ids_of_entry_point_families_by_one_rule(tmp_path):
    """An installed family has its gymnasium id right after `import dreamgym`, before anything asks the registry,
    named by the same rule as the built-in ones; a broken neighbour does not break the import."""
    _dist_info(tmp_path, {"lamps": "familypkg.lamps", "grid_world": "familypkg.lamps:NO_SUCH_FAMILY",
                          "dial": "familypkg.lamps", "not-a-name": "familypkg.lamps"})
    run = _python("""
        import re
        import gymnasium
        import dreamgym
        from gymnasium.utils.env_checker import check_env
        from dreamgym.envs import registry
        assert registry.gym_id_of("lamps") == "dreamgym/Lamps-v0" and registry.gym_id_of("dial") == "dreamgym/Dial-v0"
        assert registry.gym_id_of("grid_world") == "dreamgym/GridWorld-v0"
        ids = sorted(i for i in gymnasium.registry if i.startswith("dreamgym/"))
        print(ids)
        assert "dreamgym/Lamps-v0" in ids and "dreamgym/GridWorld-v0" in ids
        assert all(re.fullmatch(r"dreamgym/[A-Z][A-Za-z0-9]*-v0", i) for i in ids), ids  # one rule for all
        env = gymnasium.make("dreamgym/Lamps-v0", split="test")
        check_env(env.unwrapped)
        print(type(env.unwrapped).__name__, env.reset(seed=0)[0])
        assert "dial" in registry.family_names()  # listing never raises for a broken entry point
        try:
            registry.family("dial")
        except registry.FamilyImportError as e:
            print("dial:", e)
    """, tmp_path, FIXTURES)
    assert run.returncode == 0, run.stderr
    assert "LampsEnv Your task is to: light only the" in run.stdout
    assert "dial: environment family 'dial' is already registered" in run.stdout


# What a registered id needs to run, where that is more than this package: a check is skipped only for want of it.
_NEEDS = {"dreamgym/ALFWorld-v0": "alfworld", "dreamgym/TextWorld-v0": "textworld", "dreamgym/MiniWoB-v0": "chromium",
          "dreamgym/WebArenaLite-v0": "the WebArena sites"}
# Arguments to `gymnasium.make` beyond the id's defaults, where those defaults cost time the check does not need:
# TextWorld's default pool is 20 generated games (~2 s each on a fresh cache) while check_env plays one; its first
# two are the ones the other TextWorld tests generate too.
_MAKE_KWARGS = {"dreamgym/TextWorld-v0": {"n": 2}}


@pytest.mark.parametrize("env_id", sorted(i for i in gymnasium.registry if i.startswith("dreamgym/")))
def test_every_registered_id_passes_gymnasiums_check_env(env_id):
    need = _NEEDS.get(env_id)
    if need == "the WebArena sites":
        pytest.skip("WebArena-Lite runs on its self-hosted sites (docs/web.md), never offline")
    if need == "chromium":
        from dreamgym.envs.web.browser import chromium_available

        if not chromium_available():
            pytest.skip("no Chromium (apt-get install chromium, or set $DREAMGYM_CHROMIUM)")
    elif need is not None:
        pytest.importorskip(need)
    from gymnasium.utils.env_checker import check_env

    env = gymnasium.make(env_id, **_MAKE_KWARGS.get(env_id, {}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)  # raises AssertionError naming the broken rule
    env.close()
    assert not [str(w.message) for w in caught if "WARN" in str(w.message)]


def test_every_id_keeps_gymnasiums_passive_checker():
    env = gymnasium.make("dreamgym/Dial-v0")
    assert isinstance(env, gymnasium.wrappers.PassiveEnvChecker) and not env.spec.disable_env_checker
    obs, info = env.reset(seed=3)
    assert env.step("turn up")[1:4] == (0.0, False, False)


def test_gymnasium_make_with_the_module_prefix_needs_no_import():
    """gymnasium >= 1.0 has no plugin entry points; "module:id" makes it import the module that registers the id."""
    run = _python("""
        import sys
        import gymnasium
        assert "dreamgym" not in sys.modules
        env = gymnasium.make("dreamgym:dreamgym/Dial-v0")
        print(type(env.unwrapped).__name__, env.reset(seed=3)[0])
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("DialEnv ") and "The dial shows" in run.stdout


# ----------------------------------------------------------------------------------------------- check_family


def test_check_family_dial_and_webshop():
    check_family("dial")
    check_family(family("webshop"))


def test_check_family_alfworld():
    pytest.importorskip("alfworld")
    # Its "test" split is both valid splits in full (274 planner-checked games on first use); valid_unseen is
    # the same code on 6 of them.
    check_family("alfworld", splits=("train", "valid_unseen"), task_kwargs={"n": 6}, env_kwargs={"n": 6})


def test_check_family_textworld():
    pytest.importorskip("textworld")
    check_family("textworld", task_kwargs={"n": 2}, env_kwargs={"n": 2})


@pytest.mark.parametrize("change, rule", [
    (dict(tasks=lambda split, **kw: []), "tasks('train') must be a non-empty list"),
    (dict(POLICIES={}), "POLICIES must be a non-empty mapping"),
    (dict(explain=lambda tr: None), "explain must return a str"),
    (dict(admissible_from_state=lambda s: "done"), "admissible_from_state must return a list of str"),
    (dict(hooks=FamilyHooks.of({"noop_state": lambda s, a: None})), "noop_state must return a str"),
    (dict(hooks=FamilyHooks.of({"grounded_outcome": lambda *a: 1.0})),
     "grounded_outcome must return (reward, terminated) or None"),
    (dict(hooks=FamilyHooks.of({"model_state": lambda s: s})), "hooks model_state and complete_state come together"),
    (dict(MAX_STEPS=1), "its hooks disagree with the real environment"),  # each behaviour check: tests/envs/test_check.py
])
def test_check_family_names_the_broken_rule(change, rule):
    sys.path.insert(0, str(FIXTURES))
    try:
        from familypkg import lamps
    finally:
        sys.path.remove(str(FIXTURES))
    good = EnvFamily.from_module("lamps", lamps)
    check_family(good)
    with pytest.raises(CheckFamilyError, match=f"environment family 'lamps': {rule}".replace("(", "\\(")
                       .replace(")", "\\)").replace("[", "\\[")):
        check_family(dataclasses.replace(good, **change))


def test_check_family_runs_check_env_on_make_env():
    dial = family("dial")
    with pytest.raises(CheckFamilyError, match=r"'dial': make_env\('train'\) fails check_env: .*step\('xyzzy plugh'\) "
                                               r"raised ValueError"):
        check_family(dataclasses.replace(dial, make_env=lambda split, **kw: _StrictDial(split)))


class _StrictDial(DialEnv):
    """Breaks the TextEnv contract: an action it cannot carry out raises instead of getting an observation."""

    def _step(self, action: str):
        if action not in ACTIONS:
            raise ValueError(f"no such action {action!r}")
        return super()._step(action)


@pytest.mark.slow
def test_a_family_of_another_package_trains_an_experience_model_and_a_dream_grpo_iteration(lamps_installed, tmp_path):
    """The whole method on a family that lives outside `dreamgym/`: real data, an experience model trained on it,
    and a GRPO iteration inside that model, with no edit to the package (the family arrives by entry point)."""
    from dreamgym.experience import EM_CONFIG_FILE
    from dreamgym.experience.train import main as train_em_main
    from dreamgym.commands.train import main as train_main

    data = tmp_path / "lamps.jsonl"
    collect("lamps", {"oracle": 0.5, "noisy": 0.3, "random": 0.2}, episodes=24, out_path=data, split="train", seed=0,
            progress=False)
    em = tmp_path / "em"
    assert train_em_main(["--env", "lamps", "--data", str(data), "--out", str(em), "max_steps=30", "batch_size=4",
                          "em.embedder=hashing", "em.max_new_tokens=96", "task_writing=0", "threads=1",
                          "save_every=30", "log_every=10"]) == 0
    assert (em / EM_CONFIG_FILE).is_file()
    # A policy that writes actions, so that the dream's episodes reach the experience model (a random-init policy's
    # text parses as no action, and such an episode ends before its first synthetic step).
    agent = ["agent.history=0", "rollout.max_episode_steps=4", "rollout.max_new_tokens=12", "rollout.temperature=0.3",
             "tensorboard=false"]
    sft = tmp_path / "sft"
    assert train_main(["--algo", "sft", "--env", "lamps", "--no-progress", f"run_dir={sft}", f"data={data}",
                       "sft.epochs=6", "optim.lr=1e-3", "eval_at_start=false", "eval_max_tasks=2", *agent]) == 0
    run = tmp_path / "dream"
    assert train_main(["--algo", "grpo", "--env", "lamps", "--no-progress", f"run_dir={run}", f"init={sft / 'final'}",
                       "mode=dream",
                       f"dream.em={em}", "dream.iterations=1", "dream.curriculum.enabled=false",
                       "group_size=2", "tasks_per_iteration=2", "eval_at_start=false", "eval_max_tasks=2",
                       *agent]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["real_steps_used"] == 0  # a dream iteration takes no real step
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    dream = next(r for r in rows if "dream/buffer/size" in r)
    assert dream["dream/em/generate_calls"] >= 1  # the experience model answered the policy's actions
    assert (run / "final").is_dir()


def _cli(*args: str, paths: tuple[Path, ...], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m dreamgym.cli ARGS` as a user runs it, with `paths` (an installed package) importable."""
    env_path = ":".join([str(ROOT), *map(str, paths)])
    return subprocess.run([sys.executable, "-m", "dreamgym.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                                        "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HOME": str(Path.home())})


@pytest.mark.slow
def test_a_family_installed_by_entry_point_runs_the_whole_method_from_the_command_line(tmp_path):
    """collect -> train-em -> SFT -> dream then real (S2R) -> eval, each a `dreamgym` command, on a family that only
    an entry point declares (no `register_family`), whose policies are oracle/noisy/random (no "expert") and whose
    step limit (6) is what a run's episodes and its real-step budget are planned at (`EnvFamily.step_limit`)."""
    site = tmp_path / "site"
    _dist_info(site, {"lamps": "familypkg.lamps"})
    paths = (FIXTURES, site)

    def ok(*args: str) -> subprocess.CompletedProcess:
        t0 = time.perf_counter()
        run = _cli(*args, paths=paths, cwd=tmp_path)
        print(f"dreamgym {args[0]}: {time.perf_counter() - t0:.1f} s")
        assert run.returncode == 0, f"dreamgym {args[0]} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
        return run

    ok("check-family", "--env", "lamps")
    ok("collect", "--env", "lamps", "--policy", "oracle:0.5,noisy:0.3,random:0.2", "--episodes", "16", "--out",
       "data.jsonl", "--no-progress")
    ok("train-em", "--env", "lamps", "--data", "data.jsonl", "--out", "em", "max_steps=8", "batch_size=4",
       "em.embedder=hashing", "em.max_new_tokens=96", "task_writing=0", "threads=1", "log_every=4")
    # on_invalid_action=pass: the tiny policy's text goes to the environment as it is, so every turn is a real step
    common = ["--no-progress", "agent.history=0", "rollout.max_new_tokens=12", "rollout.on_invalid_action=pass",
              "tensorboard=false", "eval_at_start=false", "eval_max_tasks=1"]
    # No data=: the demonstrations are the family's declared expert's (its "oracle").
    ok("train", "--algo", "sft", "--env", "lamps", "run_dir=sft", "demo_episodes=8", "sft.epochs=1", *common)
    demos = [json.loads(line) for line in (tmp_path / "sft" / "demos.jsonl").read_text().splitlines()]
    assert demos and {d["policy"] for d in demos} == {"oracle"}
    # S2R with a budget of 150 real steps: 4 episodes of a task need 4 x 6 = 24 at the family's step limit.
    ok("train", "--algo", "grpo", "--env", "lamps", "run_dir=s2r", "init=sft/final", "mode=s2r", "dream.em=em",
       "dream.iterations=1", "dream.s2r_iterations=1", "dream.curriculum.enabled=false", "real_step_budget=150",
       "group_size=4", "tasks_per_iteration=1", "rollout.temperature=1.0", *common)
    summary = json.loads((tmp_path / "s2r" / "summary.json").read_text())
    assert summary["iterations"] == 2 and 0 < summary["real_steps_used"] <= 24
    run = ok("eval", "--env", "lamps", "--policy", "s2r/final", "--max-tasks", "2", "--json", "eval.json")
    assert len(json.loads((tmp_path / "eval.json").read_text())["episodes"]) == 2, run.stdout
