"""The local transformers backend of the LLM seam: batched, KV-cached sampling with exact token ids and logprobs.

Owns: chat-template application (once, with the generation prompt), left-padded batched decoding with a KV
cache, temperature / top-p / max-token / stop-string / eos handling, seeded sampling, per-token logprobs, and
applying each row's `OutputConstraint` (the token masks of `dreamgym.llm.grammar`) before it samples.
Must not know: environments, trainers, the experience model, presets beyond `from_preset`.

Trainers share `backend.model` with their optimizer: weights updated in place are used by the next
`generate` call. Generation switches the model to eval mode and restores its previous mode afterwards.

Contract details trainers rely on:
- `Completion.token_ids` are exactly the sampled tokens, including a final eos token when the model emitted
  one, and including the whole token that completed a stop string (its text may run a few characters past
  the stop string; `Completion.text` is cut right after the stop string).
- `Completion.logprobs[i]` is `log_softmax(logits)[token_ids[i]]` for the model's raw logits (temperature 1,
  no top-p filtering), i.e. what a separate forward pass over prompt + generated tokens gives. A constrained
  row samples from its masked logits, but its log-probs are still the raw model's.
- Seeds: request `i` of a call with `SamplingParams.seed = s` samples from its own generator seeded with
  `row_seed(s, i)`, so its output does not depend on how the batch is chunked or what else is in it.

Sharing (`share_prompts=True`, the experience model's backend): what a batch's requests have in common is computed
once. Requests with the same prompt, settings and (when sampled) seed are decoded once and the completion copied,
which the seed contract makes exact; and requests whose prompts open with the same tokens (a GRPO group's task
line, a batch's common prefix) have that prefix prefilled once, its KV cache expanded to every row that shares it
(`DynamicCache.batch_select_indices`), then only the rest of each prompt prefilled. A shared prefix changes only
the shapes the model computes with, so a greedy completion is the one decoded alone up to float rounding in the
last bits (tested equal on the experience model's prompts); a sampled one draws the same uniforms, so it differs
only where such rounding moves a draw across a token boundary. Off by default: trainers' own log-probs stay the
computation they have always been.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dreamgym.llm.base import ChatRequest, Completion, OutputConstraint, SamplingParams, row_seed

if TYPE_CHECKING:
    from dreamgym.llm.grammar import Grammars

# Used for models whose tokenizer ships without a chat template (base models): the tiny preset's ChatML.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass
class _Row:
    """One request being decoded: its prompt, its sampling settings and what it has produced so far."""

    prompt: list[int]
    params: SamplingParams
    seed: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str | None = None
    finish: str | None = None


class HFBackend:
    """`LLM` over a local `transformers` causal LM. `batch_size` bounds the rows decoded together."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32, share_prompts: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.share_prompts = share_prompts
        self.stats = {"rows": 0, "rows_decoded": 0, "prompt_tokens": 0, "prefilled_tokens": 0}
        """Requests asked for, rows decoded after merging identical ones, their prompt tokens, and the prompt
        tokens actually prefilled (fewer than `prompt_tokens` where prefixes were shared)."""
        # The last prompts rendered, so fitting a prompt to its budget and generating from it tokenize it once.
        self._ids_cache: dict[str, list[int]] = {}
        self._lock = threading.Lock()  # one generation at a time: the model and its mode are shared state
        self._trigger_cache: dict[frozenset[str], frozenset[int]] = {}
        self._grammar: Grammars | None = None
        gen_cfg = getattr(model, "generation_config", None)
        eos = getattr(gen_cfg, "eos_token_id", None)
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if tokenizer.eos_token_id is not None:
            eos.append(tokenizer.eos_token_id)
        if not eos:
            raise ValueError("the tokenizer and generation config define no eos token; cannot tell when to stop")
        self.eos_ids = frozenset(eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # Asking for the last position's logits only avoids a (batch, prompt_len, vocab) tensor at prefill.
        params = inspect.signature(base.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
        # transformers >= 5.2x names the KV cache argument `cache`; older versions call it `past_key_values`.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def sampling_model(self) -> Any:
        """The module whose forward passes produce the sampled tokens and their log-probs: `model` itself (trainers
        compare it with the model they train to know whether those log-probs are their own numerics)."""
        return self.model

    @classmethod
    def from_preset(cls, name: str, *, device: str | None = None, batch_size: int = 32,
                    dtype: Any = None, share_prompts: bool = False) -> HFBackend:
        """A backend over `dreamgym.llm.presets.load_preset(name)` (preset name, local path or HF id)."""
        from dreamgym.llm.presets import load_preset

        model, tokenizer = load_preset(name, device=device, dtype=dtype)
        return cls(model, tokenizer, batch_size=batch_size, share_prompts=share_prompts)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------------------------------ public API

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """Token ids of the chat-templated request with the assistant generation prompt. The template is
        rendered to text once and tokenized without adding special tokens again (the template has them)."""
        text = self.tokenizer.apply_chat_template(request, tokenize=False, add_generation_prompt=True)
        ids = self._ids_cache.get(text)
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._ids_cache) >= _IDS_CACHE_SIZE:
                self._ids_cache.clear()
            self._ids_cache[text] = ids
        return list(ids)

    def generate(self, requests: list[ChatRequest], params: SamplingParams | Sequence[SamplingParams], *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per chat request, in order (see the module docstring for the contract); `params` shared or
        one per request."""
        return self.generate_from_ids([self.prompt_ids(r) for r in requests], params, seeds=seeds)

    def generate_from_ids(self, prompts: Sequence[Sequence[int]],
                          params: SamplingParams | Sequence[SamplingParams],
                          *, seeds: Sequence[int] | None = None) -> list[Completion]:
        """Token-in/token-out generation for trainers. `params` is shared or given per prompt; `seeds`, when
        given, are the per-prompt generator seeds (otherwise `row_seed(params.seed, i)`)."""
        n = len(prompts)
        plist = list(params) if isinstance(params, Sequence) else [params] * n
        if len(plist) != n or (seeds is not None and len(seeds) != n):
            raise ValueError("params and seeds must be one per prompt")
        for p in prompts:
            if len(p) == 0:
                raise ValueError("cannot generate from an empty prompt")
        if seeds is None:
            # Unseeded calls draw from torch's global RNG, so `torch.manual_seed` upstream still reproduces runs.
            base = {id(p): int(torch.randint(0, 2**62, (1,)).item()) for p in plist if p.seed is None}
            seeds = [row_seed(p.seed if p.seed is not None else base[id(p)], i) for i, p in enumerate(plist)]
        rows = [_Row(list(map(int, pr)), p, int(s)) for pr, p, s in zip(prompts, plist, seeds)]
        # `first[i]`: the row decoded for request i (itself, or an identical earlier request when sharing).
        first = _identical(rows) if self.share_prompts else list(range(n))
        todo = [i for i in range(n) if first[i] == i]
        # Similar lengths together means less padding; each row has its own generator, so order is free.
        order = sorted(todo, key=lambda i: -len(rows[i].prompt))
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                with torch.inference_mode():
                    for k in range(0, len(order), self.batch_size):
                        self._decode([rows[i] for i in order[k:k + self.batch_size]])
            finally:
                self.model.train(was_training)
            self.stats["rows"] += n
            self.stats["rows_decoded"] += len(todo)
            self.stats["prompt_tokens"] += sum(len(rows[i].prompt) for i in todo)
        out = []
        for i in range(n):
            r = rows[first[i]]
            out.append(Completion(text=r.text or "", token_ids=list(r.tokens), logprobs=list(r.logprobs),
                                  finish_reason=r.finish or "length", prompt_token_ids=rows[i].prompt))
        return out

    # ----------------------------------------------------------------------------------------- decoding

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any) -> torch.Tensor:
        """Logits of the last position, float32, shape (batch, vocab)."""
        kw = {"logits_to_keep": 1} if self._logits_to_keep else {}
        kw[self._cache_kw] = cache
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        return out.logits[:, -1, :].float()

    def _padded(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, mask, positions) of `prompts` left-padded to the longest. Left padding puts every row's last token
        in the same column; positions skip the padding so each row sees exactly the positions it would alone
        (needed for logprobs to match a plain forward)."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, width - len(p):] = torch.tensor(list(p))
            mask[b, width - len(p):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        dev = self.device
        return ids.to(dev), mask.to(dev), pos.to(dev)

    def _prefill(self, prompts: list[list[int]], cache: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Prefill whole prompts into `cache`: (last-position logits, attention mask so far, next positions)."""
        ids, mask, pos = self._padded(prompts)
        self.stats["prefilled_tokens"] += sum(map(len, prompts))
        return self._forward(ids, mask, pos, cache), mask, pos[:, -1] + 1

    def _prefill_shared(self, prompts: list[list[int]], plan: list[tuple[int, int]],
                        cache: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`_prefill` with shared prefixes: `plan[b]` is (the prefix group of row b, its prefix length); each
        group's prefix is prefilled once, its cache rows copied to every member, then each row's rest is prefilled
        after them. The attention mask holds both paddings (before the prefixes, between a prefix and its rest)."""
        groups: dict[int, int] = {}
        for g, length in plan:
            groups[g] = length
        heads = [prompts[next(b for b, (gb, _) in enumerate(plan) if gb == g)][:groups[g]] for g in sorted(groups)]
        _, head_mask, _ = self._prefill(heads, cache)
        cache.batch_select_indices(torch.tensor([g for g, _ in plan], device=self.device))
        rests = [p[length:] for p, (_, length) in zip(prompts, plan)]
        ids, rest_mask, rest_pos = self._padded(rests)
        self.stats["prefilled_tokens"] += sum(map(len, rests))
        offsets = torch.tensor([length for _, length in plan], device=self.device)
        pos = (rest_pos + offsets[:, None]) * rest_mask  # pads' positions do not matter: they are masked
        mask = torch.cat([head_mask[[g for g, _ in plan]], rest_mask], dim=1)
        return self._forward(ids, mask, pos, cache), mask, offsets + torch.tensor([len(r) for r in rests],
                                                                                     device=self.device)

    def _decode(self, rows: list[_Row]) -> None:
        """Decode one batch of rows to completion, filling each row's tokens, logprobs, text and finish."""
        from transformers import DynamicCache

        dev = self.device
        max_new = max(r.params.max_tokens for r in rows)
        live = [r for r in rows if r.params.max_tokens > 0]
        for r in rows:
            if r.params.max_tokens <= 0:
                r.text, r.finish = "", "length"
        if not live or max_new <= 0:
            return
        # All of a row's uniforms are drawn up front from its own generator: outputs depend only on its seed.
        uniforms = torch.stack([torch.rand(max_new, generator=torch.Generator().manual_seed(r.seed))
                                for r in live]).to(dev)  # [B, max_new] float32
        temps = torch.tensor([r.params.temperature for r in live], dtype=torch.float32, device=dev)
        top_ps = torch.tensor([r.params.top_p for r in live], dtype=torch.float32, device=dev)
        slots = list(range(len(live)))  # which of `live` each batch row is (host side: no sync to read it)
        slots_dev = torch.arange(len(live), device=dev)
        triggers = [self._stop_triggers(r.params.stop) for r in live]
        matchers = [None if r.params.constraint is None else
                    self._grammars().row(r.params.constraint, r.params.max_tokens) for r in live]
        bitmask = self._grammars().bitmask(len(live)) if any(matchers) else None
        cache = DynamicCache(config=self.model.config)
        plan = _shared_prefixes([r.prompt for r in live]) if self.share_prompts else None
        if plan is None:
            logits, mask, next_pos = self._prefill([r.prompt for r in live], cache)
        else:
            logits, mask, next_pos = self._prefill_shared([r.prompt for r in live], plan, cache)
        for step in range(max_new):
            rows_t = [live[s].params for s in slots]
            sampled = [p.temperature > 0 for p in rows_t]
            allowed = logits
            if bitmask is not None:
                constrained = [b for b, s in enumerate(slots) if matchers[s] is not None]
                for b in constrained:
                    matchers[slots[b]].fill(bitmask, b)  # type: ignore[union-attr]
                if constrained:
                    allowed = self._grammars().apply(logits, bitmask[:len(slots)], constrained)
            tokens = _sample(allowed, temps[slots_dev], top_ps[slots_dev], uniforms[slots_dev, step],
                             any_sampled=any(sampled), any_nucleus=any(sm and p.top_p < 1.0
                                                                       for sm, p in zip(sampled, rows_t)))
            # The raw model's log-probs, as the contract says, not the constrained distribution's.
            token_lp = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
            # The step's one device-to-host copy: the new tokens and their log-probs together ([2, b] float64 holds
            # every token id exactly).
            host_tokens, host_lps = torch.stack([tokens.double(), token_lp.double()]).tolist()
            keep = []
            for b, (slot, tok, lp) in enumerate(zip(slots, host_tokens, host_lps)):
                r = live[slot]
                r.tokens.append(int(tok))
                r.logprobs.append(lp)
                matcher = matchers[slot]
                if matcher is not None:
                    matcher.accept(int(tok))
                if self._finished(r, triggers[slot]):
                    continue
                keep.append(b)
            if not keep:
                break
            if len(keep) < len(slots):  # drop finished rows so the rest decode at a smaller batch
                sel = torch.tensor(keep, device=dev)
                cache.batch_select_indices(sel)
                slots = [slots[b] for b in keep]
                slots_dev, tokens, mask, next_pos = slots_dev[sel], tokens[sel], mask[sel], next_pos[sel]
            mask = torch.cat([mask, mask.new_ones((len(keep), 1))], dim=1)
            logits = self._forward(tokens[:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

    def _grammars(self) -> Grammars:
        """The constraints compiled for this tokenizer (built on the first constrained request: a backend that never
        decodes under a constraint, a policy's, never imports xgrammar)."""
        if self._grammar is None:
            from dreamgym.llm import grammar

            # The logits' width: a model may have more rows than its tokenizer has tokens (never allowed then).
            self._grammar = grammar.Grammars(self.tokenizer, int(self.model.config.vocab_size))
        return self._grammar

    def check_constraint(self, constraint: OutputConstraint) -> None:
        """Raise `ConstraintError` when `constraint` cannot be enforced here: its regex does not compile or no text
        this model can write matches it (compiled grammars are cached)."""
        self._grammars().check(constraint.regex)

    def _stop_triggers(self, stop: Sequence[str]) -> frozenset[int] | None:
        """Token ids that can complete one of the `stop` strings: those whose text contains a stop string's last
        character, or an incomplete UTF-8 sequence (shown as U+FFFD, which a later token may complete into that
        character). The text of the row is decoded only after such a token. None without stop strings."""
        if not stop or not any(stop):
            return None
        lasts = frozenset(s[-1] for s in stop if s)
        if lasts not in self._trigger_cache:
            vocab = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))],
                                                skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._trigger_cache[lasts] = frozenset(i for i, t in enumerate(vocab)
                                                   if "\ufffd" in t or any(c in t for c in lasts))
        return self._trigger_cache[lasts]

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _finished(self, r: _Row, triggers: frozenset[int] | None = None) -> bool:
        """Check eos, stop strings and the token budget after a row's newest token; set text and finish. Stop
        strings are looked for in the text only when the newest token is one of `triggers` (`_stop_triggers`)."""
        if r.tokens[-1] in self.eos_ids:
            r.text, r.finish = self._text(r.tokens[:-1]), "stop"
            return True
        if r.params.stop and (triggers is None or r.tokens[-1] in triggers):
            # A stop string completed by the newest token lies within its last 4 bytes/char * len tokens (each
            # token is at least one byte); decoding only that tail keeps the per-step check O(1), the full
            # decode happens once, on a hit.
            window = 4 * max(len(s) for s in r.params.stop) + 4
            if any(s and s in self._text(r.tokens[-window:]) for s in r.params.stop):
                text = self._text(r.tokens)
                hits = [(text.find(s), -len(s), s) for s in r.params.stop if s and s in text]
                if hits:
                    start, _, s = min(hits)  # the earliest stop string (the longest when two start together)
                    r.text, r.finish = text[: start + len(s)], "stop"
                    return True
        if len(r.tokens) >= r.params.max_tokens:
            r.text, r.finish = self._text(r.tokens), "length"
            return True
        return False


_IDS_CACHE_SIZE = 4096
"""Rendered prompts whose token ids `prompt_ids` keeps (the cache is emptied when full)."""
MIN_SHARED_PREFIX = 16
"""Prompt tokens a group of rows must share for their prefix to be prefilled once."""


def _identical(rows: list[_Row]) -> list[int]:
    """For each row, the first row with the same prompt, settings and sampling seed (a greedy row's seed is never
    used, so greedy rows match whatever their seeds): decoding that one gives this one's completion."""
    seen: dict[tuple[Any, ...], int] = {}
    first = []
    for i, r in enumerate(rows):
        p = r.params
        key = (tuple(r.prompt), p.temperature, p.top_p, p.max_tokens, tuple(p.stop), p.constraint,
               r.seed if p.temperature > 0 else None)
        first.append(seen.setdefault(key, i))
    return first


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of `a` and `b`."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _shared_prefixes(prompts: list[list[int]]) -> list[tuple[int, int]] | None:
    """How to prefill `prompts` with shared prefixes: per row (its prefix group, the group's prefix length), or
    None when sharing would not prefill fewer padded token positions than one plain left-padded batch.

    Rows are grouped greedily in token order: a row joins the group of the row before it while they share at least
    `MIN_SHARED_PREFIX` tokens; a group's prefix is what all its rows share, less the last token of its shortest
    prompt (every row keeps at least one token to prefill, whose logits start its decoding). A row alone in its
    group is prefilled whole in the first pass (its prefix is all but its last token)."""
    if len(prompts) < 2 or min(map(len, prompts)) < 2:
        return None
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    plan: list[tuple[int, int]] = [(0, 0)] * len(prompts)
    groups: list[list[int]] = []
    shared: list[int] = []
    for i in order:
        if groups:
            common = min(shared[-1], _common(prompts[groups[-1][0]], prompts[i]))
            if common >= MIN_SHARED_PREFIX:
                groups[-1].append(i)
                shared[-1] = common
                continue
        groups.append([i])
        shared.append(len(prompts[i]))
    if len(groups) == len(prompts):
        return None
    for g, (members, common) in enumerate(zip(groups, shared)):
        length = min(common, min(len(prompts[i]) for i in members) - 1)
        for i in members:
            plan[i] = (g, length)
    heads = max(length for _, length in plan)
    rests = max(len(p) - length for p, (_, length) in zip(prompts, plan))
    if len(groups) * heads + len(prompts) * rests >= len(prompts) * max(map(len, prompts)):
        return None
    return plan


def _sample(logits: torch.Tensor, temps: torch.Tensor, top_ps: torch.Tensor, u: torch.Tensor, *,
            any_sampled: bool = True, any_nucleus: bool = True) -> torch.Tensor:
    """Next token per row by inverse-CDF sampling with the row's pre-drawn uniform `u` in [0, 1).

    logits (B, V) float32; temps (B,) with 0 meaning greedy; top_ps (B,); u (B,) float32. Returns (B,) long.
    Top-p keeps the smallest set of most likely tokens whose mass reaches top_p (at least one token).
    `any_sampled` / `any_nucleus` say, from the host's copy of the rows' settings, whether any row samples (temperature
    > 0) / uses top-p < 1, so the decode loop never waits on the device to find out. The whole computation is float32:
    the CDF is scaled by its own total, so rounding shifts a draw only between neighbouring tokens' boundaries.
    """
    greedy = logits.argmax(dim=-1)
    if not any_sampled:
        return greedy
    sampled_rows = temps > 0
    probs = torch.softmax(logits / temps.clamp(min=1e-6)[:, None], dim=-1)
    nucleus = sampled_rows & (top_ps < 1.0)
    full = sampled_rows & ~nucleus
    # Unsorted CDF is still monotone, so no sort is needed without top-p. Greedy rows keep their argmax.
    cdf = probs.cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0].clamp(max=probs.shape[1] - 1)
    tokens = torch.where(full, idx, greedy)
    if any_nucleus:
        # Every row is sorted (not only the nucleus rows): selecting them would wait on the device.
        p_sorted, order = probs.sort(dim=-1, descending=True)
        before = p_sorted.cumsum(-1) - p_sorted  # mass strictly above each token
        p_sorted = p_sorted.masked_fill(before >= top_ps[:, None], 0.0)
        cdf = p_sorted.cumsum(-1)
        j = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).clamp(max=probs.shape[1] - 1)
        tokens = torch.where(nucleus, order.gather(1, j)[:, 0], tokens)
    return tokens
