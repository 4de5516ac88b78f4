"""Concrete environments, registered with gymnasium as `dreamgym/<Name>-v0`.

Owns: the registration table (entry points are strings, so importing this module loads no environment).
Must not know: models, torch, trainers.
"""

import gymnasium

_REGISTRY = {
    "dreamgym/Dial-v0": "dreamgym.envs.dial:DialEnv",
    "dreamgym/WebShop-v0": "dreamgym.envs.webshop.env:WebShopEnv",
    "dreamgym/ALFWorld-v0": "dreamgym.envs.alfworld.env:ALFWorldEnv",
    "dreamgym/TextWorld-v0": "dreamgym.envs.textworld_env:TextWorldEnv",
}

for _id, _entry in _REGISTRY.items():
    if _id not in gymnasium.registry:
        # No step limit wrapper: each env enforces its own limit and the contract's after-end behaviour.
        gymnasium.register(id=_id, entry_point=_entry, disable_env_checker=True, order_enforce=False)
