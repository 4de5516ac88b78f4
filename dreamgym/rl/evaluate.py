"""Evaluation of an agent policy on environment tasks, with confidence intervals, and `dreamgym eval`.

Owns: `EvalConfig`, `evaluate_policy` (every (task, seed) pair played once through the rollout engine, in one
batch), `EvalResult` (success rate with its Wilson 95% interval, mean reward, mean steps, n), the
two-proportion z-test used to call an improvement significant, `episode_rows` (each episode's outcome, for pairing),
`load_policy` (a preset, a local model, or a checkpoint written by a trainer, full or LoRA) and the `dreamgym eval`
command (a local policy, or one served by OpenAI-compatible servers at `http://HOST:PORT/v1#MODEL`; `--episodes-out`
writes every episode as trajectories).
Must not know: trainers' internals. `evaluate_policy` gets a `TextEnv` factory and never imports a concrete
environment; only the command line looks an environment family up by name.

Episodes that end by an environment failure (crash, timeout, budget) are not the policy's doing: they are
left out of n and reported as `n_failed`. An unparseable reply counts as a failure of the policy.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dreamgym.llm.base import GENERATION_TIMEOUT_S
from dreamgym.config import ranged, validate_config
from dreamgym.agent import AgentConfig
from dreamgym.env import TextEnv
from dreamgym.rl.budget import RealStepBudget
from dreamgym.episode import Episode, RolloutConfig, rollout_metrics
from dreamgym.rl.rollout import run_shared
from dreamgym.types import Task


@dataclass
class EvalConfig:
    temperature: float = ranged(0.0, ge=0)
    """Policy sampling temperature during evaluation (0 = greedy)."""
    top_p: float = ranged(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    sample_seed: int = ranged(0, ge=0, le=2**32 - 1)
    """Seed of the policy's sampling (with temperature > 0)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Prompt settings; must match the ones the policy was trained with (`dreamgym eval` reads them from a
    checkpoint)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout engine settings (turn cap, tokens per turn, timeouts)."""
    policy_timeout_s: float = ranged(GENERATION_TIMEOUT_S, gt=0)
    """`dreamgym eval` of a served `--policy`: seconds a server may take to answer one generation request; one that
    takes longer fails the evaluation with an error naming this field and is not sent again."""


@dataclass
class EvalResult:
    success_rate: float
    ci_low: float
    ci_high: float
    mean_reward: float
    mean_steps: float
    n: int
    """Episodes counted (environment failures excluded)."""
    n_success: int
    n_failed: int
    """Episodes ended by an environment failure, not counted in n."""
    invalid_action_rate: float
    grounded_action_rate: float = 0.0
    """Share of turns whose action was mapped onto an admissible one (`rollout.ground_actions`)."""
    noop_step_rate: float = 0.0
    """Share of environment steps that did nothing (`info["invalid_action"]`): the rollout metric of the same name,
    so a policy's no-op rate in the real game can be set beside its rate in the dream."""
    failures: dict[str, int] = field(default_factory=dict)
    """The `n_failed` episodes by end reason (`dreamgym.episode.FAILURE_ENDS`: a step that timed out, a reset that
    failed, ...)."""
    episodes: list[Episode] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "episodes"}

    def __str__(self) -> str:
        return (f"success {self.success_rate:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}] (n={self.n}, "
                f"{self.n_success} won), mean reward {self.mean_reward:.3f}, mean steps {self.mean_steps:.2f}, "
                f"env failures {self.n_failed}{self._failure_reasons()}, "
                f"invalid actions {self.invalid_action_rate:.3f}, "
                f"grounded actions {self.grounded_action_rate:.3f}, no-op steps {self.noop_step_rate:.3f}")

    def _failure_reasons(self) -> str:
        return f" ({', '.join(f'{k} {v}' for k, v in sorted(self.failures.items()))})" if self.failures else ""


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (95% for z = 1.96); (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def two_proportion_z_test(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """Pooled two-proportion z-test of H1: p2 > p1. Returns (z, one-sided p-value)."""
    if n1 == 0 or n2 == 0:
        return 0.0, 1.0
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0, 1.0
    z = (k2 / n2 - k1 / n1) / se
    return z, 0.5 * math.erfc(z / math.sqrt(2))


def paired_sign_test(only_first: int, only_second: int) -> float:
    """Exact one-sided McNemar (sign) test of H1: the second policy wins more often than the first, on episodes both
    played with the same task and seed. `only_first` / `only_second`: episodes only that policy won (the discordant
    pairs; episodes both or neither won carry no information). Returns P(X >= only_second) for X ~ Bin(n, 1/2),
    n = only_first + only_second (1.0 when n = 0)."""
    n = only_first + only_second
    return sum(math.comb(n, i) for i in range(only_second, n + 1)) / 2 ** n if n else 1.0


def paired_mean_difference(first: Sequence[float], second: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Mean of `second[i] - first[i]` over episodes both policies played with the same task and seed, and the half
    width of its normal-approximation interval (95% for z = 1.96): z * sd / sqrt(n), sd with n - 1 in the
    denominator. Pairing matters for a graded reward such as WebShop's: most of the spread is between tasks, and it
    cancels in the differences. Returns (0.0, inf) for fewer than two pairs."""
    if len(first) != len(second):
        raise ValueError(f"paired_mean_difference: {len(first)} first values but {len(second)} second values")
    n = len(first)
    if n < 2:
        return 0.0, math.inf
    d = [b - a for a, b in zip(first, second)]
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return mean, z * sd / math.sqrt(n)


def evaluate_policy(backend: Any, env_factory: Callable[[], TextEnv], tasks: Sequence[Task], seeds: Sequence[int],
                    config: EvalConfig | None = None, *, budget: RealStepBudget | None = None) -> EvalResult:
    """Play every task once per seed (the seed is the environment seed) and summarise the outcome."""
    cfg = config or EvalConfig()
    rollout = dataclasses.replace(cfg.rollout, temperature=cfg.temperature, top_p=cfg.top_p)
    all_tasks = [t for _ in seeds for t in tasks]
    task_seeds = [int(s) for s in seeds for _ in tasks]
    # Several processes: each plays its share of the episodes; all of them are summarised on every rank.
    episodes = run_shared(backend, env_factory, all_tasks, group_size=1, seed=cfg.sample_seed, config=rollout,
                          budget=budget, agent=cfg.agent, policy_version="eval", task_seeds=task_seeds)
    return summarize(episodes)


def summarize(episodes: Sequence[Episode]) -> EvalResult:
    ok = [e for e in episodes if e.trainable]
    n, k = len(ok), sum(e.won for e in ok)
    lo, hi = wilson_interval(k, n)
    # The per-turn rates are the rollout engine's own, so an evaluation and a (dream) training batch read alike.
    m = rollout_metrics(episodes)
    return EvalResult(success_rate=k / n if n else 0.0, ci_low=lo, ci_high=hi,
                      mean_reward=sum(e.reward for e in ok) / n if n else 0.0,
                      mean_steps=sum(sum(t.stepped for t in e.turns) for e in ok) / n if n else 0.0,
                      n=n, n_success=k, n_failed=len(episodes) - n,
                      invalid_action_rate=m["invalid_action_rate"], grounded_action_rate=m["grounded_action_rate"],
                      noop_step_rate=m["noop_step_rate"],
                      failures=dict(Counter(e.end_reason or "no_turn" for e in episodes if not e.trainable)),
                      episodes=list(episodes))


def episode_rows(episodes: Sequence[Episode]) -> list[dict[str, Any]]:
    """One record per episode (task id, seed, won, reward, steps, whether an environment failure ended it and, if
    so, its end reason and error), so two policies evaluated on the same tasks and seeds can be compared pair by pair
    (`dreamgym.rl.compare`) and a failed episode says why."""
    return [{"task": e.task.id, "seed": e.seed, "won": bool(e.won), "reward": float(e.reward),
             "steps": len(e.turns), "failed": not e.trainable,
             **({"end_reason": e.end_reason, "error": (e.error or "")[:300]} if not e.trainable else {})}
            for e in episodes]


# --------------------------------------------------------------------------------------------- loading policies
def load_policy(spec: str, device: str | None = None, quantize: str = "none") -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, checkpoint meta) for a preset name, local model directory, Hugging Face id, or a
    trainer checkpoint (a directory with `trainer_state.json`: full weights under `model/`, or a LoRA adapter
    under `adapter/` on top of the base preset recorded in the meta). Meta is {} for non-checkpoints.
    `quantize` ("4bit") loads the base weights quantized; a full-weight checkpoint is never quantized."""
    from dreamgym.llm.presets import load_preset

    path = Path(spec)
    meta_file = path / "trainer_state.json"
    if not meta_file.is_file():
        model, tok = load_preset(spec, device=device, quantize=quantize)
        return model, tok, {}
    meta = json.loads(meta_file.read_text())
    if meta.get("kind") == "lora":
        from peft import PeftModel
        from transformers import AutoTokenizer

        base, _ = load_preset(meta["base"], device=device, quantize=quantize)
        model = PeftModel.from_pretrained(base, str(path / "adapter"))
        model.eval()
        return model, AutoTokenizer.from_pretrained(str(path / "adapter")), meta
    if quantize != "none":
        raise ValueError(f"{spec} holds full weights, which train in full precision; quantize applies to LoRA bases")
    model, tok = load_preset(str(path / "model"), device=device)
    return model, tok, meta


# Rollout settings that are part of the policy's interface, read from a trainer checkpoint by `dreamgym eval`
# unless given on the command line (the rest, e.g. timeouts and the turn cap, belong to the evaluation).
ROLLOUT_KEYS_FROM_CHECKPOINT = ("max_new_tokens", "ground_actions")


def agent_config_from_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The `agent` section a checkpoint was trained with ({} when unknown)."""
    return dict((meta.get("config") or {}).get("agent") or {})


# --------------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    from dreamgym.config import CommandParser, ConfigError, fail, from_dict, load_config, parse_overrides, to_dict
    from dreamgym.envs import family
    from dreamgym.llm.capabilities import LLMEndpointError
    from dreamgym.llm.hf import HFBackend
    from dreamgym.llm.presets import PresetError

    parser = CommandParser(prog="dreamgym eval", description="Evaluate a policy on real environment tasks.")
    parser.add_argument("--env", required=True, help="environment family (dial, webshop, alfworld, ...)")
    parser.add_argument("--policy", default="tiny",
                        help="preset name, model directory, HF id or trainer checkpoint; or the policy served at "
                             "http://HOST:PORT/v1#MODEL (any OpenAI-compatible server; several URLs comma-separated)")
    parser.add_argument("--tokenizer", default=None,
                        help="with a served --policy: the preset, model directory or trainer checkpoint whose "
                             "tokenizer (and, from a checkpoint, prompt settings) the policy uses (default: #MODEL)")
    parser.add_argument("--split", default="test", help="task split (default: test)")
    parser.add_argument("--seeds", default="0", help="comma-separated environment seeds; each task runs once per seed")
    parser.add_argument("--max-tasks", type=int, default=0, help="evaluate only the first N tasks (0 = all)")
    parser.add_argument("--skip-tasks", type=int, default=0,
                        help="leave out the split's first N tasks, e.g. the ones periodic evaluation during training "
                             "used, so a checkpoint chosen on them is confirmed on tasks it was not chosen on")
    parser.add_argument("--tasks-from", default=None,
                        help="a trajectory file (JSONL/Parquet): evaluate only the split's tasks its episodes played, "
                             "e.g. the fixed task set a run trained on (before --skip-tasks/--max-tasks)")
    parser.add_argument("--config", default=None, help="YAML file with EvalConfig fields")
    parser.add_argument("--json", default=None, help="write the result as JSON to this file")
    parser.add_argument("--episodes-out", default=None,
                        help="write every evaluated episode (task, seed, actions, observations, rewards, policy, "
                             "OpenAI chat messages) to this JSONL file, in the trajectory format")
    parser.add_argument("overrides", nargs="*", help="EvalConfig overrides, e.g. temperature=1.0 agent.history=2")
    args = parser.parse_intermixed_args(argv)
    if args.skip_tasks < 0 or args.max_tasks < 0:
        return fail("eval", "--skip-tasks and --max-tasks must be >= 0")
    try:
        # Everything the command line names is checked before the policy loads.
        cfg = load_config(EvalConfig, args.config, args.overrides)
        given = parse_overrides(args.overrides)
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise ConfigError("--seeds", f"{args.seeds!r} is not a comma-separated list of ints") from None
        if not seeds:
            raise ConfigError("--seeds", "no seed given", "comma-separated ints")
        fam = family(args.env)
        tasks = list(fam.tasks(args.split))
        if args.tasks_from:
            from dreamgym.checks import trajectory_file
            from dreamgym.data import tasks_played_in

            from dreamgym.provenance import check_trajectories

            trajectory_file(args.tasks_from)
            # Another family's episodes name the family, not "no tasks left": their task ids never match.
            check_trajectories(args.tasks_from, args.env)
            tasks, _ = tasks_played_in(tasks, args.tasks_from)
        from dreamgym import checks, provenance
        from dreamgym.utils.filecheck import output_path

        for option, out in (("--json", args.json), ("--episodes-out", args.episodes_out)):
            if out:
                try:
                    output_path(out, "file")
                except ValueError as e:
                    raise ConfigError(option, str(e)) from None
        served = served_policy(args.policy, args.tokenizer)
        if served is None and args.tokenizer:
            raise ConfigError("--tokenizer", "only a served --policy (http://HOST:PORT/v1#MODEL) takes a tokenizer")
        # A folder: whole weights, and a trained policy of this family.
        if served is None and Path(args.policy).exists():
            try:
                checks.loadable_model_folder(Path(args.policy))
                found = provenance.of_model_folder(args.policy)
                if found is not None:
                    provenance.require(found, family=args.env)
            except ValueError as e:
                raise ConfigError("--policy", str(e)) from None
        model, tok, meta = load_policy(args.policy if served is None else served[2])
        if meta and "agent" not in given:
            # The prompt format must be the one the policy was trained with.
            cfg.agent = from_dict(AgentConfig, agent_config_from_meta(meta), prefix="agent.")
        # So must the reply length it learned to write and the action grounding its environments applied.
        trained_rollout = (meta.get("config") or {}).get("rollout") or {}
        for key in ROLLOUT_KEYS_FROM_CHECKPOINT:
            if key in trained_rollout and key not in given.get("rollout", {}):
                setattr(cfg.rollout, key, type(getattr(cfg.rollout, key))(trained_rollout[key]))
        validate_config(cfg)
        backend: Any = HFBackend(model, tok) if served is None else _served_backend(served, tok, cfg.policy_timeout_s)
    except (ValueError, PresetError, OSError, ImportError) as e:
        return fail("eval", e)
    tasks = tasks[args.skip_tasks:]
    if args.max_tasks:
        tasks = tasks[: args.max_tasks]
    if not tasks:
        kept = f"of those {args.tasks_from} played " if args.tasks_from else ""
        return fail("eval", f"no {args.split} tasks {kept}left after skipping {args.skip_tasks}")
    try:
        result = evaluate_policy(backend, lambda: fam.make_env(args.split), tasks, seeds, cfg)
    except LLMEndpointError as e:  # a served policy's server gone or too slow: said in one line, naming the setting
        return fail("eval", e)
    finally:
        if served is not None:
            backend.close()
    print(f"{args.policy} on {args.env}/{args.split}: {result}")
    if args.json:
        from dreamgym.utils.paths import atomic_write_text

        rows = episode_rows(result.episodes)
        atomic_write_text(args.json, json.dumps({"policy": args.policy, "env": args.env, "split": args.split,
                                                 "seeds": seeds, "tasks_from": args.tasks_from,
                                                 "skip_tasks": args.skip_tasks, "max_tasks": args.max_tasks,
                                                 "config": to_dict(cfg),
                                                 **result.to_dict(), "episodes": rows}, indent=1))
    if args.episodes_out:
        from dreamgym.data import write_jsonl

        write_jsonl(args.episodes_out, [e.to_trajectory(policy=args.policy) for e in result.episodes])
    return 0


def served_policy(spec: str, tokenizer: str | None) -> tuple[list[str], str | None, str] | None:
    """(server URLs, served model name, where its tokenizer loads from) for a served `--policy`
    (`http://HOST:PORT/v1#MODEL`, several URLs comma-separated), None for a local one. The tokenizer comes from
    `tokenizer`, else from the served model's name (a preset, a folder on this machine, a cached HF id)."""
    if not spec.startswith(("http://", "https://")):
        return None
    from dreamgym.config import ConfigError
    from dreamgym.llm.http import split_urls

    try:
        urls, name = split_urls(spec)
    except ValueError as e:
        raise ConfigError("--policy", str(e)) from None
    where = tokenizer or name
    if not where:
        raise ConfigError("--policy", f"{spec} names no model: add #MODEL (the served model's name, also where its "
                                      "tokenizer loads from) or give --tokenizer")
    return urls, name, where


def _served_backend(served: tuple[list[str], str | None, str], tokenizer: Any, timeout_s: float) -> Any:
    """The rollout engine's backend over the servers of a served policy: prompts written by `tokenizer`, each server
    probed first (`dreamgym.llm.http.HTTPTokenBackend`), so one it cannot use is refused in one line; each request
    waits `timeout_s` seconds for its answer (`policy_timeout_s`)."""
    from dreamgym.llm.http import HTTPTokenBackend

    urls, name, _ = served
    return HTTPTokenBackend(urls, tokenizer, served_model=name, timeout=timeout_s, timeout_field="policy_timeout_s")
