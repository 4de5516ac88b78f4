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
