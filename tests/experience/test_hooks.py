import pytest

from dreamgym.experience import hooks


def test_a_hook_the_family_lacks_is_none_and_a_family_that_fails_to_import_is_an_error(monkeypatch):
    assert hooks.family_hook("", "model_state") is None  # no family: nothing to look up
    assert hooks.family_hook("dial", "model_state") is None  # the dial writes whole states
    assert hooks.family_hook("alfworld", "model_state") is not None
    assert hooks.observation_hooks("dial") is None and hooks.observation_hooks("alfworld") is not None

    import dreamgym.envs

    def broken(name):
        raise ModuleNotFoundError("No module named 'alfworld_engine'")

    monkeypatch.setattr(dreamgym.envs, "family", broken)
    # Before, a missing optional dependency silently gave no hook, so the model wrote (and read) other states.
    with pytest.raises(ImportError, match="'alfworld'.*alfworld_engine"):
        hooks.family_hook("alfworld", "model_state")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="unknown environment family"):
        hooks.family_hook("no-such-family", "model_state")


def test_a_hook_set_to_none_on_a_family_counts_as_absent(monkeypatch):
    """Families may declare optional hooks as attributes that are None."""
    import dreamgym.envs

    class Family:
        model_observation = None
        state_after = staticmethod(lambda previous, written: written)

    monkeypatch.setattr(dreamgym.envs, "family", lambda name: Family)
    assert hooks.family_hook("x", "model_observation") is None and hooks.family_hook("x", "state_after")
    assert hooks.observation_hooks("x") is None
