"""TRL's GRPOTrainer training a policy on multi-turn episodes of a served synthetic environment.

The environment is DreamGym's dream of the dial (the experience model) behind `dreamgym serve-env --dream`; TRL
never imports it. The policy reads DreamGym's agent prompt in its chat template and answers in DreamGym's reply
format (`dreamgym.agent`), so a policy trained by `dreamgym train` carries over (`--model` its final/model folder).
Its `rollout_func` opens one WebSocket session per rollout (`RemoteTextEnv`), plays the episode
turn by turn -- the policy writes an action, the server's experience model writes the next observation -- and
hands TRL one sequence per rollout: the first observation as the prompt, then the policy's action tokens (trained,
`env_mask` 1) interleaved with the observation tokens the environment wrote (not trained, `env_mask` 0). The
rollouts of a batch step concurrently, so the server gathers their steps into shared experience-model batches.

Run against a server you started (`dreamgym serve-env --env dial --dream --em EM --port 8100`):

    python examples/trl_grpo_served_dream.py --env-url http://127.0.0.1:8100 --steps 3

or let it start one in this process from a checkpoint: `--em runs/em`. It prints one JSON line: the losses, the
mean reward per step, whether the parameters changed and the server's batch sizes, and exits 1 when nothing trained
(the parameters did not change: every group's rewards were equal, say, or the learning rate is 0). The policy is the
`tiny` preset (random init, so the point is the plumbing, not learning); any causal LM id works with `--model`. It
runs on CUDA when there is a GPU, else on the CPU (`--device` chooses).

Each prompt chooses its episode: the reset seed is a stable hash of the prompt's text, so any prompt works and equal
prompts play the same task from the same seed. The rollout function plays one episode per prompt it is given, in
order, whether or not TRL repeats a prompt `num_generations` times in that list (TRL 1.16 documents that it passes
the prompts without duplicating them; its sampler repeats them in the dataset's order): a GRPO group of repeated
prompts is one task played several times, and a group of different prompts still trains, only more noisily.
Tested with TRL 1.0.0 and 1.16.0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dreamgym.agent import AgentConfig, build_messages, ground_action, parse_action
from dreamgym.envserve.client import RemoteTextEnv, server_info
from dreamgym.types import Task

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL


def prompt_text(tok: Any, task: Task, state: str, admissible: list[str] | None) -> str:
    """The first turn's prompt: DreamGym's agent prompt (`dreamgym.agent.build_messages`: its system prompt, the
    task, the state and the available actions) rendered by the tokenizer's chat template, as `dreamgym train`
    renders it, so a policy DreamGym trained reads here what it was trained on and answers in its reply format
    (`<think>...</think><action>...</action>`)."""
    return tok.apply_chat_template(build_messages(task, [], state, admissible, AGENT), tokenize=False,
                                   add_generation_prompt=True)


def next_turn_text(tok: Any, task: Task, reply: str, state: str, admissible: list[str] | None) -> str:
    """What the environment adds after a reply for the next turn, in the same chat: the reply's end and a user turn
    with the new state and actions, then the assistant's opening (the template's own text after the reply). One TRL
    sequence holds the whole episode, so the earlier turns stay in context here rather than restated as DreamGym's
    per-turn prompt restates its last `history` turns."""
    first = build_messages(task, [], "", None, AGENT)
    content = build_messages(task, [], state, admissible, AGENT)[1]["content"]
    user = content[len(f"Task: {task.instruction}\n\n"):]  # the task was said in the first turn
    answered = [*first, {"role": "assistant", "content": reply}]
    before = tok.apply_chat_template(answered, tokenize=False)
    after = tok.apply_chat_template([*answered, {"role": "user", "content": user}], tokenize=False,
                                    add_generation_prompt=True)
    return after[len(before):] if after.startswith(before) else f"\n{user}\n"


AGENT = AgentConfig(history=0)
"""The agent prompt's settings: no restated history (the episode's earlier turns are in the sequence itself)."""


def episode_seed(prompt: Any) -> int:
    """The reset seed a prompt chooses: a stable hash of its text (a conversational prompt's messages as JSON)."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return zlib.crc32(text.encode("utf-8"))


def make_rollout_func(env_url: str, *, max_turns: int, max_action_tokens: int, token: str | None = None):
    """TRL's `rollout_func(prompts, trainer)`: one multi-turn episode per prompt it is given, in order, the episode
    chosen by the prompt alone (`episode_seed`), so it does not matter how TRL groups or repeats prompts."""
    import torch

    info = server_info(env_url, token)

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        model, tok = trainer.model, trainer.processing_class
        envs = [RemoteTextEnv(env_url, token=token, info=info) for _ in prompts]
        n = len(prompts)
        try:
            with ThreadPoolExecutor(n) as pool:
                firsts = list(pool.map(lambda ep: ep[0].reset(seed=episode_seed(ep[1])), zip(envs, prompts)))
            tasks = [i["task"] if isinstance(i.get("task"), Task) else Task.from_dict(e.episode["task"])
                     for e, (_, i) in zip(envs, firsts)]
            prompt_ids = [tok(prompt_text(tok, t, o, i["admissible_actions"]), add_special_tokens=False)["input_ids"]
                          for t, (o, i) in zip(tasks, firsts)]
            completion: list[list[int]] = [[] for _ in range(n)]
            logprobs: list[list[float]] = [[] for _ in range(n)]
            mask: list[list[int]] = [[] for _ in range(n)]
            rewards, turns = [0.0] * n, [0] * n
            admissible = [i["admissible_actions"] for _, i in firsts]
            live = list(range(n))
            for _turn in range(max_turns):
                if not live:
                    break
                # One batched generate over the live episodes (left-padded), then their steps concurrently.
                seqs = [prompt_ids[i] + completion[i] for i in live]
                width = max(map(len, seqs))
                pad = tok.pad_token_id
                ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=model.device)
                att = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=model.device)
                with torch.no_grad():
                    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_action_tokens,
                                         do_sample=True, temperature=1.0, pad_token_id=pad,
                                         output_scores=True, return_dict_in_generate=True)
                    lps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
                new = out.sequences[:, width:]
                actions, replies = [], {}
                for row, i in enumerate(live):
                    keep = [t for t in new[row].tolist() if t != pad]
                    completion[i] += keep
                    logprobs[i] += lps[row, :len(keep)].tolist()
                    mask[i] += [1] * len(keep)
                    replies[i] = tok.decode(keep, skip_special_tokens=True)
                    # DreamGym's reply format; a reply without <action>...</action> is grounded as written.
                    text = parse_action(replies[i]) or " ".join(replies[i].split())
                    actions.append(ground_action(text, admissible[i] or [], 0.0))
                with ThreadPoolExecutor(len(live)) as pool:
                    results = list(pool.map(lambda ia: envs[ia[0]].step(ia[1]), zip(live, actions)))
                still = []
                for i, (obs, r, term, trunc, inf) in zip(live, results):
                    rewards[i] += r
                    turns[i] += 1
                    admissible[i] = inf["admissible_actions"]
                    if term or trunc:
                        continue
                    feedback = tok(next_turn_text(tok, tasks[i], replies[i], obs, admissible[i]),
                                   add_special_tokens=False)["input_ids"]
                    completion[i] += feedback
                    logprobs[i] += [0.0] * len(feedback)
                    mask[i] += [0] * len(feedback)
                    still.append(i)
                live = still
            return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs, "env_mask": mask,
                    "env_reward": rewards, "env_turns": turns}
        finally:
            for e in envs:
                e.close()

    return rollout


def env_reward(prompts: list, completions: list, env_reward: list[float], **_: Any) -> list[float]:
    """The served environment's episode return."""
    return [float(r) for r in env_reward]


def brevity(prompts: list, completions: list, env_turns: list[int], **_: Any) -> list[float]:
    """A small cost per turn, so a group whose episodes all fail still ranks the shorter ones."""
    return [-0.05 * t for t in env_turns]


def pick_device(device: str = "") -> str:
    """`device`, or CUDA when there is a GPU, else the CPU."""
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def run(env_url: str, *, out_dir: str, steps: int = 3, group: int = 4, prompts_per_step: int = 2,
        max_turns: int = 4, max_action_tokens: int = 4, model_name: str = "tiny", seed: int = 0,
        learning_rate: float = 1e-3, device: str = "", token: str | None = None) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from dreamgym.llm.presets import load_preset

    torch.manual_seed(seed)
    device = pick_device(device)
    model, tok = load_preset(model_name, device=device)
    model.train()
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = Dataset.from_dict({"prompt": [f"Play the dial, episode {chr(65 + i % 26)}{i // 26}."
                                         for i in range(steps * prompts_per_step)]})
    config = GRPOConfig(output_dir=out_dir, max_steps=steps, per_device_train_batch_size=group * prompts_per_step,
                        num_generations=group, max_completion_length=512, learning_rate=learning_rate,
                        logging_steps=1, report_to=[], save_strategy="no", use_cpu=device == "cpu", seed=seed,
                        bf16=False,
                        dataloader_num_workers=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[env_reward, brevity], args=config,
                          train_dataset=data, rollout_func=make_rollout_func(env_url, max_turns=max_turns,
                                                                             max_action_tokens=max_action_tokens,
                                                                             token=token))
    trainer.train()
    logs = trainer.state.log_history
    changed = any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    return {"losses": [h["loss"] for h in logs if "loss" in h],
            "rewards": [h["reward"] for h in logs if "reward" in h],
            "reward_std": [h["reward_std"] for h in logs if "reward_std" in h],
            "parameters_changed": changed, "device": device,
            "server_batches": server_info(env_url, token)["gatherer"]}


def nothing_trained(result: dict[str, Any]) -> str | None:
    """Why a run trained nothing, in one line, or None when the parameters moved."""
    if result["parameters_changed"]:
        return None
    return (f"nothing trained: the parameters did not change over {len(result['losses'])} steps (losses "
            f"{result['losses']}, reward std {result['reward_std']}: a group whose rewards are all equal has no "
            "advantage to follow; or the learning rate is 0)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env-url", help="a running dreamgym serve-env --dream (default: start one from --em)")
    ap.add_argument("--em", help="experience-model checkpoint to serve in this process")
    ap.add_argument("--out", default="runs/trl-served-dream")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-action-tokens", type=int, default=4,
                    help="tokens per reply (default 4, for the random tiny preset; a policy trained by dreamgym "
                         "train writes <think>...</think><action>...</action>: give it 32 or more)")
    ap.add_argument("--device", default="", help="cpu, cuda, cuda:1, ... (default: cuda when there is a GPU)")
    a = ap.parse_args(argv)
    token = os.environ.get("DREAMGYM_ENV_TOKEN") or None
    kw = {"out_dir": a.out, "steps": a.steps, "model_name": a.model, "learning_rate": a.learning_rate,
          "max_turns": a.max_turns, "max_action_tokens": a.max_action_tokens, "device": a.device}
    if a.env_url:
        result = run(a.env_url, token=token, **kw)
    elif a.em:
        from dreamgym.envserve.server import EnvServerConfig, start_env_server

        with start_env_server(EnvServerConfig(env="dial", dream=True, em=a.em, device=pick_device(a.device))) as srv:
            result = run(srv.url, **kw)
    else:
        ap.error("give --env-url or --em")
    print(json.dumps(result))
    problem = nothing_trained(result)
    if problem:
        print(f"trl_grpo_served_dream: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
