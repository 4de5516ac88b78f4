"""DreamGym: train LLM agents with RL on synthetic experience from a reasoning experience model.

This package root only names the version; import the concept you need from its own module
(`dreamgym.types`, `dreamgym.env`, `dreamgym.llm`, ...). Importing `dreamgym.envs` registers the
environments with gymnasium under the `dreamgym/` namespace.
"""

__version__ = "0.1.0"
