"""The one door from the experience model to environment families: their optional hooks (`FamilyHooks`).

Owns: finding the hooks of the family a transition names, and what no family means.
Must not know: any concrete family, what a hook computes, prompts, models.

The experience model calls a family's hooks directly (`family_hooks(env).model_state(state)`); a hook the family
does not define is the default `dreamgym.envs.family.FamilyHooks` gives, the family-free behaviour, and so are all
hooks when no family is named. A family that cannot be imported (a missing optional dependency) or an unknown
family name is an error: falling back to the defaults there would silently change what the model writes and reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dreamgym.envs.family import FamilyHooks


def family_hooks(env: str) -> FamilyHooks:
    """The hooks of family `env`, or the defaults when `env` is empty.

    Raises ImportError (naming the family) when the family's module cannot be imported, and ValueError for a
    family `dreamgym.envs` does not know."""
    # Imported here: the registry is loaded by name on first use, so importing the experience model pulls in no
    # environment code.
    from dreamgym.envs import family
    from dreamgym.envs.family import FamilyHooks

    if not env:
        return FamilyHooks()
    try:
        return family(env).hooks
    except ImportError as e:
        raise ImportError(f"environment family {env!r} could not be imported for its hooks: {e}") from e
