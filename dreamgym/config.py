"""Dataclass configs: field docs, YAML loading, dotted `key=value` overrides and start-up validation.

Owns: turning YAML + command-line overrides into a typed config dataclass, and the error messages that name
the bad field. Each config dataclass documents its fields with a string literal right after the field (read
here with `ast`, so `--help` can print them).
Must not know: which configs exist; environments; models.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is unknown or has the wrong type; the message names the dotted field."""


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


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert/validate `value` against the annotation `tp`; raise ConfigError naming `name`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, name)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{name}: {value!r} matches none of {tp}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{name}: {value!r} is not one of {list(args)}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # an annotation: a class, never an instance
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, prefix=name + ".")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{name}: expected a bool, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected an int, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected an int, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected a float, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build `cls` from a (nested) mapping; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise ConfigError(f"{prefix}{key}: unknown config field (known: {', '.join(sorted(known))})")
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`["a.b=1", "c=x"]` -> `{"a": {"b": "1"}, "c": "x"}` (values stay strings; YAML scalars are parsed)."""
    out: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"override {arg!r} is not of the form key=value")
        key, raw = arg.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict,)):
            value = raw
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Defaults of `cls`, then the YAML file at `path`, then dotted overrides; validated at once."""
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text())
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level of a config file must be a mapping")
        data = loaded or {}
    data = _merge(data, parse_overrides(overrides or []))
    return from_dict(cls, data)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def describe(cls: type, prefix: str = "") -> str:
    """Human-readable list of fields, defaults and docs (used by `--help`). A subclass lists the docs of the
    fields it inherits (its own doc wins when it redeclares one)."""
    lines = []
    docs: dict[str, str] = {}
    for c in reversed(cls.__mro__):
        if dataclasses.is_dataclass(c):
            docs.update({k: v for k, v in field_docs(c).items() if v})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            lines.append(describe(tp, prefix + f.name + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "?")
        lines.append(f"  {prefix}{f.name}={default!r}  {docs.get(f.name, '')}")
    return "\n".join(lines)
