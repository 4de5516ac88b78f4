"""The open registry of environment families: registering one, finding one by name, and its gymnasium id.

Owns: `register_family`, `family`, `family_names`, the discovery of families other packages declare in the
`dreamgym.envs` entry-point group, and registering a family's environment with gymnasium.
Must not know: any concrete family (the built-in ones are registered by `dreamgym.envs`), models, torch,
trainers.

A family is registered by name with its module path (a string, so registering imports nothing) or with the
module or `EnvFamily` itself; `family(name)` imports and builds it on first use. Another package adds a family
without touching DreamGym by declaring an entry point in its pyproject.toml:

    [project.entry-points."dreamgym.envs"]
    lamps = "mypkg.lamps"          # a family module, or "mypkg.lamps:FAMILY" for an EnvFamily object

Entry points are read lazily: by every `family_names()` call, and by `family()` when asked for a name not
registered yet (so a package installed into a running process is found too). A family found this way also gets
the gymnasium id `dreamgym/<name>-v0`, from then on.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import gymnasium

from dreamgym.env import TextEnv
from dreamgym.envs.family import EnvFamily

ENTRY_POINT_GROUP = "dreamgym.envs"

Source = EnvFamily | ModuleType | str


class UnknownFamilyError(ValueError):
    """No family is registered under the name asked for."""


class FamilyImportError(ImportError):
    """A registered family could not be loaded; the message names the family and the cause (`__cause__`)."""


@dataclass(frozen=True)
class _Registration:
    source: Source
    origin: str  # where the registration came from, for conflict messages


_REGISTRY: dict[str, _Registration] = {}
_LOADED: dict[str, EnvFamily] = {}
# Reentrant: loading a family module may itself register families.
_LOCK = threading.RLock()


def register_family(name: str, family_or_module_path: Source, *, gym_id: str | None = None,
                    env_entry_point: str | Callable[..., TextEnv] | None = None) -> None:
    """Register an environment family under `name` (the `Task.env` of its tasks).

    `family_or_module_path`: an `EnvFamily`, a family module, or the import path of one ("pkg.mod", or
    "pkg.mod:attr" naming a module or an `EnvFamily` in it), imported on first use. `gym_id` also registers the
    family's environment with gymnasium (`gymnasium.make(gym_id, **kwargs)`), built by `env_entry_point`
    ("pkg.mod:EnvClass" or a callable), or by the family's `make_env(**kwargs)` when that is None. Registering
    the same source under a name again does nothing; another source under a taken name raises ValueError.
    """
    if env_entry_point is not None and gym_id is None:
        raise ValueError(f"environment family {name!r}: env_entry_point needs a gym_id")
    _register(name, family_or_module_path, "register_family")
    if gym_id is not None:
        _register_gym_id(gym_id, env_entry_point or functools.partial(_make_family_env, name))


def family(name: str) -> EnvFamily:
    """The family registered as `name`, imported and built on first use.

    Raises `UnknownFamilyError` (a ValueError) for a name nobody registered and `FamilyImportError` (an
    ImportError) naming the family and the cause when its module cannot be imported."""
    fam = _LOADED.get(name)
    if fam is not None:
        return fam
    with _LOCK:
        if name not in _LOADED:
            if name not in _REGISTRY:
                _discover()
            if name not in _REGISTRY:
                raise UnknownFamilyError(f"unknown environment family {name!r}; known: {', '.join(_REGISTRY)}")
            _LOADED[name] = _load(name, _REGISTRY[name].source)
        return _LOADED[name]


def family_names() -> tuple[str, ...]:
    """The names of all registered families (built-in ones first, then those of installed packages), without
    importing any of them."""
    with _LOCK:
        _discover()
        return tuple(_REGISTRY)


def _register(name: str, source: Source, origin: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an environment family name must be an identifier, got {name!r}")
    if isinstance(source, EnvFamily) and source.name != name:
        raise ValueError(f"EnvFamily {source.name!r} registered under another name, {name!r}")
    with _LOCK:
        old = _REGISTRY.get(name)
        if old is None:
            _REGISTRY[name] = _Registration(source, origin)
        elif old.source != source:
            raise ValueError(f"environment family {name!r} is already registered ({old.origin}: {old.source!r}); "
                             f"{origin} registers {source!r} under the same name")


def _discover() -> None:
    """Register the families installed packages declare in the entry-point group (reads strings only)."""
    # Imported here: importlib.metadata costs `import dreamgym` about 50 ms, which a run that only uses the
    # built-in families need not pay.
    from importlib import metadata

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        fresh = ep.name not in _REGISTRY
        _register(ep.name, ep.value, f"entry point {ep.name} = {ep.value} of {dist}")
        if fresh:
            _register_gym_id(f"dreamgym/{ep.name}-v0", functools.partial(_make_family_env, ep.name))


def _load(name: str, source: Source) -> EnvFamily:
    if isinstance(source, EnvFamily):
        return source
    if isinstance(source, str):
        module_path, _, attr = source.partition(":")
        try:
            obj = importlib.import_module(module_path)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as e:  # noqa: BLE001 - any failure while importing names the family, never skipped
            raise FamilyImportError(f"environment family {name!r} ({source}) failed to import: "
                                    f"{type(e).__name__}: {e}") from e
        source = obj
    if isinstance(source, EnvFamily):
        if source.name != name:
            raise ValueError(f"environment family {name!r} points to EnvFamily {source.name!r}")
        return source
    if isinstance(source, ModuleType):
        return EnvFamily.from_module(name, source)
    raise TypeError(f"environment family {name!r}: expected a module or an EnvFamily, got {type(source).__name__}")


def _make_family_env(name: str, **kwargs: object) -> TextEnv:
    """The gymnasium entry point of a family registered without an environment class of its own."""
    return family(name).make_env(**kwargs)


def _register_gym_id(gym_id: str, entry_point: str | Callable[..., TextEnv]) -> None:
    if gym_id not in gymnasium.registry:
        # No step limit wrapper: each env enforces its own limit and the contract's after-end behaviour.
        gymnasium.register(id=gym_id, entry_point=entry_point, disable_env_checker=True, order_enforce=False)
