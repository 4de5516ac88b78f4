"""The experience model M_exp: batched prediction over the LLM seam, with retrieval, retries, the failure state
and environment shortcuts, and loading a trained checkpoint.

Owns: `ExperienceModel` -- retrieving k examples per query from the replay buffer, one `llm.generate` call per
batch and one per retry round, parsing, the failure state when an output stays malformed, the `stats` counters,
and composing an `OutcomeResolver` (`dreamgym.experience.shortcuts`) for the outcomes given without a call.
Must not know: how prompts and answers are written (`dreamgym.experience.format`), any concrete environment,
training, trainers of the agent, the replay buffer's storage (it is used through `retrieve`/`transitions`).
torch and transformers are reached only by `ExperienceModel.load` (through `dreamgym.llm.hf`), so prediction
through another backend of the LLM seam (and the synthetic environment built on it) never loads them.

Structured decoding: with `structured_output` every generate call carries the format's `output_constraint`, so
a backend that enforces it (the local one, vLLM and `dreamgym serve-model` through `structured_outputs`) never
writes a malformed answer and no retry is spent; the rest below is for backends that ignore it and for
contradictions. Under `state_format: edit` each request carries its own constraint (the call passes one
`SamplingParams` per request): the edit's `-` and `=` lines can name only lines of that query's state
(`format.edit_named_lines`), so an edit naming a line the state lacks cannot be written; one that names the state's
lines out of the cursor's order still can, and is caught when it applies. A state too long for that regex is decoded
under the generic edit body, counted in `stats["edit_constraint_fallbacks"]` (per request sent). A `+` line that
repeats the one right before it (a greedy decoding loop, `edits.repeated_insertions`) is dropped where the edit applies,
counted in `stats["repeated_insertions"]`.

Malformed outputs: an output that does not parse, an edit that cannot apply to the query's state (it removes or
keeps a line the state does not hold; also counted in `stats["inapplicable_edits"]`), or an output whose next state
the shortcuts reject as contradicting the action (`reject_contradictions`), is re-generated `retries` times (sampled
at `RETRY_TEMPERATURE`, one batched call per retry round); one still malformed after that becomes the failure state
(`FAILURE_STATE`, reward 0.0, done True, `failed=True`) and increments `stats["failures"]`; when its last attempt
was a backend error (the call raised: a server down or refusing the request) it also increments
`stats["backend_failures"]` and its `error` names the backend's, so a caller can tell a model that writes nonsense
from a backend it cannot use. A batch whose call ran past the backend's time limit (`GenerationTimeout`) is not
re-generated: the same batch would take as long again on a backend already too slow for it. Nothing here raises on
bad output.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dreamgym.experience.checkpoint import (checkpoint_model_config, load_checkpoint_model, load_checkpoint_tokenizer,
                                            read_checkpoint_meta)
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.edits import EditError, repeated_insertions
from dreamgym.experience.format import (FAILURE_STATE, RESET_ACTION, STOP, Prediction, answer_state, build_request,
                                        edit_named_lines, output_constraint, parse_completion, query_for)
from dreamgym.experience.shortcuts import FamilyShortcuts, OutcomeResolver
from dreamgym.llm.base import GENERATION_TIMEOUT_S, LLM, ChatRequest, GenerationTimeout, SamplingParams
from dreamgym.types import Task, Transition

if TYPE_CHECKING:
    from dreamgym.replay.buffer import ReplayBuffer

log = logging.getLogger(__name__)

RETRY_TEMPERATURE = 0.7
"""Retries sample: greedy decoding would repeat the same malformed text."""


class ExperienceModel:
    """M_exp over any LLM-seam backend, grounded by an optional replay buffer.

    `predict(queries)` retrieves k neighbours for all queries at once (excluding each query's own trajectory),
    makes one `llm.generate` call for the batch, one more per retry round for the malformed ones, and never
    raises on bad output. `stats` counts predictions, generate calls, malformed outputs, retries, failures and
    prompt-fitting events, and what the outcome resolver counts (`hidden_copied`, `determined`); the default
    resolver holds the same Counter, so reset it with `stats.clear()` rather than by assigning a new one.

    `shortcuts` answers some queries without the model and rejects contradicting answers
    (`dreamgym.experience.shortcuts`); by default the environment families' shortcuts, switched by `config`.
    """

    def __init__(self, llm: LLM, buffer: ReplayBuffer | None = None, config: ExperienceModelConfig | None = None,
                 env: str | None = None, shortcuts: OutcomeResolver | None = None):
        self.llm = llm
        self.buffer = buffer
        self.config = config or ExperienceModelConfig()
        self.env = env
        self.stats: Counter[str] = Counter()
        self.timings: defaultdict[str, float] = defaultdict(float)
        """Wall seconds per part of prediction: `retrieval_s` (the examples), `prompt_s` (rendering the requests and
        fitting them to the token budget), `params_s` (the sampling settings: under `state_format: edit` each query's
        constraint regex), `generate_s` (the backend's calls; `llm.stats` splits a local backend's) and `parse_s`
        (parsing answers, applying edits, checking contradictions). Apart from `stats`, whose counts are metrics."""
        self.last_backend_error = ""
        """The last backend error's text ("" while none), for a caller that stops on them."""
        self.shortcuts: OutcomeResolver = shortcuts if shortcuts is not None else FamilyShortcuts(env, self.stats)

    # Token counting is only possible when the backend exposes its prompt tokenization (HFBackend does).
    def _count_tokens(self) -> Callable[[ChatRequest], int] | None:
        fn = getattr(self.llm, "prompt_ids", None)
        return (lambda req: len(fn(req))) if callable(fn) else None

    def retrieve(self, queries: list[Transition]) -> list[list[Transition]]:
        cfg = self.config
        if not (cfg.use_retrieval and cfg.k > 0 and self.buffer is not None and queries):
            return [[] for _ in queries]
        t0 = time.perf_counter()
        try:
            # Twins from other episodes stay: a synthetic query carries no answer, so training and fidelity
            # queries (which do) must retrieve exactly what a synthetic step would. Real transitions only: a model
            # that copies retrieved steps copies its own mistakes too (docs/decisions.md).
            found = self.buffer.retrieve(queries, k=cfg.k, env=self.env, real_only=True,
                                         mmr_lambda=cfg.mmr_lambda, exclude_same_trajectory=True,
                                         exclude_twins=False)
            self.timings["retrieval_s"] += time.perf_counter() - t0
            return found
        except Exception as e:  # noqa: BLE001 - retrieval helps; losing it for one batch must not end a rollout
            self.stats["retrieval_errors"] += 1
            log.warning("experience model: retrieval failed (%s: %s); predicting without examples",
                        type(e).__name__, e)
            return [[] for _ in queries]

    def requests(self, queries: list[Transition], examples: list[list[Transition]] | None = None) -> list[ChatRequest]:
        if examples is None:
            examples = self.retrieve(queries)
        t0 = time.perf_counter()
        count = self._count_tokens()
        reqs = [build_request(q, ex, self.config, count, self.stats) for q, ex in zip(queries, examples)]
        self.timings["prompt_s"] += time.perf_counter() - t0
        return reqs

    def _params(self, temperature: float, seed: int | None) -> SamplingParams:
        cfg = self.config
        return SamplingParams(temperature=temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens, stop=[STOP],
                              seed=seed, constraint=output_constraint(cfg) if cfg.structured_output else None)

    def _request_params(self, queries: list[Transition], temperature: float,
                        seed: int | None) -> SamplingParams | list[SamplingParams]:
        """The sampling settings of a call answering `queries`: `_params` shared by every request, or under
        `state_format: edit` with structured output one per request, each constrained to its query's state
        (`edit_named_lines`; the generic body where that is None, counted)."""
        params = self._params(temperature, seed)
        cfg = self.config
        if not (cfg.structured_output and cfg.state_format == "edit"):
            return params
        t0 = time.perf_counter()
        per_request = []
        for q in queries:
            named = edit_named_lines(q, cfg, self.env)
            if named is None:
                self.stats["edit_constraint_fallbacks"] += 1
                per_request.append(params)
            else:
                per_request.append(replace(params, constraint=output_constraint(cfg, named)))
        self.timings["params_s"] += time.perf_counter() - t0
        return per_request

    def _generate(self, reqs: list[ChatRequest], params: SamplingParams | list[SamplingParams],
                  seeds: list[int] | None = None) -> tuple[list[str], str, bool]:
        """The completions' texts and "" or, when the backend raised, empty texts and the backend's error; and
        whether the backend ran out of time (`GenerationTimeout`)."""
        self.stats["generate_calls"] += 1
        t0 = time.perf_counter()
        try:
            # Without per-query seeds the call stays the seam's plain form, which any backend accepts.
            comps = self.llm.generate(reqs, params) if seeds is None else self.llm.generate(reqs, params, seeds=seeds)
            texts = [c.text for c in comps]
            if len(texts) != len(reqs):
                raise RuntimeError(f"backend returned {len(texts)} completions for {len(reqs)} requests")
            return texts, "", False
        except Exception as e:  # noqa: BLE001 - a backend error is a malformed output for every request in it
            self.stats["backend_errors"] += 1
            log.warning("experience model: generate failed (%s: %s)", type(e).__name__, e)
            self.last_backend_error = f"{type(e).__name__}: {' '.join(str(e).split())}"
            timed_out = isinstance(e, GenerationTimeout)
            if timed_out:
                self.stats["timeouts"] += 1
            return [""] * len(reqs), f"backend error ({self.last_backend_error})", timed_out
        finally:
            self.timings["generate_s"] += time.perf_counter() - t0

    def predict(self, queries: list[Transition], *, examples: list[list[Transition]] | None = None,
                seed: int | None = None, seeds: list[int] | None = None) -> list[Prediction]:
        """One prediction per query, in order. `examples` overrides retrieval (one list per query); `seed`
        seeds sampling (used by retries, and by every attempt when `temperature` > 0); `seeds` instead gives
        each query its own sampling seed (the LLM seam's common random numbers), retries included. With
        `copy_hidden_outcomes` or `derive_determined_outcomes`, the queries the shortcuts answer are not sent to
        the model."""
        if not queries:
            return []
        if seeds is not None and len(seeds) != len(queries):
            raise ValueError("predict: seeds must be one per query")
        resolved = self.shortcuts.resolve(queries, self.config, self.buffer)
        if not resolved:
            return self._predict_model(queries, examples=examples, seed=seed, seeds=seeds)
        rest = [i for i in range(len(queries)) if i not in resolved]
        answers = self._predict_model([queries[i] for i in rest],
                                      examples=None if examples is None else [examples[i] for i in rest],
                                      seed=seed, seeds=None if seeds is None else [seeds[i] for i in rest])
        self.stats["predictions"] += len(resolved)
        out: list[Prediction] = [resolved[i] if i in resolved else None for i in range(len(queries))]  # type: ignore[misc]
        for i, p in zip(rest, answers):
            out[i] = p
        return out

    def _predict_model(self, queries: list[Transition], *, examples: list[list[Transition]] | None = None,
                       seed: int | None = None, seeds: list[int] | None = None) -> list[Prediction]:
        if not queries:
            return []
        if examples is None:
            examples = self.retrieve(queries)
        reqs = self.requests(queries, examples)
        base = 0 if seed is None else int(seed)
        texts, backend_error, timed_out = self._generate(
            reqs, self._request_params(queries, self.config.temperature, base), seeds)
        results: list[Prediction | None] = [None] * len(queries)
        attempts = [1] * len(queries)
        pending = list(range(len(queries)))
        errors = [""] * len(queries)
        backend_failed = [False] * len(queries)  # whether the query's last attempt was a backend error
        for attempt in range(self.config.retries + 1):
            t0 = time.perf_counter()
            still = []
            for i, text in zip(pending, texts):
                backend_failed[i] = bool(backend_error)
                if backend_error:  # counted as malformed, as it always was, and named as the backend's
                    self.stats["malformed"] += 1
                    errors[i] = backend_error
                    still.append((i, text))
                    continue
                parsed, err = parse_completion(text)
                state = ""
                if parsed is not None:
                    if parsed.edit:
                        self.stats["repeated_insertions"] += len(repeated_insertions(parsed.edit))
                    try:
                        state = answer_state(parsed, queries[i], self.config, self.env)
                    except EditError as e:  # a line edit naming a line the state does not hold: malformed
                        self.stats["inapplicable_edits"] += 1
                        parsed, err = None, f"edit does not apply: {e}"
                if parsed is not None and (err := self.shortcuts.contradiction(queries[i], state, self.config)):
                    self.stats["contradicted"] += 1
                    parsed = None
                if parsed is None:
                    self.stats["malformed"] += 1
                    errors[i] = err
                    still.append((i, text))
                else:
                    results[i] = Prediction(state, parsed.reward, parsed.done, parsed.reasoning,
                                            attempts=attempts[i], text=text, examples=examples[i])
            self.timings["parse_s"] += time.perf_counter() - t0
            if not still or attempt == self.config.retries or timed_out:
                pending_texts = dict(still)
                break
            pending = [i for i, _ in still]
            self.stats["retries"] += len(pending)
            for i in pending:
                attempts[i] += 1
            shift = 1000 * (attempt + 1)
            texts, backend_error, timed_out = self._generate(
                [reqs[i] for i in pending],
                self._request_params([queries[i] for i in pending], RETRY_TEMPERATURE, base + shift),
                None if seeds is None else [seeds[i] + shift for i in pending])
        else:  # pragma: no cover - the loop always breaks
            pending_texts = {}
        for i, r in enumerate(results):
            if r is None:
                self.stats["failures"] += 1
                if backend_failed[i]:
                    self.stats["backend_failures"] += 1
                results[i] = Prediction(FAILURE_STATE, 0.0, True, "", failed=True, error=errors[i],
                                        attempts=attempts[i], text=pending_texts.get(i, ""), examples=examples[i])
        self.stats["predictions"] += len(queries)
        return results  # type: ignore[return-value]

    def initial_states(self, tasks: list[Task], *, seed: int | None = None,
                       trajectory_ids: list[str] | None = None) -> list[Prediction]:
        """Model-written initial states: the answer to `[reset]` on the empty state, one per task."""
        ids = trajectory_ids or [""] * len(tasks)
        return self.predict([query_for(t, "", RESET_ACTION, trajectory_id=i) for t, i in zip(tasks, ids)],
                            seed=seed)

    @classmethod
    def load(cls, path: str | Path, buffer: ReplayBuffer | None = None, *, device: str | None = None,
             batch_size: int = 32, config_overrides: Sequence[str] = (), url: str | None = None,
             timeout_s: float = GENERATION_TIMEOUT_S, timeout_field: str = "timeout_s") -> ExperienceModel:
        """A trained checkpoint (`dreamgym.experience.train`) with an HFBackend. `config_overrides` are `key=value`
        settings of its `ExperienceModelConfig` (e.g. `["temperature=1.0"]`), validated before the model loads.
        `buffer` is used for retrieval as is; `dreamgym.experience.data.checkpoint_buffer` builds the one the
        checkpoint was trained against.

        `url` (`http://host:port/v1#MODEL`, several comma-separated): generate on those servers instead, which
        serve this checkpoint's weights (`dreamgym export-em`). Only the tokenizer loads here, so prompts are fitted
        and tokenized exactly as in training and sent as token ids (`HTTPTokenBackend`), each request given
        `timeout_s` seconds to answer (`timeout_field`: the setting an error past it names)."""
        meta = read_checkpoint_meta(path)
        cfg = checkpoint_model_config(meta, list(config_overrides))
        llm: LLM
        if url:
            from dreamgym.llm.http import HTTPTokenBackend, split_urls

            urls, served = split_urls(url)
            llm = HTTPTokenBackend(urls, load_checkpoint_tokenizer(path), served_model=served, timeout=timeout_s,
                                   timeout_field=timeout_field)
        else:
            from dreamgym.llm.hf import HFBackend

            model, tokenizer = load_checkpoint_model(path, device=device)
            # A batch of queries shares much (a GRPO group's task, repeated steps): computed once, see HFBackend.
            llm = HFBackend(model, tokenizer, batch_size=batch_size, share_prompts=True)
        return cls(llm, buffer=buffer, config=cfg, env=meta.get("env"))
