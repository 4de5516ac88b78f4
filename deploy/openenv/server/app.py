"""OpenEnv's entry points for `dreamgym serve-env`: what `openenv validate`, `uv run server`, `python -m server.app`
and the container recipe (server/Dockerfile) start.

Owns: which command line the server runs (`command`: `$DREAMGYM_SERVE_ENV`, then this process's arguments), `main`
and `app`. Must not know: anything the server does (`dreamgym.envserve.server`).

`main` runs `dreamgym serve-env` with every limit it keeps; `app` is the same server's ASGI app for OpenEnv's tools
that start `server.app:app` under their own uvicorn (built when first asked for, so importing this module loads no
environment or experience model). The bearer token comes from `$DREAMGYM_ENV_TOKEN`, as for the command.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

SERVE_ENV = "DREAMGYM_SERVE_ENV"
"""The environment variable holding `dreamgym serve-env`'s arguments (default: the real dial)."""
DEFAULT_ARGS = "--env dial"


def command(argv: list[str]) -> list[str]:
    """`dreamgym serve-env`'s arguments: `$DREAMGYM_SERVE_ENV`, then `argv` (which win), on all interfaces at
    port 8000 unless they name another."""
    args = shlex.split(os.environ.get(SERVE_ENV) or DEFAULT_ARGS) + argv
    return ["--host", "0.0.0.0", "--port", "8000", *args]  # later --host/--port win in argparse


def main() -> None:
    from dreamgym.envserve.server import main as serve_env

    sys.exit(serve_env(command(sys.argv[1:])))


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(name)
    from dreamgym.envserve.server import TOKEN_ENV, EnvHost, create_env_app, parse_command

    cfg, _ = parse_command(command([]))
    return create_env_app(EnvHost(cfg), token=os.environ.get(TOKEN_ENV) or None)


if __name__ == "__main__":
    main()
