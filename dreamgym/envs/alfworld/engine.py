"""The real ALFWorld engine: TextWorld's PDDL environment with fast-downward and ALFWorld's wrappers.

Owns: building one engine (`PddlEnv` + `AlfredDemangler` + `AlfredInfos`, the wrappers ALFWorld registers
with `textworld.gym`), and three memoisations that make it usable for RL on two cores without changing a
single observation (checked in tests/envs/test_alfworld.py against the unpatched engine), plus one fix:
- fast-downward's translator overwrites `sys.argv`; the wrapper puts it back.
The memoisations:
- `fast_downward.pddl2sas`: the PDDL-to-SAS translation is pure Python and the engine runs it twice on
  `load` and twice again on every `reset` (1-3 s for a kitchen). Same (domain, problem) -> same translation.
- `Rule.parse_conjunctive_query` and the grammar's template parser: the engine re-parses the same few dozen
  grammar strings with tatsu at every step (~70% of a step). Parsed rules are read-only; parsed symbol lists
  are mutated by the caller, so those are handed out as deep copies.
Thread safety: the engine is not thread-safe. Its tatsu grammar parsers keep parse state on shared objects
and the translator rewrites the process-wide `sys.argv`, so two engines reset from two threads at once fail
with grammar errors (measured: 11 of 12 concurrent resets in the rollout engine's thread pool). Every call
into an engine (make, load, reset, step) must hold `ENGINE_LOCK`; `ALFWorldEnv` does.
Must not know: game generation, the TextEnv contract, abstract states, models, torch.
"""

from __future__ import annotations

import copy
import functools
import sys
import threading
from collections import OrderedDict
from typing import Any

from dreamgym.envs.alfworld.knowledge import require

_PATCHED = False
_WRAPPED = False
_MEMO = False
_SAS_CACHE: OrderedDict[tuple, Any] = OrderedDict()
ENGINE_LOCK = threading.RLock()  # one engine call at a time per process (see the module docstring)
SAS_CACHE_SIZE = 16  # translations kept per process (a kitchen's is ~1 MB of text plus the parsed task)


def _wrap_translator() -> None:
    """Wrap `fast_downward.pddl2sas` once: restore `sys.argv` after it (the translator overwrites it with
    ["translate.py", "domain", "task"] for its option parser, which breaks any later argument parsing in the
    caller), and memoise translations when `speed_up_engine` has switched the memo on."""
    global _WRAPPED
    if _WRAPPED:
        return
    fd = require("fast_downward")
    original = fd.pddl2sas

    def pddl2sas(domain: str, problem: str, *args: Any, **kwargs: Any) -> Any:
        key = (domain, problem, args, tuple(sorted(kwargs.items())))
        if _MEMO and key in _SAS_CACHE:
            _SAS_CACHE.move_to_end(key)
            return _SAS_CACHE[key]
        argv = list(sys.argv)
        try:
            out = original(domain, problem, *args, **kwargs)
        finally:
            sys.argv[:] = argv
        if _MEMO:
            _SAS_CACHE[key] = out
            while len(_SAS_CACHE) > SAS_CACHE_SIZE:
                _SAS_CACHE.popitem(last=False)
        return out

    fd.pddl2sas = pddl2sas  # type: ignore[attr-defined]  # patching the engine's module, untyped
    _WRAPPED = True


def speed_up_engine() -> None:
    """Install the memoisations once per process (idempotent; skipped if the engine's internals moved)."""
    global _PATCHED, _MEMO
    _wrap_translator()
    if _PATCHED:
        return
    logic = require("textworld.logic")
    textgen = require("textworld.envs.pddl.textgen")
    if hasattr(logic, "Rule") and hasattr(textgen, "_parse_and_convert"):
        _MEMO = True
        parse_query = logic.Rule.parse_conjunctive_query.__func__
        memo = functools.lru_cache(maxsize=4096)(parse_query)
        logic.Rule.parse_conjunctive_query = classmethod(memo)  # type: ignore[arg-type]  # lru_cache keeps the call
        textgen._parse_and_convert_original = textgen._parse_and_convert  # type: ignore[attr-defined]  # patch
        parse_symbols = functools.lru_cache(maxsize=4096)(
            lambda text, rule_name, trace: textgen._parse_and_convert_original(text, rule_name=rule_name, trace=trace))

        def parse_and_convert(text: str, rule_name: str = "symbols", trace: bool = False, **kw: Any) -> Any:
            if kw:
                return textgen._parse_and_convert_original(text, rule_name=rule_name, trace=trace, **kw)
            return copy.deepcopy(parse_symbols(text, rule_name, trace))

        textgen._parse_and_convert = parse_and_convert  # type: ignore[attr-defined]  # patching the engine
    _PATCHED = True


def make_engine(*, walkthrough: bool = True, facts: bool = False, fast: bool = True) -> Any:
    """A TextWorld PDDL engine with ALFWorld's name demangler, ready for `load(path)`. Each engine loads its own
    copy of fast-downward's library, so reuse one across games instead of calling `textworld.start` per game.
    `walkthrough=True` makes `reset` return the planner's plan in `extra.walkthrough` (stored plans are reused)."""
    textworld = require("textworld")
    require("fast_downward")
    tw_env = require("alfworld.agents.environment.alfred_tw_env")
    envs = require("textworld.envs")
    _wrap_translator()
    if fast:
        speed_up_engine()
    extras = ["gamefile"] + (["walkthrough"] if walkthrough else [])
    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=facts, extras=extras)
    env = envs.PddlEnv(infos)
    for wrapper in (tw_env.AlfredDemangler(), tw_env.AlfredInfos()):
        env = wrapper(env)
    return env
