import pytest

from dreamgym.envs import FamilyHooks
from dreamgym.experience import hooks


def test_a_hook_the_family_lacks_is_the_default_and_a_family_that_fails_to_import_is_an_error(monkeypatch):
    none = hooks.family_hooks("")  # no family: every hook is the default
    assert type(none) is FamilyHooks and none.model_state("s") == "s" and not none.writes_observations
    assert hooks.family_hooks("dial").defined == frozenset()  # the dial writes whole states
    alf = hooks.family_hooks("alfworld")
    assert {"model_state", "complete_state"} <= alf.defined and alf.writes_observations

    import dreamgym.envs

    def broken(name):
        raise ModuleNotFoundError("No module named 'alfworld_engine'")

    monkeypatch.setattr(dreamgym.envs, "family", broken)
    # Before, a missing optional dependency silently gave no hook, so the model wrote (and read) other states.
    with pytest.raises(ImportError, match="'alfworld'.*alfworld_engine"):
        hooks.family_hooks("alfworld")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="unknown environment family"):
        hooks.family_hooks("no-such-family")


def test_a_module_hook_set_to_none_is_absent_and_half_a_pair_writes_no_observations():
    """Families may declare optional hooks as module attributes that are None."""
    from dreamgym.envs import EnvFamily, family

    dial = family("dial")
    h = FamilyHooks.of({"state_after": lambda previous, written: written + "!"})
    assert h.defined == {"state_after"} and not h.writes_observations and h.model_observation("s") == "s"
    import types

    mod = types.ModuleType("halfpair")
    for name in ("make_env", "tasks", "POLICIES", "MAX_STEPS", "admissible_from_state", "parse_goal", "explain"):
        setattr(mod, name, getattr(dial, name))
    mod.model_observation = None
    mod.state_after = lambda previous, written: written
    fam = EnvFamily.from_module("halfpair", mod)
    assert fam.hooks.defined == {"state_after"} and not fam.hooks.writes_observations
