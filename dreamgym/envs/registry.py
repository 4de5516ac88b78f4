"""The open registry of environment families: registering one, finding one by name, and its gymnasium id.

Owns: `register_family`, `family`, `family_names`, `family_source`, the discovery of families other packages declare
in the `dreamgym.envs` entry-point group, and registering a family's environment with gymnasium.
Must not know: any concrete family (the built-in ones are registered by `dreamgym.envs`), models, torch,
trainers.

A family is registered by name with its module path (a string, so registering imports nothing) or with the
module or `EnvFamily` itself; `family(name)` imports and builds it on first use. Another package adds a family
without touching DreamGym by declaring an entry point in its pyproject.toml:

    [project.entry-points."dreamgym.envs"]
    lamps = "mypkg.lamps"          # a family module, or "mypkg.lamps:FAMILY" for an EnvFamily object

Entry points are read on `import dreamgym` (`register_entry_points`), again by every `family_names()` call, and by
`family()` when asked for a name not registered yet (so a package installed into a running process is found too).

Gymnasium ids follow one rule: `dreamgym/<Name>-v0`, `<Name>` the family's name in CamelCase (`gym_id_of`: `keydoor`
-> `dreamgym/Keydoor-v0`, `grid_world` -> `dreamgym/GridWorld-v0`). A family of an entry point gets it when the
entry point is read; the built-in ones are registered with the same rule spelled by hand where a word boundary is
inside their name (`dreamgym/WebShop-v0`, `dreamgym/ALFWorld-v0`). Every id keeps Gymnasium's passive environment
checker on: `gymnasium.make` wraps the environment in it, and it checks the first reset and step only.
"""

from __future__ import annotations

import functools
import importlib
import threading
import warnings
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
    """A registered family could not be loaded: its module raised or exited while importing, it lacks a required
    member, or two packages declare its name. The message, one line, names the family, where it was registered (the
    entry point and its package) and the cause (`__cause__`, when one was raised)."""


@dataclass(frozen=True)
class _Registration:
    source: Source
    origin: str  # where the registration came from, for conflict messages


_REGISTRY: dict[str, _Registration] = {}
_LOADED: dict[str, EnvFamily] = {}
_GYM_IDS: dict[str, str] = {}  # gymnasium id -> the family registered under it
# Entry points that could not be registered (a name taken by another source, a name that is no identifier): the name
# they declare -> why, said by `family(name)`. Never raised by listing: one broken package must not break the others.
_REFUSED: dict[str, str] = {}
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
        _register_gym_id(gym_id, env_entry_point or functools.partial(_make_family_env, name), name, "register_family")


def family(name: str) -> EnvFamily:
    """The family registered as `name`, imported and built on first use.

    Raises `UnknownFamilyError` (a ValueError) for a name nobody registered and `FamilyImportError` (an
    ImportError) naming the family and the cause when its module cannot be imported."""
    fam = _LOADED.get(name)
    if fam is not None:
        return fam
    with _LOCK:
        if name not in _LOADED:
            if name not in _REGISTRY or name in _REFUSED:
                _discover()
            if name in _REFUSED:  # two packages claim it: which one is meant is the user's call, never a guess
                raise FamilyImportError(_REFUSED[name])
            if name not in _REGISTRY:
                raise UnknownFamilyError(f"unknown environment family {name!r}; known: {', '.join(_REGISTRY)}")
            _LOADED[name] = _load(name, _REGISTRY[name])
        return _LOADED[name]


def family_names() -> tuple[str, ...]:
    """The names of all registered families (built-in ones first, then those of installed packages), without
    importing any of them. An entry point that cannot be registered is not listed (`family` of its name says why)."""
    with _LOCK:
        _discover()
        return tuple(_REGISTRY)


def family_source(name: str) -> Source:
    """What the family `name` is registered with: an import path ("pkg.mod" or "pkg.mod:attr"), a module or an
    `EnvFamily`, without importing it (the tiny preset fingerprints a family's files by it). Raises
    `UnknownFamilyError` for a name nobody registered."""
    with _LOCK:
        if name not in _REGISTRY:
            _discover()
        if name not in _REGISTRY:
            raise UnknownFamilyError(f"unknown environment family {name!r}; known: {', '.join(_REGISTRY)}")
        return _REGISTRY[name].source


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


def gym_id_of(name: str) -> str:
    """The gymnasium id of the family `name` by DreamGym's rule: `dreamgym/<Name>-v0`, `<Name>` the name in
    CamelCase (each `_`-separated part with its first letter upper-cased: `grid_world` -> `GridWorld`)."""
    return "dreamgym/" + "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "-v0"


def register_entry_points() -> None:
    """Register the families installed packages declare in the entry-point group, and their gymnasium ids (reads
    strings only, imports no family). `import dreamgym` calls it; an entry point that cannot be registered (a
    name that is no identifier or is taken) is left for `family()` of its name to report, so one broken package
    cannot break `import dreamgym` or the other families."""
    with _LOCK:
        _discover()


def _discover() -> None:
    """Register the families installed packages declare in the entry-point group (reads strings only); one that
    cannot be registered is kept in `_REFUSED` with the reason, naming both packages for a name taken twice."""
    from importlib import metadata

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        origin = f"entry point {ep.name} = {ep.value} of package {dist}"
        try:
            _register(ep.name, ep.value, origin)
        except ValueError as e:
            _REFUSED[ep.name] = f"{e}; uninstall one of them or rename the entry point"
            continue
        if ep.name not in _GYM_IDS.values():
            _register_gym_id(gym_id_of(ep.name), functools.partial(_make_family_env, ep.name), ep.name, origin)


def _load(name: str, registration: _Registration) -> EnvFamily:
    """The family a registration names, built; any failure on the way (an exception or `sys.exit` while its module
    imports, a member it lacks, an object of another kind) is a `FamilyImportError` naming the family and where it
    was registered, so a command says it in one line and the other families are untouched."""
    source = registration.source
    where = source if isinstance(source, str) and registration.origin == "register_family" else registration.origin
    if isinstance(source, str):
        module_path, _, attr = source.partition(":")
        try:
            obj = importlib.import_module(module_path)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        # SystemExit too: a module calling sys.exit() at import would otherwise end the command, silently.
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure while importing names the family
            raise FamilyImportError(f"environment family {name!r} ({where}) failed to import: "
                                    f"{type(e).__name__}: {_one_line(e)}") from e
        source = obj
    if isinstance(source, EnvFamily):
        if source.name != name:
            raise FamilyImportError(f"environment family {name!r} ({where}) points to EnvFamily {source.name!r}")
        return source
    if isinstance(source, ModuleType):
        try:
            return EnvFamily.from_module(name, source)
        except TypeError as e:  # a required member missing: named, as an import failure is
            raise FamilyImportError(f"environment family {name!r} ({where}) cannot be used: {e}") from e
    raise FamilyImportError(f"environment family {name!r} ({where}): expected a module or an EnvFamily, got "
                            f"{type(source).__name__}")


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (a SyntaxError's names the file and line; SystemExit's is its code)."""
    if isinstance(e, SyntaxError):
        return f"{e.msg} ({e.filename}, line {e.lineno})"
    return " ".join(str(e).split()) or "(no message)"


def _make_family_env(name: str, **kwargs: object) -> TextEnv:
    """The gymnasium entry point of a family registered without an environment class of its own."""
    return family(name).make_env(**kwargs)


def _register_gym_id(env_id: str, entry_point: str | Callable[..., TextEnv], name: str, origin: str) -> None:
    owner = _GYM_IDS.get(env_id)
    if owner == name:
        return
    if owner is not None or env_id in gymnasium.registry:
        taken = f"environment family {owner!r}" if owner is not None else "another package"
        # A warning, not an error: the family itself works; only its gymnasium id is missing.
        warnings.warn(f"environment family {name!r} ({origin}) gets no gymnasium id: {env_id} is taken by {taken}; "
                      f"register it in code with register_family(..., gym_id=...) under another id", stacklevel=3)
        return
    # No step limit wrapper: each env enforces its own limit and the contract's after-end behaviour. Gymnasium's
    # passive checker stays on: it looks at the first reset and step only, so it costs nothing afterwards.
    gymnasium.register(id=env_id, entry_point=entry_point, order_enforce=False)
    _GYM_IDS[env_id] = name
