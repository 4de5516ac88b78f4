from dataclasses import dataclass, field
from typing import Literal

import pytest

from dreamgym.config import ConfigError, describe, field_docs, load_config, parse_overrides


@dataclass
class Inner:
    lr: float = 1e-3
    """Learning rate."""
    layers: list[int] = field(default_factory=lambda: [1, 2])
    """Sizes."""


@dataclass
class Outer:
    name: str = "run"
    """Run name."""
    steps: int = 10
    """Number of steps."""
    algo: Literal["grpo", "ppo"] = "grpo"
    """Which algorithm."""
    fast: bool = False
    """Go fast."""
    seed: int | None = None
    """Optional seed."""
    inner: Inner = field(default_factory=Inner)
    """Nested config."""

    def validate(self):
        if self.steps < 0:
            raise ConfigError(f"steps: must be >= 0, got {self.steps}")


def test_yaml_then_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("steps: 5\ninner:\n  lr: 0.5\n")
    cfg = load_config(Outer, p, ["inner.layers=3,4", "algo=ppo", "fast=true", "seed=7"])
    assert cfg.steps == 5 and cfg.inner.lr == 0.5 and cfg.inner.layers == [3, 4]
    assert cfg.algo == "ppo" and cfg.fast is True and cfg.seed == 7


@pytest.mark.parametrize("override, field_name", [
    (["stepz=3"], "stepz"),
    (["steps=abc"], "steps"),
    (["inner.lr=fast"], "inner.lr"),
    (["inner.nope=1"], "inner.nope"),
    (["algo=sac"], "algo"),
    (["fast=maybe"], "fast"),
    (["steps=-1"], "steps"),
])
def test_bad_values_fail_naming_the_field(override, field_name):
    with pytest.raises(ConfigError, match=field_name.replace(".", r"\.")):
        load_config(Outer, None, override)


def test_field_docs_and_describe():
    docs = field_docs(Outer)
    assert docs["steps"] == "Number of steps." and docs["inner"] == "Nested config."
    text = describe(Outer)
    assert "inner.lr=0.001  Learning rate." in text

    @dataclass
    class Derived(Outer):
        extra: int = 1
        """Only here."""

    # Inherited fields keep their docs (field_docs reads one class body; describe walks the bases).
    text = describe(Derived)
    assert "  steps=10  Number of steps." in text and "  extra=1  Only here." in text


def test_parse_overrides_rejects_missing_equals():
    with pytest.raises(ConfigError):
        parse_overrides(["steps"])


def test_renamed_keys_are_refused_naming_the_new_key(tmp_path):
    from dreamgym.config import renamed

    @renamed({"inner.rate": "inner.lr", "count": "steps"})
    @dataclass
    class Renamed(Outer):
        pass

    for given, old, new in ((["inner.rate=0.5"], "inner.rate", "inner.lr"), (["count=3"], "count", "steps")):
        with pytest.raises(ConfigError) as e:
            load_config(Renamed, None, given)
        assert str(e.value) == f"{old}: renamed to {new}"
    p = tmp_path / "old.yaml"
    p.write_text("inner:\n  rate: 0.5\n")
    with pytest.raises(ConfigError, match=r"^inner\.rate: renamed to inner\.lr$"):
        load_config(Renamed, p)
    # Nested, the names carry the prefix of the field the class sits in.
    @dataclass
    class Holder:
        child: Renamed = field(default_factory=Renamed)

    with pytest.raises(ConfigError, match=r"^child\.count: renamed to child\.steps$"):
        load_config(Holder, None, ["child.count=1"])


@dataclass
class OwnDefaults:
    inner: Inner = field(default_factory=lambda: Inner(lr=0.5, layers=[9]))
    """A nested config whose defaults are the parent's own."""


def test_a_nested_config_keeps_its_parents_defaults_under_overrides_and_in_describe():
    cfg = load_config(OwnDefaults, None, ["inner.lr=0.25"])
    assert cfg.inner == Inner(lr=0.25, layers=[9])
    assert load_config(OwnDefaults).inner == Inner(lr=0.5, layers=[9])
    assert "  inner.lr=0.5  Learning rate." in describe(OwnDefaults)
    assert "  inner.layers=[9]  Sizes." in describe(OwnDefaults)


def test_flags_come_after_the_file_and_the_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("steps: 5\nname: file\n")
    cfg = load_config(Outer, p, ["steps=6"], {"name": "flag"})
    assert (cfg.steps, cfg.name) == (6, "flag")
    with pytest.raises(ConfigError, match="^steps: expected an int"):
        load_config(Outer, p, [], {"steps": "many"})


def test_apply_overrides_puts_text_settings_on_a_built_config():
    from dreamgym.config import apply_overrides

    base = Outer(name="base", inner=Inner(lr=0.5))
    assert apply_overrides(base, ["steps=3"]) == Outer(name="base", steps=3, inner=Inner(lr=0.5))
    with pytest.raises(ConfigError, match="^inner.nope: unknown config field"):
        apply_overrides(base, ["inner.nope=1"])
