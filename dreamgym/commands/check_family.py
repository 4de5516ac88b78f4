"""The `dreamgym check-family` command: `dreamgym.envs.check.check_family` from the command line.

Owns: the command's options, reading the recorded episodes it is given, printing the behaviour report and the exit
code (0: the family keeps its contract; 1: a broken rule or a disagreement, printed; 2: bad input, one line: an
option the family cannot take (a split it has no tasks in, a keyword its `tasks` or `make_env` lacks, a negative
seed) or a family that does not load).
Must not know: the checks themselves (`dreamgym.envs.check`), any concrete family, models, torch.
"""

from __future__ import annotations

import sys

from dreamgym.checks import family_choices
from dreamgym.commands.collect import _family, _kv, check_env_kwargs, check_task_kwargs
from dreamgym.config import CommandParser, at_least, fail
from dreamgym.data import load_trajectories
from dreamgym.envs import CheckFamilyError, check_family, family
from dreamgym.provenance import check_trajectories
from dreamgym.types import Trajectory


def main(argv: list[str] | None = None) -> int:
    """`dreamgym check-family`: `check_family` from the command line; prints the behaviour report. Exit 0 when the
    family keeps its contract, 1 when it does not (the broken rule, or the disagreements, printed), 2 on bad
    input."""
    ap = CommandParser(prog="dreamgym check-family", description=(
        "Check an environment family against its contract: types on real play, and its members and hooks replayed "
        "on real episodes (its scripted policies' own, probe steps and --data files), counting disagreements."))
    ap.add_argument("--env", required=True, type=_family, help=f"environment family: {family_choices()}")
    ap.add_argument("--data", action="append", default=[], metavar="FILE",
                    help="recorded real episodes of the family (a collected .jsonl/.parquet) to replay too, repeatable")
    ap.add_argument("--episodes-per-policy", type=at_least(1), default=1,
                    help="episodes each scripted policy plays (default: %(default)s)")
    ap.add_argument("--split", default="train", help="split whose tasks are played (default: %(default)s)")
    ap.add_argument("--splits", default="train,test", help="splits whose task lists are checked (default: %(default)s)")
    ap.add_argument("--seed", type=at_least(0), default=0, help="seed of the episodes (default: %(default)s)")
    ap.add_argument("--env-kw", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                    help="keyword argument for the family's make_env (YAML value), repeatable")
    ap.add_argument("--task-kw", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                    help="keyword argument for the family's tasks (YAML value), repeatable")
    ap.add_argument("--step-limit", type=at_least(1), default=None,
                    help="the step limit make_env enforces with these --env-kw (default: the family's MAX_STEPS)")
    args = ap.parse_args(argv)
    splits = [s for s in args.splits.split(",") if s]
    try:
        if not splits:
            raise ValueError(f"--splits {args.splits!r} names no split")
        check_env_kwargs(args.env, dict(args.env_kw))
        check_task_kwargs(args.env, dict(args.task_kw))
        for option, split in [("--split", args.split)] + [("--splits", s) for s in splits]:
            _check_split(args.env, option, split, dict(args.task_kw))
        episodes: list[Trajectory] = []
        for path in args.data:
            check_trajectories(path, args.env)
            episodes += load_trajectories(path)
    except (ValueError, OSError) as e:
        return fail("check-family", e)
    try:
        report = check_family(args.env, split=args.split, splits=splits,
                              task_kwargs=dict(args.task_kw), env_kwargs=dict(args.env_kw), seed=args.seed,
                              episodes_per_policy=args.episodes_per_policy, episodes=episodes,
                              step_limit=args.step_limit)
    except CheckFamilyError as e:
        print(e.report.summary() if e.report is not None else e, file=sys.stderr)
        # The verdict last, as on success: which checks disagreed, or that a rule broke (the line above names it).
        broken = [c for c, n in e.report.disagreements.items() if n] if e.report is not None else []
        print(f"environment family {args.env!r} does not keep its contract: "
              + (f"disagreements in {', '.join(broken)}" if broken else "a rule is broken"), file=sys.stderr)
        return 1
    print(report.summary())
    print(f"environment family {args.env!r} keeps its contract")
    return 0


def _check_split(name: str, option: str, split: str, task_kwargs: dict[str, object]) -> None:
    """A split the family has tasks in. "train" and "test" are left to `check_family`: every family must have them,
    so an empty or failing one is the family's fault (exit 1); any other name is the user's to get right, and a
    family without tasks there, or refusing the name with a ValueError or KeyError, makes it bad input."""
    if split in ("train", "test"):
        return
    try:
        tasks = family(name).tasks(split, **task_kwargs)
    except (ValueError, KeyError) as e:
        raise ValueError(f"{option} {split!r}: environment family {name!r} refuses it ({e})") from None
    if not tasks:
        raise ValueError(f"{option} {split!r}: environment family {name!r} has no tasks in that split")


if __name__ == "__main__":
    sys.exit(main())
