"""Synthetic transitions per second (a batch of episodes stepped together inside the experience model) beside each
real environment family's steps per second, in one run, with the experience model's prompt sharing off and on.

    python benchmarks/bench_synthetic.py [--model CHECKPOINT] [--real dial,alfworld,webshop,miniwob]
        [--episodes 32[,128]] [--group 8] [--turns 6] [--threads 1]
    python benchmarks/bench_synthetic.py --env dial --model CHECKPOINT --structured   # free vs structured decoding
    python benchmarks/bench_synthetic.py --env miniwob --model WHOLE_EM,EDIT_EM --real miniwob --sharing on --split

The synthetic side is `--env`'s (dial by default): `--model` is its experience-model checkpoint (the quickstart's
`runs/quickstart/em` is the one the dial results use); without it, a small tiny-preset experience model is trained
on freshly collected data first and cached (under $DREAMGYM_CACHE/bench), its training time printed but not
measured. It runs `--episodes` SyntheticEnv episodes in GRPO groups of `--group` (a group shares its task and reset
seed; the groups' seeds spread over the task list), random admissible actions, one `step_batch` (one model call) per turn, with a replay buffer (hashing
embedder) seeded from real data and growing with every synthetic step; twice, with the backend's prompt sharing
(`HFBackend(share_prompts=...)`: identical queries decoded once, common prefixes prefilled once) off and on, after
one untimed warm-up turn. Each real family in `--real` is stepped with its random policy in one process for
`--seconds` (resets included); MiniWoB++ plays its noisy oracle in one real Chromium (`benchmarks/bench_web.py`).
Several comma-separated `--model` checkpoints (a `state_format: whole` and an `edit` one) are each timed, then the
real side once; `--sharing` picks the sharing runs.

`--split` says where a synthetic step's time goes, per synthetic step: prompt, prefilled and generated tokens, and the
seconds of retrieval, prompt building, prefill, decode forwards, the decoding constraint, sampling, stop checks,
parsing and the environment's side (`ExperienceModel.timings`, `HFBackend.stats`), beside the raw costs measured
after the timed turns on the same model: a bare forward over a batch of prompts of the run's mean length (prefill
tokens/s) and a bare greedy decode loop at the batch's size without the constraint (tokens/s).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path


def real_steps_per_s(env_name: str, seconds: float = 3.0) -> tuple[float, int]:
    from dreamgym.envs import family

    fam = family(env_name)
    env = fam.make_env("train")
    rng = random.Random(0)
    n, t0, ep = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        obs, info = env.reset(seed=ep)
        ep += 1
        while True:
            acts = info.get("admissible_actions") or fam.admissible_from_state(info["abstract_state"])
            obs, r, term, trunc, info = env.step(rng.choice(acts) if acts else "look")
            n += 1
            if term or trunc:
                break
    env.close()
    return n / (time.perf_counter() - t0), n


def default_model(env_name: str) -> Path:
    from dreamgym.commands.collect import collect
    from dreamgym.experience import ExperienceModelConfig
    from dreamgym.experience.train import TrainEMConfig, train_em
    from dreamgym.utils.paths import cache_dir

    spec = {"env": env_name, "episodes": 600, "max_steps": 300, "k": 2, "embedder": "hashing", "v": 1}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    root = cache_dir("bench")
    out = root / f"em-{env_name}-{key}"
    if (out / "train_summary.json").is_file():
        return out
    data = root / f"{env_name}-{key}.jsonl"
    collect(env_name, {"oracle": 0.5, "noisy": 0.3, "random": 0.2}, spec["episodes"], data, overwrite=True,
            progress=False)
    t0 = time.perf_counter()
    train_em(TrainEMConfig(env=env_name, data=str(data), out=str(out), max_steps=spec["max_steps"], resume=False,
                        em=ExperienceModelConfig(k=spec["k"], embedder=spec["embedder"]), log_every=100))
    print(f"trained a benchmark experience model in {time.perf_counter() - t0:.0f}s -> {out}")
    return out


def held_out_transitions(model_dir: Path, env_name: str, episodes: int) -> list:
    """Transitions of `episodes` test-split episodes of the family's scripted policies (none of them trained on)."""
    import tempfile

    from dreamgym.commands.collect import collect
    from dreamgym.data import load_trajectories
    from dreamgym.experience import em_transitions, read_checkpoint_meta

    meta = read_checkpoint_meta(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "held-out.jsonl"
        collect(env_name, {"oracle": 0.5, "noisy": 0.3, "random": 0.2}, episodes, data, split="test", seed=7,
                overwrite=True, progress=False)
        trajs = load_trajectories(data)
    return em_transitions(trajs, history=meta["model"]["history"], binary_reward=meta["model"]["binary_reward"])


def answer_stats(model, queries: list, batch: int) -> dict:
    """The model's first answers to `queries` (no retry): how many are malformed, the generated tokens per
    answer, and the wall time per answer."""
    import statistics

    from dreamgym.experience.format import parse_completion

    texts, tokens, t0 = [], [], time.perf_counter()
    for k in range(0, len(queries), batch):
        part = queries[k:k + batch]
        comps = model.llm.generate(model.requests(part), model._request_params(part, model.config.temperature, 0))
        texts += [c.text for c in comps]
        tokens += [len(c.token_ids) for c in comps]
    dt = time.perf_counter() - t0
    malformed = sum(parse_completion(t)[0] is None for t in texts)
    return {"answers": len(texts), "malformed": malformed, "median_tokens": statistics.median(tokens),
            "max_tokens": max(tokens), "ms_per_answer": 1000 * dt / len(texts)}


def load_model(model_dir: Path, episodes: int, structured: bool, url: str | None = None,
               overrides: tuple[str, ...] = ()):
    """The checkpoint as an `ExperienceModel` (hashing retrieval over its own training data), with or without
    structured decoding and with `overrides` of its config; `url`: generate on that server instead."""
    from dreamgym.data import load_trajectories
    from dreamgym.experience import ExperienceModel, buffer_for, em_transitions, read_checkpoint_meta

    meta = read_checkpoint_meta(model_dir)
    seed_trs = em_transitions(load_trajectories(meta["train"]["data"])[:300], history=meta["model"]["history"])
    buf = buffer_for(seed_trs, "hashing")
    return ExperienceModel.load(model_dir, buffer=buf, device="cpu", batch_size=episodes, url=url,
                                config_overrides=["embedder=hashing", f"structured_output={structured}", *overrides])


def synthetic_steps_per_s(model_dir: Path, env_name: str, episodes: int, turns: int,
                          structured: bool = True, overrides: tuple[str, ...] = (), *, group: int = 1,
                          share: bool | None = None, warmup: int = 0, floors: bool = False) -> dict:
    """Synthetic transitions/s over `turns` batched turns (after `warmup` untimed ones) of `episodes` episodes in
    groups of `group` sharing a reset seed; `share` sets the backend's prompt sharing (None: as loaded)."""
    from dreamgym.envs import family
    from dreamgym.dream.synthetic_env import SyntheticBatcher, SyntheticEnv

    model = load_model(model_dir, episodes, structured, overrides=overrides)
    if share is not None:
        model.llm.share_prompts = share
    buf = model.buffer
    assert buf is not None
    fam = family(env_name)
    batcher = SyntheticBatcher()  # one per run: its counters are this run's
    envs = [SyntheticEnv(model, batcher=batcher) for _ in range(episodes)]
    rng = random.Random(0)
    # Groups' seeds spread over the task list (a seed picks task `seed % len(tasks)`): consecutive seeds are one
    # page's instances in MiniWoB++'s list (20 per task), which would time its smallest page only.
    stride = max(1, len(envs[0].tasks) // max(1, -(-episodes // group)))
    infos = [e.reset(seed=i // group * stride)[1] for i, e in enumerate(envs)]
    n, calls, t0 = 0, 0, time.perf_counter()
    for turn in range(warmup + turns):
        if turn == warmup:
            n, calls, t0 = 0, 0, time.perf_counter()
            model.stats.clear()
            model.timings.clear()
            stats0 = dict(getattr(model.llm, "stats", {}))
        live = [i for i, e in enumerate(envs) if not e._done]
        if not live:  # start new episodes where all ended, so the batch stays full
            infos = [e.reset(seed=i // group * stride + turn)[1] for i, e in enumerate(envs)]
            live = list(range(episodes))
        acts = []
        for i in live:
            adm = infos[i]["admissible_actions"] or fam.admissible_from_state(infos[i]["abstract_state"])
            acts.append(rng.choice(adm) if adm else "look")
        outs = SyntheticEnv.step_batch([envs[i] for i in live], acts)
        for i, o in zip(live, outs):
            infos[i] = o[4]
        n += len(live)
        calls += 1
    dt = time.perf_counter() - t0
    backend = {k: v - stats0.get(k, 0) for k, v in getattr(model.llm, "stats", {}).items()}
    out = {"transitions": n, "model_calls": calls, "seconds": dt, "per_s": n / dt, "backend": backend,
           "timings": dict(model.timings), "failures": model.stats["failures"],
           "malformed": model.stats["malformed"], "buffer_size": len(buf),
           "state_format": model.config.state_format}
    if floors:
        out["floors"] = bare_floors(model.llm, max(1, round(backend.get("rows_decoded", 0) / max(1, calls))),
                                    backend, calls)
    return out


def bare_floors(llm, batch: int, backend: dict, calls: int, repeats: int = 2) -> dict:
    """The raw costs under a synthetic step, on the same model and this thread count: a bare forward over a batch of
    `batch` prompts (the rows decoded per call) of the run's mean prompt length (no padding, no cache kept: prefill
    tokens/s), and a bare greedy decode loop at that batch over that context, in the backend's own KV cache, for the
    run's mean decode steps per call (no constraint, no sampling, no stop checks: generated tokens/s). Random token ids: the cost depends on the shapes only."""
    import torch

    from dreamgym.llm.hf import kv_cache

    model = llm.model
    rows = max(1, backend.get("rows_decoded", 0))
    length = max(2, round(backend.get("prompt_tokens", 0) / rows))
    steps = max(1, round(backend.get("decode_steps", 0) / max(1, calls)))
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (batch, length), generator=gen)
    best_prefill = best_decode = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            cache = kv_cache(model.config)  # the backend's own decoding cache
            t0 = time.perf_counter()
            out = model(input_ids=ids, use_cache=True, past_key_values=cache, logits_to_keep=1)
            best_prefill = min(best_prefill, time.perf_counter() - t0)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            for _ in range(steps):
                out = model(input_ids=tok, use_cache=True, past_key_values=cache, logits_to_keep=1)
                tok = out.logits[:, -1].argmax(-1, keepdim=True)
            best_decode = min(best_decode, time.perf_counter() - t0)
    return {"batch": batch, "prompt_len": length, "decode_steps": steps,
            "prefill_tok_s": batch * length / best_prefill, "decode_tok_s": batch * steps / best_decode,
            "decode_step_s": best_decode / steps}


def print_split(syn: dict) -> None:
    """Where a synthetic step's time went, per synthetic step, beside the floors `bare_floors` measured."""
    n = syn["transitions"]
    b, t = syn["backend"], syn["timings"]
    per = {k: v / n for k, v in b.items()}
    print(f"per synthetic step: {per.get('prompt_tokens', 0):.0f} prompt tokens ({per.get('prefilled_tokens', 0):.0f} "
          f"prefilled, {per.get('prefill_positions', 0):.0f} positions with the padding), "
          f"{per.get('generated_tokens', 0):.1f} generated tokens; "
          f"{b.get('decode_steps', 0) / max(1, syn['model_calls']):.0f} decode steps per batched call")
    fl = syn.get("floors", {})
    prefill_floor = b.get("prefilled_tokens", 0) / fl["prefill_tok_s"] / n if fl else None
    decode_floor = b.get("generated_tokens", 0) / fl["decode_tok_s"] / n if fl else None
    generate = t.get("generate_s", 0.0)
    inside = sum(b.get(k, 0.0) for k in ("compile_s", "prefill_s", "forward_s", "constraint_s", "sample_s",
                                          "stop_s"))
    # The backend's tokenizing inside generate (the fitted prompts again: cached ids, the template rendered once
    # more) is in tokenize_s, which also holds the fitting's, so generate's own share is what the parts leave.
    model_parts = sum(t.get(k, 0.0) for k in ("retrieval_s", "prompt_s", "params_s", "generate_s", "parse_s"))
    rows = [
        ("retrieval (replay buffer top-k)", t.get("retrieval_s", 0.0), None),
        ("prompt building and fitting (incl. its tokenizing)", t.get("prompt_s", 0.0), None),
        ("sampling params (edit: per-state regex)", t.get("params_s", 0.0), None),
        ("constraint compile + matchers", b.get("compile_s", 0.0), None),
        ("prefill", b.get("prefill_s", 0.0), prefill_floor),
        ("decode forwards", b.get("forward_s", 0.0), decode_floor),
        ("decoding constraint (masks, apply, accept)", b.get("constraint_s", 0.0), 0.0),
        ("sampling + log-probs + host copy", b.get("sample_s", 0.0), None),
        ("eos / stop checks", b.get("stop_s", 0.0), None),
        ("rest of generate (tokenize, padding, output)", generate - inside, None),
        ("parsing answers", t.get("parse_s", 0.0), None),
        ("env side (queries, apply, buffer add)", syn["seconds"] - model_parts, None),
    ]
    print("| part | ms per synthetic step | share | floor ms per step |")
    print("|---|---:|---:|---:|")
    for name, sec, floor in rows:
        print(f"| {name} | {1000 * sec / n:.1f} | {100 * sec / syn['seconds']:.0f}% | "
              f"{'' if floor is None else f'{1000 * floor:.1f}'} |")
    print(f"| whole step | {1000 * syn['seconds'] / n:.1f} | 100% | "
          f"{'' if prefill_floor is None else f'{1000 * (prefill_floor + decode_floor):.1f}'} |")
    if fl:
        print(f"floors (same model, batch {fl['batch']}, {fl['prompt_len']} prompt tokens, {fl['decode_steps']} decode "
              f"steps): bare prefill {fl['prefill_tok_s']:.0f} prompt tokens/s, bare decode {fl['decode_tok_s']:.0f} "
              f"tokens/s ({1000 * fl['decode_step_s']:.1f} ms per batched step); the dream's whole step: "
              f"{b.get('prompt_tokens', 0) / syn['seconds']:.0f} prompt tokens/s, prefill alone "
              f"{b.get('prefilled_tokens', 0) / max(1e-9, b.get('prefill_s', 0.0)):.0f}/s")


def real_family_steps_per_s(env_name: str, seconds: float) -> tuple[float, int]:
    """`real_steps_per_s` for a text family; MiniWoB++ with one browser (bench_web.py's noisy oracle)."""
    if env_name != "miniwob":
        return real_steps_per_s(env_name, seconds)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_web import real_steps_per_s as browser_steps_per_s

    return browser_steps_per_s(1, seconds)


def compare_real(model_dirs: list[Path], a: argparse.Namespace) -> None:
    """Real steps/s of each family in `--real` beside synthetic steps/s of each checkpoint in `--model`, with the
    backend's prompt sharing as `--sharing` says; with `--split`, where each synthetic step's time went."""
    import datetime
    import os

    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, torch threads {a.threads}")
    shares = {"off": (False,), "on": (True,), "both": (False, True)}[a.sharing]
    counts = [int(n) for n in str(a.episodes).split(",")]
    syn: dict[tuple[Path, bool, int], dict] = {}
    for model_dir in model_dirs:
        for share in shares:
            for episodes in counts:
                r = synthetic_steps_per_s(model_dir, a.env, episodes, a.turns, group=a.group, share=share,
                                          warmup=1, floors=a.split)
                syn[model_dir, share, episodes] = r
                b = r["backend"]
                print(f"synthetic {a.env} ({model_dir.name}, state_format {r['state_format']}), sharing "
                      f"{'on ' if share else 'off'}, {episodes} episodes: {r['per_s']:.2f} transitions/s "
                      f"({r['transitions']} in "
                      f"{r['model_calls']} batched calls, {r['seconds']:.1f}s; rows decoded "
                      f"{b.get('rows_decoded')}/{b.get('rows')}, prompt tokens prefilled {b.get('prefilled_tokens')}/"
                      f"{b.get('prompt_tokens')}, {b.get('generated_tokens')} generated; {r['malformed']} malformed, "
                      f"{r['failures']} failure states)", flush=True)
                if a.split:
                    print_split(r)
    print(f"x{'/'.join(map(str, counts))} episodes in groups of {a.group}, {a.turns} turns")
    cols = [(d, sh, n) for d in model_dirs for sh in shares for n in counts]
    print("| real family | real steps/s | " + " | ".join(
        f"synthetic/real, {d.name} ({syn[d, sh, n]['state_format']}), sharing {'on' if sh else 'off'}, {n} episodes"
        for d, sh, n in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name in a.real.split(","):
        real, n = real_family_steps_per_s(name, a.seconds)
        print(f"| {name} | {real:.2f} ({n} steps) | " + " | ".join(
            f"{syn[c]['per_s'] / real:.4f}" for c in cols) + " |", flush=True)
    if len(shares) == 2:
        for d in model_dirs:
            for n in counts:
                print(f"{d.name}, {n} episodes: sharing on/off: "
                      f"{syn[d, True, n]['per_s'] / syn[d, False, n]['per_s']:.2f}x")


def compare_structured(model_dir: Path, env_name: str, a: argparse.Namespace) -> None:
    """Free versus structured decoding, side by side: first answers on held-out transitions in-process and over
    HTTP (an in-process `dreamgym serve-model` on a loopback port serving the checkpoint's weights), then
    synthetic steps/s."""
    from dreamgym.llm.server import start_server

    overrides = () if a.temperature is None else (f"temperature={a.temperature}",)
    queries = held_out_transitions(model_dir, env_name, a.held_out_episodes)
    print(f"{len(queries)} held-out transitions ({a.held_out_episodes} test-split episodes), batch {a.episodes}, "
          f"{' '.join(overrides) or 'the checkpoint temperature'}")
    print("| path | decoding | malformed first answers | median tokens | max tokens | ms/answer |")
    print("|---|---|---|---|---|---|")
    for structured in (False, True):
        model = load_model(model_dir, a.episodes, structured, overrides=overrides)
        answer_stats(model, queries[:1], 1)  # warm-up: the first call of a process pays one-off costs
        rows = [("in-process", answer_stats(model, queries, a.episodes))]
        with start_server(model.llm, model_name="em") as server:
            http = load_model(model_dir, a.episodes, structured, url=f"{server.url}#em", overrides=overrides)
            rows.append(("HTTP serve-model", answer_stats(http, queries, a.episodes)))
            http.llm.close()
        for path, st in rows:
            print(f"| {path} | {'structured' if structured else 'free'} | {st['malformed']}/{st['answers']} | "
                  f"{st['median_tokens']:g} | {st['max_tokens']} | {st['ms_per_answer']:.1f} |")
    for structured in (False, True):
        syn = synthetic_steps_per_s(model_dir, env_name, a.episodes, a.turns, structured, overrides)
        print(f"synthetic ({'structured' if structured else 'free'}, x{a.episodes}): {syn['per_s']:.1f} "
              f"transitions/s ({syn['transitions']} in {syn['seconds']:.1f}s, {syn['malformed']} malformed, "
              f"{syn['failures']} failure states)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="dial", help="the synthetic side's family")
    ap.add_argument("--model", help="experience-model checkpoint (default: train a small one, cached); several, "
                                    "comma-separated (e.g. a `state_format: whole` and an `edit` one), each timed")
    ap.add_argument("--sharing", choices=("off", "on", "both"), default="both",
                    help="the backend's prompt sharing on the synthetic side")
    ap.add_argument("--split", action="store_true",
                    help="where a synthetic step's time goes (retrieval, prompts, prefill, decode, the decoding "
                         "constraint, parsing), per step, beside a bare forward and a bare decode of the same model")
    ap.add_argument("--real", default="dial,alfworld,webshop,miniwob", help="real families to compare with")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds each real family is stepped")
    ap.add_argument("--episodes", default="32",
                    help="synthetic episodes stepped together; several, comma-separated (e.g. 32,128), each timed")
    ap.add_argument("--group", type=int, default=8, help="episodes sharing a task and reset seed (a GRPO group)")
    ap.add_argument("--turns", type=int, default=6, help="batched turns to time")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (2 on a loaded 2-core machine decode several times slower than 1)")
    ap.add_argument("--structured", action="store_true",
                    help="compare free and structured decoding (held-out answers in-process and over HTTP, "
                         "synthetic steps/s) instead of synthetic versus real")
    ap.add_argument("--held-out-episodes", type=int, default=24, help="test-split episodes for --structured")
    ap.add_argument("--temperature", type=float, default=None,
                    help="experience-model sampling temperature for --structured (default: the checkpoint's)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    model_dirs = [Path(m) for m in a.model.split(",")] if a.model else [default_model(a.env)]
    if a.structured:
        a.episodes = int(a.episodes.split(",")[0])  # one batch size there
        compare_structured(model_dirs[0], a.env, a)
        return
    compare_real(model_dirs, a)


if __name__ == "__main__":
    main()
