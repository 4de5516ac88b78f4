"""DreamGym: train LLM agents with RL on synthetic experience from a reasoning experience model.

This package root names the version and registers the environment families' gymnasium ids (`dreamgym/Dial-v0`,
...; strings only, no environment is imported), so `gymnasium.make("dreamgym/Dial-v0")` works after
`import dreamgym`, and `gymnasium.make("dreamgym:dreamgym/Dial-v0")` works with no import at all (gymnasium
imports the module named before the colon). Import the concept you need from its own module (`dreamgym.types`,
`dreamgym.env`, `dreamgym.envs`, `dreamgym.llm`, ...).
"""

__version__ = "0.1.0"

import dreamgym.envs  # noqa: E402, F401 - registers the gymnasium ids
