"""Concrete environment families, and the public face of the family registry.

Owns: the table of built-in families (dial, webshop, alfworld, textworld, miniwob, webarena_lite) with their
gymnasium ids `dreamgym/<Name>-v0`, registered by module path, so importing this package imports none of them.
Must not know: models, torch, trainers.

What a family offers is `EnvFamily` (`dreamgym.envs.family`: the required surface and the optional hooks, each
documented there); `family(name)` finds one, `family_names()` lists them, `register_family` and the
`dreamgym.envs` entry-point group add one (`dreamgym.envs.registry`), and `check_family` validates one
(`dreamgym.envs.check`).
"""


from dreamgym.envs.check import CheckFamilyError, check_family
from dreamgym.envs.family import OPTIONAL_HOOKS, EnvFamily, FamilyHooks, ScriptedPolicy
from dreamgym.envs.registry import FamilyImportError, UnknownFamilyError, family, family_names, register_family

_BUILTIN = (
    # name, family module, gymnasium id, environment class
    ("dial", "dreamgym.envs.dial", "dreamgym/Dial-v0", "dreamgym.envs.dial:DialEnv"),
    ("webshop", "dreamgym.envs.webshop", "dreamgym/WebShop-v0", "dreamgym.envs.webshop.env:WebShopEnv"),
    ("alfworld", "dreamgym.envs.alfworld", "dreamgym/ALFWorld-v0", "dreamgym.envs.alfworld.env:ALFWorldEnv"),
    ("textworld", "dreamgym.envs.textworld_env", "dreamgym/TextWorld-v0", "dreamgym.envs.textworld_env:TextWorldEnv"),
    ("miniwob", "dreamgym.envs.web.miniwob", "dreamgym/MiniWoB-v0", None),
    ("webarena_lite", "dreamgym.envs.web.webarena", "dreamgym/WebArenaLite-v0", None),
)
for _name, _module, _gym_id, _env_class in _BUILTIN:
    register_family(_name, _module, gym_id=_gym_id, env_entry_point=_env_class)
BUILTIN_FAMILIES: tuple[str, ...] = tuple(row[0] for row in _BUILTIN)
"""The names of the families shipped with DreamGym (others come from installed packages' entry points)."""


__all__ = ["BUILTIN_FAMILIES", "CheckFamilyError", "EnvFamily", "FamilyHooks", "FamilyImportError", "OPTIONAL_HOOKS",
           "ScriptedPolicy", "UnknownFamilyError", "check_family", "family", "family_names", "register_family"]
