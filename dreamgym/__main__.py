"""`python -m dreamgym`: the `dreamgym` command, for an environment where the console script is not on PATH (a
notebook's kernel, a venv used without activating it).

Owns: nothing but the hand-off to `dreamgym.cli.main`.
Must not know: any command.
"""

import sys

from dreamgym.cli import main

if __name__ == "__main__":
    sys.exit(main())
