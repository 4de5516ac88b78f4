"""Generation spread over several servers (`HTTPTokenBackend`): rows dealt over live servers with the same samples as
one local backend, a dead server's rows failed over, adapters pushed to every server; and the experience model run
on a server (`dreamgym export-em` + `ExperienceModel.load(url=...)`) predicting exactly what it predicts in process."""

import copy
import dataclasses
import json

import pytest
from em_helpers import dial_query, dial_trajectories

from dreamgym.llm import SamplingParams
from dreamgym.llm.hf import HFBackend
from dreamgym.llm.http import HTTPPolicyBackend, HTTPTokenBackend, LLMEndpointError, split_urls
from dreamgym.llm.server import start_server

PROMPTS = ["Task: set the dial to 3", "hi", "State: [dial] 4 [button] submit", "Task: turn it down", "ok", "go"]


class CountingBackend(HFBackend):
    """The served HFBackend, counting the rows each server decoded (which server answered is what is tested)."""

    rows = 0

    def generate_from_ids(self, prompts, params, **kw):
        self.rows += len(prompts)
        return super().generate_from_ids(prompts, params, **kw)


@pytest.fixture
def two_servers(tiny_preset):  # noqa: F811
    model, tok = tiny_preset
    backends = [CountingBackend(copy.deepcopy(model), tok, batch_size=64) for _ in range(2)]
    handles = [start_server(b, model_name="tiny") for b in backends]
    yield handles, backends
    for h in handles:
        h.stop()


def test_split_urls_reads_one_or_several_servers():
    assert split_urls("http://a:1/v1") == (["http://a:1/v1"], None)
    assert split_urls("http://a:1/v1, http://b:2/v1#em") == (["http://a:1/v1", "http://b:2/v1"], "em")
    for bad in ("a:1/v1", "http://a/v1#x,http://b/v1#y", "http://a/v1,"):
        with pytest.raises(ValueError):
            split_urls(bad)


def test_rows_spread_over_servers_sample_what_one_local_backend_samples(two_servers, tiny_preset):  # noqa: F811
    handles, backends = two_servers
    model, tok = tiny_preset
    local = HFBackend(copy.deepcopy(model), tok, batch_size=64)
    pool = HTTPTokenBackend([h.url for h in handles], copy.deepcopy(tok), served_model="tiny", max_retries=0)
    assert [b.rows for b in backends] == [2, 2]  # each server's start-up probe: a token-id and a constrained row
    for b in backends:
        b.rows = 0
    reqs = [[{"role": "user", "content": p}] for p in PROMPTS]
    assert [pool.prompt_ids(r) for r in reqs] == [local.prompt_ids(r) for r in reqs]
    params = SamplingParams(max_tokens=10, seed=13)
    want = local.generate(reqs, params)
    got = pool.generate(reqs, params)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.logprobs for c in got] == [pytest.approx(c.logprobs, abs=1e-4) for c in want]
    assert [b.rows for b in backends] == [3, 3]  # dealt round-robin

    # One server dies: its rows go to the other, samples unchanged, the death recorded with its reason.
    handles[0].stop()
    again = pool.generate(reqs, params)
    assert [c.token_ids for c in again] == [c.token_ids for c in want]
    assert list(pool.down) == [handles[0].url] and pool.failovers >= 1
    assert backends[1].rows == 3 + len(PROMPTS)

    handles[1].stop()
    with pytest.raises(LLMEndpointError, match="every server is down") as e:
        pool.generate(reqs, params)
    assert handles[0].url in str(e.value) and handles[1].url in str(e.value)
    pool.close()


def test_policy_adapter_is_pushed_to_every_server(two_servers, tiny_preset):  # noqa: F811
    from dreamgym.trainers.common import ModelConfig, prepare_policy

    handles, backends = two_servers
    model, tok = tiny_preset
    policy = prepare_policy(copy.deepcopy(model), ModelConfig(lora=True, lora_r=4))
    local = HFBackend(policy, tok, batch_size=64)
    with HTTPPolicyBackend([h.url for h in handles], policy, copy.deepcopy(tok), served_model="tiny",
                           max_retries=0) as backend:
        reqs = [[{"role": "user", "content": p}] for p in PROMPTS]
        got = backend.generate(reqs, SamplingParams(max_tokens=6, seed=2))
        assert backend.pushes == 1
        for c in backend.clients:
            assert c.models() == ["tiny", backend.adapter]
        assert [c.token_ids for c in got] == [c.token_ids for c in local.generate(reqs, SamplingParams(max_tokens=6,
                                                                                                       seed=2))]


def test_experience_model_on_a_server_predicts_what_it_predicts_in_process(tmp_path, monkeypatch):
    """A LoRA experience model exported by `dreamgym export-em`, served by serve-model's app, run through
    `ExperienceModel.load(url=...)`: the same prompts (fitted by the checkpoint's tokenizer, with the same drops) and
    the same predictions as the in-process model; the export refuses to overwrite and is a plain HF folder."""
    from dreamgym.cli import main as cli
    from dreamgym.data import write_jsonl
    from dreamgym.experience import ExperienceModel, checkpoint_buffer
    from dreamgym.experience.config import ExperienceModelConfig
    from dreamgym.trainers.common import ModelConfig
    from dreamgym.experience.train import TrainEMConfig, train_em
    from dreamgym.llm.presets import load_preset

    trajs = dial_trajectories(8)
    data = tmp_path / "dial.jsonl"
    write_jsonl(data, trajs)
    ckpt = tmp_path / "em"
    train_em(TrainEMConfig(env="dial", data=str(data), out=str(ckpt), model=ModelConfig(lora=True), max_steps=3,
                        batch_size=4, optim=dataclasses.replace(TrainEMConfig().optim, lr=5e-3),
                        em=ExperienceModelConfig(k=2, embedder="hashing"), log_every=1), trajectories=trajs)
    out = tmp_path / "exported"
    assert cli(["export-em", str(ckpt), str(out)]) == 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / "adapter_config.json").exists()
    assert json.loads((out / "dreamgym_export.json").read_text())["env"] == "dial"
    assert cli(["export-em", str(ckpt), str(out)]) == 2  # never over an existing folder

    served_model, served_tok = load_preset(str(out), device="cpu")
    # Free decoding on both sides: structured decoding's per-field budgets count tokens in process and characters
    # on a server, so with this untrained model's 40 tokens the two would differ by design.
    overrides = ["max_new_tokens=40", "retries=0", "max_prompt_tokens=200", "structured_output=false"]
    queries = [dial_query(v, a, tid=f"q{v}") for v, a in ((1, "turn up"), (4, "turn down"), (3, "submit"))]
    served = CountingBackend(served_model, served_tok, batch_size=8)
    with start_server(served, model_name="em") as handle:
        local = ExperienceModel.load(ckpt, checkpoint_buffer(ckpt, data), device="cpu", config_overrides=overrides)
        remote = ExperienceModel.load(ckpt, checkpoint_buffer(ckpt, data), config_overrides=overrides,
                                      url=f"{handle.url}#em")
        assert isinstance(remote.llm, HTTPTokenBackend)
        assert remote.requests(queries) == local.requests(queries)
        want = local.predict(queries, seed=3)
        got = remote.predict(queries, seed=3)
        assert [p.text for p in got] == [p.text for p in want]
        assert [(p.next_state, p.reward, p.done, p.failed) for p in got] == \
            [(p.next_state, p.reward, p.done, p.failed) for p in want]
        assert remote.stats["examples_dropped"] == local.stats["examples_dropped"] > 0  # fitting happened, the same
        remote.llm.close()

        # A dream GRPO iteration from the command line whose experience model (and curriculum) runs on the server.
        from dreamgym.commands.train import main as train_main

        before, run = served.rows, tmp_path / "dream"
        assert train_main(["--algo", "grpo", "--env", "dial", "mode=dream", f"dream.em={ckpt}", f"run_dir={run}",
                           f"dream.em_url={handle.url}#em", "dream.iterations=1", "dream.curriculum.n_seeds=1", "dream.initial_state=model",
                           "dream.em_overrides=[max_new_tokens=40]", "group_size=2",
                           "tasks_per_iteration=2", "eval_every=0", "eval_at_start=false", "--no-progress",
                           "tensorboard=false", "agent.history=0", "rollout.max_new_tokens=8", "rollout.max_episode_steps=2"]) == 0
        assert served.rows > before
        assert json.loads((run / "summary.json").read_text())["real_steps_used"] == 0
