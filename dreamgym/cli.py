"""The `dreamgym` command line: one subcommand per job, each implemented by the module that owns it.

Owns: the list of subcommands and their one-line help. Each entry points at a `main(argv) -> int` function
in its own module, imported only when that subcommand runs (so `dreamgym --help` is fast and a missing
optional dependency only affects its own subcommand).
Must not know: how any subcommand works.
"""

from __future__ import annotations

import importlib
import sys

from dreamgym.config import ConfigError, fail

COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("dreamgym.commands.recipe:quickstart_main",
                   "the full recipe on one environment with the tiny preset (the README's main job)"),
    "collect": ("dreamgym.commands.collect:main", "write offline real trajectories from oracle/noisy/random policies"),
    "check-family": ("dreamgym.commands.check_family:main",
                     "check an environment family against its contract, replaying real episodes through its hooks"),
    "train-em": ("dreamgym.experience.fidelity:train_em_main",
                 "train the reasoning experience model (SFT), ending with a held-out fidelity report"),
    "export-em": ("dreamgym.experience.checkpoint:export_main",
                  "write a trained experience model as a plain HF folder (LoRA merged) for vLLM or serve-model"),
    "eval-em": ("dreamgym.experience.fidelity:main", "fidelity of the experience model on held-out real transitions"),
    "train": ("dreamgym.commands.train:main",
              "train an agent: --algo grpo|ppo|sft|dpo, mode=real|dream|s2r (real RL, DreamGym, sim-to-real)"),
    "eval": ("dreamgym.rl.evaluate:main", "evaluate a policy on held-out real test tasks"),
    "table": ("dreamgym.commands.table:main", "reproduce the shape of the paper's Table 1 at small scale"),
    "serve-model": ("dreamgym.llm.server:main", "serve a local model as an OpenAI-compatible endpoint"),
    "serve-env": ("dreamgym.envserve.server:main",
                  "serve an environment family, real or synthetic (--dream), over OpenEnv's protocol"),
    "webshop": ("dreamgym.envs.webshop.server:cli_main", "WebShop tools: `dreamgym webshop serve`"),
    "alfworld": ("dreamgym.envs.alfworld.games:cli_main", "ALFWorld tools: `dreamgym alfworld generate`"),
    "presets": ("dreamgym.llm.presets:main", "build or inspect model presets (tiny, smollm2-135m)"),
    "view": ("dreamgym.view.command:main", "a local web page of runs, curves, results and real-vs-dream episodes"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-V", "--version"):
        from dreamgym import __version__

        print(f"dreamgym {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: dreamgym [--version] <command> [args...]   (dreamgym <command> --help for details; also "
              "`python -m dreamgym`)\n\ncommands:")
        for name, (_, help_) in COMMANDS.items():
            print(f"  {name:<12} {help_}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"dreamgym: unknown command {name!r}; run `dreamgym --help`", file=sys.stderr)
        return 2
    module, func = COMMANDS[name][0].split(":")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        print(f"dreamgym {name}: not available ({e})", file=sys.stderr)
        return 2
    from dreamgym.envs.registry import FamilyImportError

    try:
        return int(fn(argv[1:]) or 0)
    except (ConfigError, FamilyImportError) as e:  # found after start-up (a bad config, an installed family that
        return fail(name, e)                      # does not load): still one line, never a traceback


if __name__ == "__main__":
    sys.exit(main())
