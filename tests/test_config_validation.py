"""The one validation pass over every config: property-based tests over field values (hypothesis), the YAML fixtures
under tests/fixtures/config/, and the files a config names, all checked at load time and all ending in ConfigError
naming the field or file."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamgym.config import ConfigError, load_config
from dreamgym.rl.evaluate import EvalConfig
from dreamgym.envs.web.browser import BrowserConfig
from dreamgym.envserve.server import EnvServerConfig
from dreamgym.experience.train import TrainEMConfig
from dreamgym.commands.recipe import QuickstartConfig
from dreamgym.commands.table import TableConfig
from dreamgym.commands.train import TrainConfig

FIXTURES = Path(__file__).parent / "fixtures" / "config"
TOP_LEVEL = (TrainConfig, TrainEMConfig, QuickstartConfig, TableConfig, EvalConfig, EnvServerConfig, BrowserConfig)
"""The configs a subcommand loads (BrowserConfig: the web families' browsers); every other config dataclass is nested
in one of them."""


def leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field[Any], Any]]:
    """(dotted name, field, annotation) of every non-dataclass field of `cls`, nested ones included."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += leaf_fields(tp, prefix + f.name + ".")
        else:
            out.append((prefix + f.name, f, tp))
    return out


def is_numeric(tp: Any) -> bool:
    return tp in (int, float) or any(a in (int, float) for a in typing.get_args(tp)) or (
        typing.get_origin(tp) is list and typing.get_args(tp)[0] in (int, float))


FIELDS = [(cls, name, f, tp) for cls in TOP_LEVEL for name, f, tp in leaf_fields(cls)]
NAMES = {cls: {name for name, _, _ in leaf_fields(cls)} for cls in TOP_LEVEL}
NUMERIC = [(cls, name, f, tp) for cls, name, f, tp in FIELDS if is_numeric(tp)]
_DEMOS = str(Path(__file__).parent / "fixtures" / "web" / "miniwob_episodes.jsonl")
NEEDS = {(TrainEMConfig, "heldout.patience"): ["heldout.every=1"],
         (TrainConfig, "grpo.anchor.coef"): [f"grpo.anchor.data={_DEMOS}"],
         (TrainConfig, "ppo.anchor.coef"): [f"ppo.anchor.data={_DEMOS}"]}
"""Fields with a rule across fields: the other overrides a value of theirs needs before it can load (a patience > 0
stops early on a score that only `heldout.every` > 0 computes; an SFT anchor's weight needs its demonstrations)."""


def _all_configs_reached() -> None:
    """Every config dataclass in the package is one of TOP_LEVEL or nested in one, so the tests below see it."""
    import ast

    declared = set()
    for path in (Path(__file__).parents[1] / "dreamgym").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config") and node.name != "ConfigError":
                declared.add(node.name)
    reached = set()

    def walk(cls: type) -> None:
        reached.update(c.__name__ for c in cls.__mro__ if dataclasses.is_dataclass(c))
        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                walk(tp)
    for cls in TOP_LEVEL:
        walk(cls)
    assert declared - reached == set() and len(reached) >= 17


def test_every_numeric_field_declares_its_range_and_describe_prints_it():
    from dreamgym.config import describe

    _all_configs_reached()
    missing = [f"{cls.__name__}.{name}" for cls, name, f, _ in NUMERIC if "range" not in f.metadata]
    assert missing == []
    assert "  grpo.epochs=1  Passes over each rollout batch. (allowed: >= 1)" in describe(TrainConfig)


def _inside(rng: Any, integer: bool) -> st.SearchStrategy[Any]:
    if integer:
        lo = math.ceil(rng.ge) if rng.ge is not None else math.floor(rng.gt) + 1 if rng.gt is not None else None
        hi = math.floor(rng.le) if rng.le is not None else math.ceil(rng.lt) - 1 if rng.lt is not None else None
        return st.integers(min_value=lo, max_value=hi)
    return st.floats(min_value=rng.ge if rng.ge is not None else rng.gt,
                     max_value=rng.le if rng.le is not None else rng.lt,
                     exclude_min=rng.gt is not None, exclude_max=rng.lt is not None,
                     allow_nan=False, allow_infinity=False)


def _outside(rng: Any, integer: bool) -> st.SearchStrategy[Any]:
    """Values just past, and far past, each bound (and the non-finite floats)."""
    options: list[st.SearchStrategy[Any]] = []
    if integer:
        if rng.ge is not None or rng.gt is not None:
            options.append(st.integers(max_value=math.ceil(rng.ge) - 1 if rng.ge is not None else math.floor(rng.gt)))
        if rng.le is not None or rng.lt is not None:
            options.append(st.integers(min_value=math.floor(rng.le) + 1 if rng.le is not None else math.ceil(rng.lt)))
    else:
        if rng.ge is not None or rng.gt is not None:
            options.append(st.floats(max_value=rng.ge if rng.ge is not None else rng.gt, exclude_max=rng.ge is not None,
                                     allow_nan=False, allow_infinity=False))
        if rng.le is not None or rng.lt is not None:
            options.append(st.floats(min_value=rng.le if rng.le is not None else rng.lt, exclude_min=rng.le is not None,
                                     allow_nan=False, allow_infinity=False))
        options.append(st.sampled_from([math.nan, math.inf, -math.inf]))
    return st.one_of(options)


def _base_type(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is list:
        return args[0]
    return args[0] if args else tp


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_value_in_range_loads_and_one_outside_names_the_field(data):
    from dreamgym.config import Range

    cls, name, f, tp = data.draw(st.sampled_from(NUMERIC))
    rng: Range = f.metadata["range"]
    integer = _base_type(tp) is int
    listed = typing.get_origin(tp) is list
    good = data.draw(_inside(rng, integer))
    needs = NEEDS.get((cls, name), [])
    cfg = load_config(cls, None, [*needs, f"{name}={[good] if listed else good!r}"])
    got = cfg
    for part in name.split("."):
        got = getattr(got, part)
    assert got == ([good] if listed else good)
    if rng == Range():  # any finite number: only the non-finite ones are out
        return
    bad = data.draw(_outside(rng, integer))
    with pytest.raises(ConfigError) as e:
        load_config(cls, None, [*needs, f"{name}={[bad] if listed else bad!r}"])
    assert e.value.field in (name, f"{name}[0]") and "(allowed: " in str(e.value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_for_any_field_loads_or_raises_config_error_naming_it(data):
    """Random text, numbers, lists and mappings as any field's value: a config or a ConfigError, never another
    exception (paths that do not exist, NUL bytes, 10**400, YAML that parses to something else...)."""
    cls, name, _, _ = data.draw(st.sampled_from(FIELDS))
    value = data.draw(st.one_of(st.text(max_size=40), st.integers(), st.floats(),
                                st.lists(st.one_of(st.integers(), st.text(max_size=8)), max_size=3),
                                st.sampled_from(["[1, 2]", "{a: 1}", "true", "null", "~", "1e400", "-0", "[", "a=b",
                                                 "10" * 200, "\x00", "../../etc", "/dev/null", "all", "data"])))
    try:
        load_config(cls, None, [f"{name}={value}"])
    except ConfigError as e:
        # the field itself, or (a rule across fields) another field of the same config
        assert e.field.split("[")[0] in NAMES[cls] and "\n" not in str(e)


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=20), value=st.text(max_size=10))
def test_any_override_key_is_a_known_field_or_a_config_error(key, value):
    try:
        load_config(TrainConfig, None, [f"{key}={value}"])
    except ConfigError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("override, field", [
    # counts that would train zero steps, or a negative number of them
    ("iterations=0", "iterations"), ("group_size=0", "group_size"), ("grpo.epochs=-1", "grpo.epochs"),
    ("ppo.minibatches=0", "ppo.minibatches"), ("sft.epochs=0", "sft.epochs"), ("sft.batch_size=0", "sft.batch_size"),
    ("dpo.pairs_per_step=0", "dpo.pairs_per_step"), ("demo_episodes=0", "demo_episodes"),
    ("optim.lr=0", "optim.lr"), ("optim.micro_batch_tokens=0", "optim.micro_batch_tokens"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens"), ("rollout.top_p=0", "rollout.top_p"),
    ("real_step_budget=-5", "real_step_budget"), ("save_every=-1", "save_every"), ("eval_seeds=[0,-1]", "eval_seeds[1]"),
    ("dream.curriculum.max_share=1.5", "dream.curriculum.max_share"), ("seed=-1", "seed"), ("optim.eps=nan", "optim.eps"),
    ("model.lora_dropout=1", "model.lora_dropout"), ("eval_seeds=[]", "eval_seeds"),
    # a config that is valid field by field but trains nothing
    ("dream.iterations=0", "dream.iterations"),
])
def test_train_config_refuses_values_that_would_train_nothing_or_fail_late(override, field, tmp_path):
    extra = ["mode=dream", f"dream.em={_checkpoint_dir(tmp_path)}"] if override.startswith("dream.iter") else []
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, [override, *extra])
    assert e.value.field == field


@pytest.mark.parametrize("override, field", [
    ("batch_size=0", "batch_size"), ("epochs=0", "epochs"), ("max_steps=-1", "max_steps"),
    ("optim.lr=0", "optim.lr"), ("model.lora_r=0", "model.lora_r"), ("model.policy_url=http://h:1/v1", "model.policy_url"),
    ("balance_outcomes=0", "balance_outcomes"), ("context_dropout=2", "context_dropout"), ("threads=-1", "threads"),
    ("log_every=0", "log_every"), ("em.k=-1", "em.k"), ("em.top_p=0", "em.top_p"),
    ("em.max_new_tokens=0", "em.max_new_tokens"), ("em.mmr_lambda=2", "em.mmr_lambda"),
    ("teacher=llm", "teacher"), ("env=nowhere", "env"), ("data=/no/such/file.jsonl", "data"),
])
def test_train_em_config_is_validated(override, field):
    with pytest.raises(ConfigError) as e:
        load_config(TrainEMConfig, None, [override])
    assert e.value.field == field


# ------------------------------------------------------------------------------------------------ YAML files
@pytest.mark.parametrize("fixture, problem", [
    ("malformed.yaml", r"^.*malformed\.yaml: not valid YAML: line 3, column \d+: "),
    ("not_utf8.yaml", r"^.*not_utf8\.yaml: not UTF-8 text \(byte 0xe9 at offset 20\)$"),
    ("unknown_key.yaml", r"^grpo\.epochss: unknown config field \(allowed: .*epochs"),
    ("wrong_type.yaml", r"^eval_at_start: expected a bool, got 'maybe' \(allowed: true or false\)$"),
    ("duplicate_key.yaml", r"^.*duplicate_key\.yaml: not valid YAML: line 5, column 3: key 'lr' repeated \(first on "
                           r"line 3\)$"),
    ("not_a_mapping.yaml", r"^.*not_a_mapping\.yaml: the top level of a config file must be a mapping, not a list$"),
    ("missing.yaml", r"^.*missing\.yaml: cannot read the config file \(No such file or directory\)$"),
])
def test_bad_yaml_files_are_one_config_error_naming_the_file_or_field(fixture, problem):
    with pytest.raises(ConfigError, match=problem) as e:
        load_config(TrainConfig, FIXTURES / fixture)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------ named files
def _checkpoint_dir(tmp: Path, **model: Any) -> Path:
    """An experience-model checkpoint's layout (em_config.json, model/ with one small whole weights file): all a
    config check reads."""
    import numpy as np
    from safetensors.numpy import save_file

    root = tmp / "em"
    (root / "model").mkdir(parents=True, exist_ok=True)
    save_file({"w": np.zeros(2, dtype=np.float32)}, str(root / "model" / "model.safetensors"))
    (root / "em_config.json").write_text(json.dumps({"env": "dial", "preset": "tiny", "model": {"k": 2, **model}}))
    return root


def test_data_files_are_read_at_load_time(tmp_path):
    from em_helpers import dial_trajectories

    from dreamgym.data import write_jsonl

    good = tmp_path / "good.jsonl"
    write_jsonl(good, dial_trajectories(2))
    assert load_config(TrainConfig, None, ["algo=sft", f"data={good}"]).data == str(good)
    cases = {"empty.jsonl": b"", "garbage.jsonl": b"{not json\n", "list.jsonl": b"[1, 2]\n",
             "record.jsonl": b'{"a": 1}\n', "bytes.jsonl": b"\xff\xfe\n", "table.parquet": b"PAR1 not parquet",
             "notes.txt": b"hello"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ConfigError, match=f"^data: .*{name}") as e:
            load_config(TrainConfig, None, ["algo=sft", f"data={tmp_path / name}"])
        assert "(allowed: a trajectory file" in str(e.value)
    for field in ("dream.em_data", "real_task_pool", "dream.task_pool"):
        with pytest.raises(ConfigError, match=f"^{field}: .*no such file"):
            load_config(TrainConfig, None, [f"{field}={tmp_path / 'nowhere.jsonl'}"])


def test_an_experience_model_checkpoint_and_its_overrides_are_checked_before_it_loads(tmp_path):
    em = _checkpoint_dir(tmp_path)
    cfg = load_config(TrainConfig, None, ["mode=dream", f"dream.em={em}", "dream.em_overrides=[temperature=1.0]"])
    assert cfg.dream.em_overrides == ["temperature=1.0"]
    for override, problem in ((f"dream.em={tmp_path}", "is not an experience-model checkpoint"),
                              ("dream.em_overrides=[temprature=1]", "temprature: unknown config field"),
                              ("dream.em_overrides=[temperature=-1]", r"temperature: -1\.0 is out of range \(allowed: >= 0\)$"),
                              ("dream.em_overrides.temperature=1", "expected a list")):
        with pytest.raises(ConfigError, match=r"^dream\.em(_overrides)?: .*" + problem):
            load_config(TrainConfig, None, ["mode=dream", f"dream.em={em}", override])


def test_removed_knobs_old_checkpoints_load_when_default_and_are_refused_otherwise(tmp_path):
    from dreamgym.experience.checkpoint import checkpoint_model_config
    from dreamgym.experience.config import ExperienceModelConfig

    old = {"k": 2, "history_state_chars": 0, "retrieve_real_only": True, "example_state_chars": 240,
           "retry_temperature": 0.7}
    cfg = checkpoint_model_config({"model": old})
    assert cfg == ExperienceModelConfig(compact_states=False)
    for key in ("history_state_chars", "retrieve_real_only", "example_state_chars", "retry_temperature"):
        assert key not in {f.name for f in dataclasses.fields(ExperienceModelConfig)}
        with pytest.raises(ConfigError, match=f"^{key}: unknown config field"):
            load_config(ExperienceModelConfig, None, [f"{key}=1"])
    for key, value in (("retrieve_real_only", False), ("history_state_chars", 80), ("retry_temperature", 1.0),
                       ("example_state_chars", 100)):
        with pytest.raises(ConfigError, match=f"^model\\.{key}: the checkpoint was trained with {value!r}"):
            checkpoint_model_config({"model": {**old, key: value}})
        em = _checkpoint_dir(tmp_path / key, **{key: value})
        with pytest.raises(ConfigError, match=f"^dream\\.em: model\\.{key}: "):
            load_config(TrainConfig, None, ["mode=dream", f"dream.em={em}"])


# ------------------------------------------------------------------------------------------------ each knob once
@pytest.mark.parametrize("cls, old, new", [
    (TrainConfig, "grpo.group_size", "group_size"), (TrainConfig, "ppo.episodes_per_task", "group_size"),
    (TrainConfig, "grpo.tasks_per_iteration", "tasks_per_iteration"),
    (TrainConfig, "ppo.tasks_per_iteration", "tasks_per_iteration"),
    (TrainEMConfig, "model.k", "em.k"), (TrainEMConfig, "model.embedder", "em.embedder"),
    (TrainEMConfig, "lora_r", "model.lora_r"), (TrainEMConfig, "preset", "model.preset"),
    (TrainEMConfig, "lr", "optim.lr"), (TrainEMConfig, "warmup_steps", "optim.warmup_steps"),
])
def test_a_renamed_key_is_refused_in_one_line_naming_the_new_key(cls, old, new):
    with pytest.raises(ConfigError) as e:
        load_config(cls, None, [f"{old}=2"])
    assert str(e.value) == f"{old}: renamed to {new}"


def test_one_group_size_drives_grpo_and_ppo():
    from dreamgym.rl.loop import LoopSettings

    for algo in ("grpo", "ppo"):
        cfg = load_config(TrainConfig, None, [f"algo={algo}", "group_size=3", "tasks_per_iteration=5"])
        settings = LoopSettings(cfg)
        assert (settings.config.group_size, settings.config.tasks_per_iteration) == (3, 5)
    assert not {"group_size", "episodes_per_task", "tasks_per_iteration"} & {
        f.name for c in (TrainConfig().grpo, TrainConfig().ppo) for f in dataclasses.fields(c)}


def test_an_old_run_folders_config_yaml_is_refused_naming_the_renamed_key(tmp_path):
    """config.yaml as `dreamgym train` wrote it before the group size was one field: loading it again (--config) is
    refused at start-up, naming the new key, in one line with exit code 2."""
    import subprocess
    import sys

    import yaml

    old = dataclasses.asdict(TrainConfig())
    old["grpo"] = {**old["grpo"], "group_size": 4, "tasks_per_iteration": 3}
    del old["group_size"], old["tasks_per_iteration"]
    (tmp_path / "run").mkdir()
    saved = tmp_path / "run" / "config.yaml"
    saved.write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(ConfigError, match=r"^grpo\.group_size: renamed to group_size$"):
        load_config(TrainConfig, saved)
    proc = subprocess.run([sys.executable, "-m", "dreamgym.cli", "train", "--config", str(saved)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr == "dreamgym train: grpo.group_size: renamed to group_size\n"
    old_em = {"env": "dial", "preset": "tiny", "model": {"k": 2}, "lr": 0.001}
    (tmp_path / "em.yaml").write_text(yaml.safe_dump(old_em))
    with pytest.raises(ConfigError, match=r"^model\.k: renamed to em\.k$"):
        load_config(TrainEMConfig, tmp_path / "em.yaml")


def test_train_em_takes_trains_model_and_optim_fields_with_its_own_defaults():
    from dreamgym.config import describe
    from dreamgym.trainers.common import ModelConfig, OptimConfig

    cfg = load_config(TrainEMConfig, None, ["model.lora=true", "model.lora_r=8", "optim.lr=1e-4", "em.k=3"])
    assert isinstance(cfg.model, ModelConfig) and isinstance(cfg.optim, OptimConfig)
    assert (cfg.model.lora, cfg.model.lora_r, cfg.em.k) == (True, 8, 3)
    # train-em's own optimiser defaults survive an override of one field
    assert (cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.schedule, cfg.optim.beta2, cfg.optim.micro_batch_tokens,
            cfg.optim.min_lr_ratio) == (1e-4, 30, "cosine", 0.98, 8192, 0.1)
    assert load_config(TrainEMConfig).optim.lr is None  # by the kind of training
    assert load_config(TrainEMConfig).optim.resolved(lora=True).lr == 2e-4
    assert load_config(TrainEMConfig).optim.resolved(lora=False).lr == 1e-3
    assert load_config(TrainConfig).optim.resolved(lora=True).lr == 1e-5  # a set rate is kept
    assert "  optim.warmup_steps=30  " in describe(TrainEMConfig) and "  optim.warmup_steps=0  " in describe(TrainConfig)
    names = {ln.split("=")[0].strip() for ln in describe(TrainEMConfig).splitlines()}
    assert {"model.preset", "model.lora_r", "optim.lr", "em.k"} <= names
    assert not {"preset", "lora_r", "lr", "model.k"} & names
    with pytest.raises(ConfigError, match=r"^model\.policy_url: train-em samples no rollouts"):
        load_config(TrainEMConfig, None, ["model.lora=true", "model.policy_url=http://h:1/v1"])


def test_a_recipe_refuses_the_group_size_in_its_train_overrides():
    with pytest.raises(ConfigError, match=r"^train_overrides: group_size is the recipe's own field group_size"):
        load_config(QuickstartConfig, None, ["train_overrides=[group_size=4]"])
    with pytest.raises(ConfigError, match=r"^train_overrides: grpo\.group_size: renamed to group_size$"):
        load_config(TableConfig, None, ["train_overrides=[grpo.group_size=4]"])
    with pytest.raises(ConfigError, match=r"^em_overrides: lora_r: renamed to model\.lora_r$"):
        load_config(TableConfig, None, ["em_overrides=[lora_r=4]"])
