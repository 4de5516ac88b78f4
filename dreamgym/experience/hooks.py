"""The one door from the experience model to environment families: their optional hooks, by name.

Owns: looking a hook up on a family reached through `dreamgym.envs.family`, and what a missing one means.
Must not know: any concrete family, what a hook computes, prompts, models.

A hook the family does not define (absent, or None on a family structure whose optional hooks are attributes)
gives None, and the caller falls back to the family-free behaviour. A family that cannot be imported (a missing
optional dependency) or an unknown family name is an error: returning None there would silently change what the
model writes and reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def family_hook(env: str, name: str) -> Callable[..., Any] | None:
    """The family's hook `name`, or None when `env` is empty or the family does not define it.

    Raises ImportError (naming the family) when the family's module cannot be imported, and ValueError for a
    family `dreamgym.envs` does not know."""
    if not env:
        return None
    from dreamgym.envs import family

    try:
        fam = family(env)
    except ImportError as e:
        raise ImportError(f"environment family {env!r} could not be imported for its {name!r} hook: {e}") from e
    return getattr(fam, name, None)


def observation_hooks(env: str) -> tuple[Callable[..., str], Callable[..., str]] | None:
    """The family's (`model_observation`, `state_after`) pair, or None unless it has both."""
    observe, after = family_hook(env, "model_observation"), family_hook(env, "state_after")
    return (observe, after) if observe and after else None
