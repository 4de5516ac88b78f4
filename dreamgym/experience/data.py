"""The experience model's data: transitions from real trajectories, the seed replay buffer retrieval reads, and
token ids of (prompt, target) training examples.

Owns: `em_transitions` (what the model learns from a trajectory: `done` is `terminated`, the outcome reward, the
`[reset]` transition to each initial state), `balance_outcomes`, the memoized embedder and seed buffer that
make training's retrieval one embedding pass (`MemoEmbedder`, `buffer_for`), the buffer a checkpoint was
trained against (`buffer_spec`, `checkpoint_buffer`), and tokenizing training examples (`encode_examples`,
`encode_chat_examples`).
Must not know: models, generation, the optimizer or training loop, torch, any concrete environment.
numpy, the replay buffer and the reasoning teachers are imported inside the functions that need them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamgym.experience.checkpoint import read_checkpoint_meta
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.format import RESET_ACTION, build_request, target_completion
from dreamgym.types import Trajectory, Transition

if TYPE_CHECKING:
    import numpy as np

    from dreamgym.replay.buffer import ReplayBuffer
    from dreamgym.replay.embed import Embedder
    from dreamgym.llm.hf import HFBackend


def _binary(r: float) -> float:
    return 1.0 if r >= 1.0 - 1e-6 else 0.0


def em_transitions(trajectories: list[Trajectory], history: int = 3, *, initial_states: bool = True,
                   binary_reward: bool = True) -> list[Transition]:
    """Experience-model transitions from real trajectories.

    `done` is the step's `terminated` (a step-limit truncation is not the world's doing); a missing
    `next_state` is taken from the following step; trajectories without an id get a stable one (their index),
    so retrieval can exclude a transition's own trajectory; with `initial_states` each trajectory also yields
    the `[reset]` transition to its initial state.
    """
    out: list[Transition] = []
    for n, traj in enumerate(trajectories):
        tid = traj.id or f"traj-{n}"
        if not traj.steps:
            continue
        trs = traj.transitions(history=history)
        for i, (tr, step) in enumerate(zip(trs, traj.steps)):
            tr.trajectory_id = tid
            tr.done = bool(step.terminated)
            if not tr.next_state and i + 1 < len(traj.steps):
                tr.next_state = traj.steps[i + 1].state
            if binary_reward:
                tr.reward = _binary(tr.reward)
        trs = [t for t in trs if t.next_state]
        if initial_states:
            init = traj.initial_state or traj.steps[0].state
            trs.insert(0, Transition(task=traj.task, history=[], state="", action=RESET_ACTION, next_state=init,
                                     reward=0.0, done=False, reasoning="The episode starts in its initial state.",
                                     source=traj.source, seed=traj.seed, trajectory_id=tid, step_index=-1))
        out += trs
    return out


class MemoEmbedder:
    """Wraps an embedder with a text -> vector memo: identical texts are embedded once, and the training
    transitions embedded when the buffer is seeded are not embedded again when they are the queries."""

    def __init__(self, inner: Embedder):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for t, v in zip(missing, np.asarray(self.inner.encode(missing), dtype=np.float32)):
                self._memo[t] = v
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._memo[t] for t in texts])


def buffer_for(transitions: list[Transition], embedder: str = "minilm",
               path: str | Path | None = None) -> ReplayBuffer:
    """A replay buffer seeded with `transitions` (real seed data), as retrieval sees it during training.
    The embedder is memoized (see `MemoEmbedder`), which makes seeding plus retrieval one embedding pass."""
    from dreamgym.replay.buffer import ReplayBuffer
    from dreamgym.replay.embed import make_embedder

    buf = ReplayBuffer(path, MemoEmbedder(make_embedder(embedder)))
    if transitions:
        buf.add(transitions, seed_data=True)
    return buf


def buffer_spec(meta: dict[str, Any], data: str | Path) -> tuple[str, str, int, bool, str | None]:
    """Everything a checkpoint's seed buffer depends on: (data, embedder, history, binary reward, the family
    whose env teacher annotates the examples or None). Equal specs give equal buffers, so callers may share one."""
    m = meta["model"]
    traced = (m.get("use_reasoning", True) and m.get("example_reasoning")
              and meta.get("train", {}).get("teacher") == "env")
    return (str(data), m.get("embedder", "minilm"), m.get("history", 3), m.get("binary_reward", True),
            meta["env"] if traced else None)


def checkpoint_buffer(checkpoint: str | Path, data: str | Path | None = None,
                      path: str | Path | None = None) -> ReplayBuffer:
    """The replay buffer a checkpoint was trained against: seeded with the transitions of `data` (default: the
    checkpoint's own training data), with the checkpoint's embedder and history window, and the reasoning
    traces its examples showed in training. `path` makes it persistent (reopening an existing buffer only adds
    what is missing)."""
    from dreamgym.data import load_trajectories

    meta = read_checkpoint_meta(checkpoint)
    src = data or meta.get("train", {}).get("data")
    if not src:
        raise ValueError(f"{checkpoint}: no training data recorded; pass data=")
    src, embedder, history, binary_reward, teacher_env = buffer_spec(meta, src)
    trs = em_transitions(load_trajectories(src), history=history, binary_reward=binary_reward)
    if teacher_env is not None:
        from dreamgym.experience.reasoning import EnvTeacher, annotate

        trs = annotate(trs, EnvTeacher(teacher_env))  # examples carry the traces they had in training
    return buffer_for(trs, embedder, path)


def encode_examples(transitions: list[Transition], examples: list[list[Transition]], cfg: ExperienceModelConfig,
                    backend: HFBackend, stats: Counter[str]) -> list[tuple[list[int], int]]:
    """Token ids of prompt + completion for each transition, and the prompt length (the loss mask boundary);
    the strict output format is the completion, the next state written whole or as an edit as `cfg.state_format`
    says (`target_completion`; `encode_chat_examples` does the tokenizing)."""
    count = lambda req: len(backend.prompt_ids(req))  # noqa: E731
    pairs = ((build_request(tr, ex, cfg, count, stats), target_completion(tr, cfg))
             for tr, ex in zip(transitions, examples))
    return encode_chat_examples(pairs, backend, cfg.max_new_tokens, stats)


def encode_chat_examples(pairs: Iterable[tuple[list[dict[str, str]], str]], backend: HFBackend,
                         max_new_tokens: int, stats: Counter[str]) -> list[tuple[list[int], int]]:
    """Token ids of prompt + completion for each (chat request, target text) pair, and the prompt length.

    The prompt is tokenized exactly as generation will see it (`backend.prompt_ids`, chat template applied
    once); the completion is the target followed by the tokenizer's end-of-turn token. Pairs whose completion
    exceeds `max_new_tokens` are skipped (counted): a model trained on cut-off targets would learn never to
    close its tags."""
    tok = backend.tokenizer
    out = []
    for request, target in pairs:
        prompt = backend.prompt_ids(request)
        comp = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if len(comp) > max_new_tokens:
            stats["skipped_long_completion"] += 1
            continue
        out.append((list(prompt) + comp, len(prompt)))
    return out


def balance_outcomes(transitions: list[Transition], examples: list[list[Transition]], max_repeat: int,
                     ) -> tuple[list[Transition], list[list[Transition]]]:
    """Repeat the terminal transitions (done) of the rarer outcome (reward >= 1 vs below) so the two outcomes
    weigh alike, at most `max_repeat` copies each. Non-terminal transitions are untouched."""
    ends: dict[bool, list[int]] = {True: [], False: []}
    for i, t in enumerate(transitions):
        if t.done:
            ends[t.reward >= 1.0].append(i)
    small, big = sorted(ends.values(), key=len)
    if max_repeat <= 1 or not small:
        return transitions, examples
    extra = min(max_repeat, len(big) // len(small)) - 1
    if extra <= 0:
        return transitions, examples
    idx = list(range(len(transitions))) + small * extra
    return [transitions[i] for i in idx], [examples[i] for i in idx]
