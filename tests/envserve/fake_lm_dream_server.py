"""A `serve-env --dream` process whose experience model runs on the fake LM for tests (not a test module).

    python tests/envserve/fake_lm_dream_server.py --buffer DIR [--max-body-mb 0.05] [--max-sessions 80]

The server, its sessions, the gatherer's batching, the replay buffer (persistent at DIR, owned by this process) and
the protocol are the real ones (`dreamgym.envserve.server.serve`); only the experience model's LLM is
`dreamgym.llm.fake.FakeLLM` answering with `em_helpers.dial_sim` (the dial's true dynamics), so thousands of
episodes cost milliseconds each on a CPU. Prints the URL it serves, as `dreamgym serve-env` does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dreamgym.replay.buffer import ReplayBuffer
from dreamgym.replay.embed import HashingEmbedder
from dreamgym.envserve.server import EnvHost, EnvServerConfig, serve
from dreamgym.experience import ExperienceModel, ExperienceModelConfig, em_transitions
from dreamgym.llm.base import ChatRequest, Completion, SamplingParams
from dreamgym.llm.fake import FakeLLM
from em_helpers import dial_sim, dial_trajectories

EM_CONFIG = {"k": 2, "history": 3}
"""The experience model's settings, shared with the in-process reference the load test compares against."""


class ForgetfulFakeLLM(FakeLLM):
    """FakeLLM keeps every request it answered (for tests that inspect them); a server answering tens of thousands
    would grow by that record alone, and the load test measures the server's memory."""

    def generate(self, requests: list[ChatRequest], params: SamplingParams, *,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        try:
            return super().generate(requests, params, seeds=seeds)
        finally:
            self.calls.clear()
            self.seeds.clear()


def fake_dream_model(buffer: ReplayBuffer | None) -> ExperienceModel:
    return ExperienceModel(ForgetfulFakeLLM(dial_sim), buffer=buffer, config=ExperienceModelConfig(**EM_CONFIG),
                           env="dial")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--buffer", required=True)
    ap.add_argument("--max-sessions", type=int, default=80)
    ap.add_argument("--max-body-mb", type=float, default=1.0)
    ap.add_argument("--batch-wait-ms", type=float, default=5.0)
    a = ap.parse_args()
    buffer = ReplayBuffer(a.buffer, HashingEmbedder())
    if len(buffer) == 0:
        buffer.add(em_transitions(dial_trajectories(12), history=EM_CONFIG["history"]), seed_data=True)
    cfg = EnvServerConfig(env="dial", dream=True, buffer=a.buffer, max_sessions=a.max_sessions,
                          max_body_mb=a.max_body_mb, batch_wait_ms=a.batch_wait_ms)
    serve(EnvHost(cfg, model=fake_dream_model(buffer), buffer=buffer), port=0, log_level="warning")


if __name__ == "__main__":
    main()
