"""Seeds derived from other seeds: every place DreamGym turns numbers or text into a seed goes through here.

Owns: `mix_seed` (integers -> a 31-bit seed, with a `basis` naming the stream), `text_seed` (strings -> a 32-bit
seed) and `row_seed` (the sampling seed of one row of a seeded batch).
Must not know: anything else in DreamGym (a leaf: the LLM seam, the rollout, the synthetic environment and the
trainers all import it).

They are three functions, not one, because their inputs and contracts differ, and every value they give is pinned by
recorded runs (changing any of them would change an RNG stream):
- `mix_seed` mixes integers; its `basis` separates streams that mix the same integers (the trainers' order seeds
  and the rollout's environment and turn seeds both mix (run seed, index)).
- `text_seed` hashes strings (an episode id and an action), which `mix_seed` cannot take.
- `row_seed` must give `row_seed(s, 0) == s` (a request sent alone with seed `row_seed(s, i)` samples what row i
  of the batch would) and stay 64-bit, which the multiplicative mix cannot.
"""

from __future__ import annotations

import zlib

TRAINER_BASIS = 0x2545F491
"""`mix_seed`'s default basis: the trainers' minibatch and data orders and the run loop's task draws and rollouts."""
ROLLOUT_BASIS = 0x9E3779B1
"""The rollout engine's basis: the environment seed of a task and the sampling seed of a turn."""
AUDIT_BASIS = 0x5BD1E995
"""The dream audit's basis: which of an iteration's dream episodes are replayed in the real environment."""

_GOLDEN = 0x9E3779B97F4A7C15  # odd 64-bit constant: distinct (seed, index) pairs give distinct row seeds
_MASK64 = (1 << 64) - 1


def mix_seed(*xs: int, basis: int = TRAINER_BASIS) -> int:
    """A deterministic 31-bit seed from integers (e.g. (run seed, iteration)); the low 32 bits of each count.
    `basis` starts the mix: the same integers under different bases give unrelated seeds."""
    h = basis
    for x in xs:
        h = (h * 1_000_003 ^ (int(x) & 0xFFFFFFFF)) & 0x7FFFFFFF
    return h


def text_seed(*parts: str) -> int:
    """A deterministic 32-bit seed from strings: the CRC-32 of their UTF-8 text joined by the unit separator."""
    return zlib.crc32("\x1f".join(parts).encode())


def row_seed(seed: int, index: int) -> int:
    """The sampling seed of request `index` in a batch whose `SamplingParams.seed` is `seed`, shared by all
    backends. `row_seed(s, 0) == s`, so a request sent alone with seed `row_seed(s, i)` samples what request i
    of the batch would; identical prompts in one batch still get different samples."""
    return (seed + index * _GOLDEN) & _MASK64
