"""Dataclass configs: field docs and ranges, YAML loading, dotted `key=value` overrides and the one validation pass.

Owns: turning a YAML file + `key=value` overrides into a typed, validated config dataclass (`load_config`), the
one error type for bad config (`ConfigError`, which names the dotted field or the file, the problem and what is
allowed), the declarations a field carries (`ranged`: numeric bounds; `checked`: a check of a value that names a
file or folder), the keys a config class renamed (`renamed`: refused naming the new key) and the one-line
command-line error (`CommandParser`, `fail`). Each config dataclass documents its
fields with a string literal right after the field (read here with `ast`, so `--help` can print them).

Validation is one pass, run by `from_dict`/`load_config` before any caller loads a model or data: the structure and
types (unknown keys, coercion), then, depth first over nested configs, every field's declared range and check,
then the class's own `validate()` for rules across fields. A `ConfigError` raised in a nested class's `validate()`
names its field relative to that class; the pass adds the prefix (`dream.` + `reward_from`).
Must not know: which configs exist; environments; models; file formats (checks are given by the fields).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """Bad config: `field` (a dotted field name, or a file), what is wrong with it and, when known, what is allowed.
    The message is one line: `<field>: <problem> (allowed: <allowed>)`. A single argument is a whole message that
    starts with the field (`ConfigError("lora: ...")`)."""

    def __init__(self, field: str, problem: str = "", allowed: str = ""):
        self.field, self.problem, self.allowed = field, " ".join(str(problem).split()), allowed
        where = field if field.isprintable() else repr(field)  # a key from the command line can hold anything
        message = f"{where}: {self.problem}" if self.problem else " ".join(field.split())
        super().__init__(message + (f" (allowed: {allowed})" if allowed else ""))

    def under(self, prefix: str) -> ConfigError:
        """The same error for the field seen from an enclosing config (`prefix` ends with a dot)."""
        return ConfigError(prefix + self.field, self.problem, self.allowed) if prefix else self


# ------------------------------------------------------------------------------------------- field declarations
@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of a numeric field (or of each element of a list field); values must also be finite."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return not ((self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
                    or (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt))

    def __str__(self) -> str:
        if self.ge is not None and self.le is not None:
            return f"{_num(self.ge)} to {_num(self.le)}"
        parts = [f"{op} {_num(b)}" for op, b in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
                 if b is not None]
        return " and ".join(parts) or "any finite number"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def ranged(default: T, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> T:
    """A numeric field with its allowed range (None passes for an optional field; a list default applies the range
    to each element and is copied per instance). Printed by `describe`, enforced by the validation pass."""
    return _field(default, {"range": Range(ge=ge, gt=gt, le=le, lt=lt)})


def default_of(cls: type, name: str) -> Any:
    """The default of field `name` of the dataclass `cls`: a config that offers a knob another config declares
    takes its default from there (`ranged(default_of(TrainerConfig, "group_size"), ge=1)`), so the knob has one
    default in the product."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            raise ValueError(f"{cls.__name__}.{name} has no default")
    raise ValueError(f"{cls.__name__} has no field {name!r}")


def checked(default: T, check: Callable[[Any], None], allowed: str | Callable[[], str]) -> T:
    """A field whose non-empty value `check` must accept (it raises ValueError or OSError saying what is wrong),
    e.g. a file that must exist and parse (`dreamgym.checks`). `allowed` says what the field accepts, for errors
    and `--help` (a function when the answer is known only at run time, e.g. the registered families)."""
    return _field(default, {"check": check, "allowed": allowed})


def _field(default: T, metadata: dict[str, Any]) -> T:
    if isinstance(default, list):  # a mutable default: each instance gets its own copy
        items = list(default)
        return dataclasses.field(default_factory=lambda: list(items), metadata=metadata)  # type: ignore[return-value]
    return dataclasses.field(default=default, metadata=metadata)


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal that follows it in the class body (empty when undocumented)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                    and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
            else:
                docs[node.target.id] = ""
    return docs


def allowed_values(f: dataclasses.Field[Any], tp: Any) -> str:
    """What a field accepts, in words ("" when any value of its type does)."""
    if "range" in f.metadata:
        return str(f.metadata["range"])
    if "allowed" in f.metadata:
        allowed = f.metadata["allowed"]
        return allowed() if callable(allowed) else str(allowed)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    literal = tp if typing.get_origin(tp) is typing.Literal else next(
        (a for a in args if typing.get_origin(a) is typing.Literal), None)
    return "one of " + ", ".join(map(str, typing.get_args(literal))) if literal is not None else ""


# ------------------------------------------------------------------------------------------------ types
def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert/validate `value` against the annotation `tp`; raise ConfigError naming `name`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, name)
            except ConfigError:
                pass
        raise ConfigError(name, f"{value!r} is not a {_type_name(tp)}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(name, f"{value!r} is not a valid choice", "one of " + ", ".join(map(str, args)))
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # an annotation: a class, never an instance
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(name, f"expected a mapping of {tp.__name__} fields, got {value!r}")
        return _build(tp, value, prefix=name + ".")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""]
        if isinstance(value, dict):
            raise ConfigError(name, f"expected a list, got the mapping {value!r}", "a list such as [a=1,b=2]")
        if not isinstance(value, (list, tuple)):
            raise ConfigError(name, f"expected a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(name, f"expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(name, f"expected a bool, got {value!r}", "true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(name, f"expected an int, got {value!r}")
    if tp is float:
        try:
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                return float(value)
        except (ValueError, OverflowError):
            pass
        raise ConfigError(name, f"expected a float, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(name, f"expected a string, got {value!r}")
    return value


def _type_name(tp: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(tp) if a is not type(None))


def renamed(renames: dict[str, str]) -> Callable[[type[T]], type[T]]:
    """Class decorator: the dotted keys `renames` names (old -> new, relative to the class) are refused with one line
    naming the new key, wherever they come from (a YAML file, an override, a config.yaml an older run wrote), so an
    old setting never goes unnoticed and never silently means something else."""
    def mark(cls: type[T]) -> type[T]:
        _RENAMED[cls] = dict(renames)
        return cls
    return mark


_RENAMED: dict[type, dict[str, str]] = {}
"""Config class -> its renamed keys (`renamed`)."""


def _refuse_renamed(cls: type, data: dict[str, Any], prefix: str) -> None:
    for c in cls.__mro__:
        for old, new in _RENAMED.get(c, {}).items():
            node: Any = data
            for part in old.split("."):
                node = node.get(part, _ABSENT) if isinstance(node, dict) else _ABSENT
            if node is not _ABSENT:
                raise ConfigError(prefix + old, f"renamed to {prefix + new}")


_ABSENT = object()


def _build(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """`cls` from a (nested) mapping: renamed keys, unknown keys and wrong types raise ConfigError; values are not
    yet checked."""
    _refuse_renamed(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise ConfigError(f"{prefix}{key}", "unknown config field", ", ".join(sorted(known)))
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {k: _coerce(_on_default(fields[k], v), hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def _on_default(f: dataclasses.Field[Any], value: Any) -> Any:
    """A nested config's given fields on top of the field's own default (a class may default a nested config to
    other values than that config's class defaults: train-em's optimiser)."""
    if isinstance(value, dict) and f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            return _merge(to_dict(default), value)
    return value


# ------------------------------------------------------------------------------------------------ validation
def validate_config(cfg: Any, prefix: str = "") -> None:
    """The validation pass over a built config, in two walks depth first: each field's type and range, then each
    class's own `validate()` (rules across fields); then the checks of fields that name files, so a config that is
    wrong in itself is reported before anything is opened. Raises ConfigError naming the dotted field."""
    _walk(cfg, prefix, files=False)
    _walk(cfg, prefix, files=True)


def _walk(cfg: Any, prefix: str, *, files: bool) -> None:
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        name, value = prefix + f.name, getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            _walk(value, name + ".", files=files)
        elif files and "check" in f.metadata and value not in (None, ""):
            try:
                f.metadata["check"](value)
            except (ValueError, OSError) as e:  # a ConfigError from a check names the sub-field, and its range
                allowed = "" if isinstance(e, ConfigError) else allowed_values(f, hints[f.name])
                raise ConfigError(name, str(e), allowed) from None
        elif not files:
            _coerce(value, hints[f.name], name)  # a config built in code was never coerced
            rng: Range | None = f.metadata.get("range")
            values = value if isinstance(value, list) else [value]
            for i, v in enumerate(values):
                if rng is not None and v is not None and v not in rng:
                    where = f"{name}[{i}]" if isinstance(value, list) else name
                    raise ConfigError(where, f"{v!r} is out of range", str(rng))
    own = getattr(cfg, "validate", None)
    if not files and callable(own):
        try:
            own()
        except ConfigError as e:
            raise e.under(prefix) from None


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build `cls` from a (nested) mapping and run the validation pass; bad config raises ConfigError."""
    cfg = _build(cls, data, prefix)
    validate_config(cfg, prefix)
    return cfg


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["a.b=1", "c=x"]` -> `{"a": {"b": 1}, "c": "x"}` (YAML scalars and flow lists are parsed)."""
    out: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(repr(arg), "an override must be key=value")
        key, raw = arg.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict):
            value = raw
        node = out
        parts = key.strip().split(".")
        for i, p in enumerate(parts[:-1]):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(".".join(parts[: i + 1]), f"set to a value and given sub-fields ({arg!r})")
        node[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key repeated in one mapping: PyYAML keeps the last value silently, so
    `lr: 0.001` followed later by `lr: 5` would train with 5."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges keys, which the file may override
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} repeated (first on line {first})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping; a missing, unreadable, non-UTF-8 or malformed file, or one that repeats a key
    in a mapping, raises ConfigError naming it (with the line and column YAML reports)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read the config file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), f"not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})") from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader that refuses repeated keys
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(str(path), f"not valid YAML: {where}{problem}") from None
    except RecursionError:
        raise ConfigError(str(path), "not valid YAML: nested too deeply") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(str(path), f"the top level of a config file must be a mapping, not a {type(loaded).__name__}")
    return loaded or {}


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None,
                flags: dict[str, Any] | None = None) -> T:
    """Defaults of `cls`, then the YAML file at `path`, then `key=value` overrides (dotted keys for nested fields, as
    on the command line), then `flags` (top-level fields a command's own options set, e.g. `--env`), then the
    validation pass. Bad config raises ConfigError."""
    data = read_yaml_mapping(path) if path is not None else {}
    return from_dict(cls, _merge(_merge(data, parse_overrides(list(overrides or []))), dict(flags or {})))


def apply_overrides(cfg: T, overrides: Sequence[str]) -> T:
    """`cfg` with a user's `key=value` overrides on top (as on the command line), through the validation pass; bad
    config raises ConfigError. For settings a user wrote as text (a recipe's `train_overrides`); code builds its
    configs with `dataclasses.replace`."""
    return from_dict(type(cfg), _merge(to_dict(cfg), parse_overrides(list(overrides))))


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def describe(cls: type, prefix: str = "", defaults: Any = None) -> str:
    """Human-readable list of fields, defaults, docs and allowed values (used by `--help`). A subclass lists the
    docs of the fields it inherits (its own doc wins when it redeclares one). `defaults`: the instance whose values
    are the defaults (a nested config's, which its parent may set apart from the class defaults)."""
    lines = []
    docs: dict[str, str] = {}
    for c in reversed(cls.__mro__):
        if dataclasses.is_dataclass(c):
            docs.update({k: v for k, v in field_docs(c).items() if v})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        default = getattr(defaults, f.name) if defaults is not None else f.default \
            if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else "?")
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            lines.append(describe(tp, prefix + f.name + ".", default if isinstance(default, tp) else None))
            continue
        allowed = allowed_values(f, tp)
        lines.append(f"  {prefix}{f.name}={default!r}  {docs.get(f.name, '')}"
                     + (f" (allowed: {allowed})" if allowed else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ command lines
def fail(cmd: str, error: BaseException | str) -> int:
    """Print a command's error as one line, `dreamgym <cmd>: <message>`, on stderr; return exit code 2."""
    print(f"dreamgym {cmd}: {' '.join(str(error).split())}", file=sys.stderr)
    return 2


def at_least(lo: int, at_most: int | None = None) -> Callable[[str], int]:
    """An argparse `type` for an int option that must be >= `lo` (and <= `at_most` when given); its error is the
    option's one-line usage error."""
    allowed = f">= {lo}" if at_most is None else f"{lo} to {at_most}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
        if value < lo or (at_most is not None and value > at_most):
            raise argparse.ArgumentTypeError(f"{value} is out of range (allowed: {allowed})")
        return value
    convert.__name__ = f"int {allowed}"
    return convert


class CommandParser(argparse.ArgumentParser):
    """argparse for a `dreamgym` subcommand whose usage errors are one line (`<prog>: <problem>`), exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)
