"""Token masks that keep local decoding inside an `OutputConstraint`: its regex through xgrammar's grammar matcher,
its field budgets through a count of marks.

Owns: compiling a constraint's regex for one tokenizer (xgrammar caches compiled grammars), one matcher per
decoded row, the allowed-token bitmask of each decoding step, and the field budgets (`FieldBudget`).
Must not know: what a regex describes (the experience model's format lives in `dreamgym.experience.format`),
sampling, models beyond their vocabulary size.

The bitmask is xgrammar's: int32 words, bit `t % 32` of word `t // 32` set when token `t` is allowed. A budget is
enforced on that bitmask by keeping only the allowed tokens that hold the constraint's mark; the regex keeps marks
out of fields, so such a token closes the field, and the grammar then forces the rest of the closing tag.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import xgrammar as xgr

from dreamgym.llm.base import ConstraintError, FieldBudget, OutputConstraint


GRAMMAR_CACHE_BYTES = 256 << 20
"""Most memory the compiled grammars kept for reuse may hold (xgrammar evicts the least recently used past it): on
the tiny preset's vocabulary a MiniWoB++ state's edit regex compiles to 170-330 KiB, so about a thousand states
(`benchmarks/bench_edit_constraint.py`); a recompile costs milliseconds."""
_EVERY_CHARACTER = "".join(map(chr, (*range(0xD800), *range(0xE000, 0x110000))))
"""Every Unicode scalar value once: a character class matches none of them exactly when it matches nothing."""


def language_empty(regex: str) -> bool | None:
    """Whether no string matches `regex`, read from Python's parse of it (xgrammar's regex syntax is the common
    subset): True when a required part can match nothing (a character class matching no character, such as
    `[^\\s\\S]`, outside every optional or alternative branch that could avoid it), False when some string
    matches, None when Python cannot parse it or it uses what this does not follow (look-arounds, back-references):
    then undecided, never refused."""
    import re._parser as sre  # the standard library's own regex parser

    try:
        tree = sre.parse(regex)
        return _empty(tree, sre, {})
    except (re.error, RecursionError, _Undecided):
        return None


class _Undecided(Exception):
    """A construct `language_empty` does not judge."""


def _empty(items: Any, sre: Any, classes: dict[str, bool]) -> bool:
    """Whether the sequence `items` (a parsed pattern or a list of its nodes) matches nothing."""
    for op, arg in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "AT"):
            continue
        if name == "IN":
            key = repr(arg)
            if key not in classes:  # each distinct class searched once
                node = sre.SubPattern(sre.State(), [(op, arg)])
                classes[key] = re._compiler.compile(node, 0).search(_EVERY_CHARACTER) is None  # type: ignore[attr-defined]
            if classes[key]:
                return True
        elif name == "BRANCH":
            if all(_empty(branch, sre, classes) for branch in arg[1]):
                return True
        elif name == "SUBPATTERN":
            if _empty(arg[-1], sre, classes):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if arg[0] > 0 and _empty(arg[2], sre, classes):
                return True
        elif name == "ATOMIC_GROUP":
            if _empty(arg, sre, classes):
                return True
        else:
            raise _Undecided(name)
    return False


class Grammars:
    """The compiled constraints of one tokenizer and vocabulary size (the model's logits may be wider than the
    tokenizer: the extra ids are never allowed)."""

    def __init__(self, tokenizer: Any, vocab_size: int):
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.vocab_size = vocab_size
        # One thread: the machine's cores belong to the model's matmuls, and a regex compiles in milliseconds. The
        # cache is bounded: the edit format compiles one regex per distinct state (`dreamgym.experience.edits`),
        # each a few hundred KiB on the tiny preset's vocabulary and more on a larger one, for as long as a dream runs.
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_limit_bytes=GRAMMAR_CACHE_BYTES)
        self._marks: dict[str, tuple[list[int], torch.Tensor]] = {}

    def compile(self, regex: str) -> xgr.CompiledGrammar:
        """`regex` compiled for this vocabulary; raises `ConstraintError` naming the problem."""
        try:
            return self.compiler.compile_regex(regex)
        except RuntimeError as e:  # xgrammar reports a regex it cannot parse as a RuntimeError
            raise ConstraintError(f"regex {regex[:80]!r} cannot be compiled: {str(e).splitlines()[0]}") from e

    def check(self, regex: str) -> None:
        """`regex` compiles and this model can write a match: raises `ConstraintError` naming the problem. Decoding
        under a regex whose language is empty (`[^\\s\\S]`, `ab[^\\s\\S]`) reaches a step where no token is
        allowed and writes text outside it, so such a regex is refused here: by its syntax tree (`language_empty`),
        and by its first step on this vocabulary (no token allowed, not even the end)."""
        matcher = xgr.GrammarMatcher(self.compile(regex))
        mask = self.bitmask(1)
        matcher.fill_next_token_bitmask(mask, 0)
        if language_empty(regex) or not bool(mask.any()):
            raise ConstraintError(f"regex {regex[:80]!r} matches no text this model can write (its language is "
                                  "empty, or no token sequence spells a match)")

    def bitmask(self, rows: int) -> torch.Tensor:
        """An all-allowed bitmask for `rows` rows."""
        return xgr.allocate_token_bitmask(rows, self.vocab_size)

    @staticmethod
    def apply(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """A copy of `logits` (batch, vocab) with the tokens `bitmask` disallows at -inf in `rows` (others as
        they are)."""
        out = logits.clone()
        xgr.apply_token_bitmask_inplace(out, bitmask.to(logits.device), vocab_size=out.shape[-1], indices=rows)
        return out

    def row(self, constraint: OutputConstraint, max_tokens: int) -> RowMatcher:
        """A fresh matcher for one completion of at most `max_tokens` tokens."""
        counts, mask = self._mark_tokens(constraint.mark)
        return RowMatcher(xgr.GrammarMatcher(self.compile(constraint.regex)), constraint.budgets, max_tokens,
                          counts, mask)

    def _mark_tokens(self, mark: str) -> tuple[list[int], torch.Tensor]:
        """(how many marks each token's bytes hold, the packed bitmask of the tokens holding one)."""
        if mark not in self._marks:
            needle = mark.encode("utf-8")
            counts = [b.count(needle) for b in self.info.decoded_vocab]
            counts += [0] * (self.vocab_size - len(counts))
            flags = torch.tensor(counts[: self.vocab_size], dtype=torch.bool)
            words = (self.vocab_size + 31) // 32
            bits = torch.zeros(words * 32, dtype=torch.int64)
            bits[: self.vocab_size] = flags.to(torch.int64)
            packed = (bits.view(words, 32) << torch.arange(32, dtype=torch.int64)).sum(-1)
            # int32 words as xgrammar stores them (bit 31 wraps to the sign bit).
            self._marks[mark] = (counts, ((packed + (1 << 31)) % (1 << 32) - (1 << 31)).to(torch.int32))
        return self._marks[mark]


class RowMatcher:
    """One completion's place in its constraint: which tokens may come next, and what each accepted token did."""

    def __init__(self, matcher: xgr.GrammarMatcher, budgets: tuple[FieldBudget, ...], max_tokens: int,
                 mark_counts: list[int], mark_mask: torch.Tensor):
        self.matcher = matcher
        self.budgets = {b.after: b for b in budgets}
        self.max_tokens = max_tokens
        self.mark_counts = mark_counts
        self.mark_mask = mark_mask
        self.generated = 0
        self.marks = 0
        self.field_start = 0
        self.forced = 0
        """Steps at which a budget ended a field."""

    def fill(self, bitmask: torch.Tensor, index: int) -> None:
        """Write the tokens allowed next into row `index` of `bitmask`."""
        self.matcher.fill_next_token_bitmask(bitmask, index)
        budget = self.budgets.get(self.marks)
        if budget is None:
            return
        used = self.generated - self.field_start
        if (budget.max_tokens is not None and used >= budget.max_tokens) or \
                self.max_tokens - self.generated <= budget.reserve:
            closing = bitmask[index] & self.mark_mask
            # Empty only where the grammar cannot close the field yet (e.g. a state with no character written):
            # the field then runs on until it can.
            if bool(closing.any()):
                bitmask[index] = closing
                self.forced += 1

    def accept(self, token: int) -> bool:
        """Advance past `token`; False when the constraint does not allow it (the mask was not applied)."""
        ok = bool(self.matcher.accept_token(token))
        self.generated += 1
        if ok and token < len(self.mark_counts) and self.mark_counts[token]:
            self.marks += self.mark_counts[token]
            self.field_start = self.generated
        return ok
