"""DreamGym: train LLM agents with RL on synthetic experience from a reasoning experience model.

This package root names the version and registers the environment families' gymnasium ids (strings only, no
environment is imported): the built-in ones (`dreamgym/Dial-v0`, ...) and those of the families installed packages
declare in the `dreamgym.envs` entry-point group (`dreamgym/<Name>-v0`, see `dreamgym.envs.registry`). So
`gymnasium.make("dreamgym/Dial-v0")` works after `import dreamgym`, and `gymnasium.make("dreamgym:dreamgym/Dial-v0")`
works with no import at all (gymnasium imports the module named before the colon). Import the concept you need from
its own module (`dreamgym.types`, `dreamgym.env`, `dreamgym.envs`, `dreamgym.llm`, ...). It also drops the few
log records of other libraries that say nothing to a user (`dreamgym.utils.quiet`), before any of them is imported.
"""

__version__ = "0.1.0"

from dreamgym.utils.quiet import quiet_libraries  # noqa: E402

quiet_libraries()

import dreamgym.envs  # noqa: E402, F401 - registers the built-in families and their gymnasium ids
from dreamgym.envs.registry import register_entry_points  # noqa: E402

# After the built-in families, so an entry point that takes a built-in name is the one reported.
register_entry_points()
