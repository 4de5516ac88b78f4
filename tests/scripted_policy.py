"""A policy backend for tests of the engine and the loops, not of a model: the real tiny tokenizer and chat
template, with each reply written by a function of the prompt (`ScriptedBackend`); `expert_reply` plays the dial
by its rule."""

import re

from dreamgym.envs.dial import expert_action
from dreamgym.llm.base import Completion


class ScriptedBackend:
    """Real tokenizer and chat template; the reply text comes from `reply(prompt_text)`."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply, self.calls = tokenizer, reply, 0

    def prompt_ids(self, request):
        text = self.tokenizer.apply_chat_template(request, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate_from_ids(self, prompts, params):
        self.calls += 1
        out = []
        for p in prompts:
            text = self.reply(self.tokenizer.decode(p))
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Completion(text=text, token_ids=ids, logprobs=[-0.5] * len(ids), prompt_token_ids=list(p)))
        return out


def expert_reply(prompt: str) -> str:
    target = int(re.search(r"set the dial to (\d)", prompt).group(1))
    value = int(re.findall(r"\[dial\] (\d)", prompt)[-1])  # the current state is the last one shown
    return f"<think>dial {value}, target {target}</think><action>{expert_action(value, target)}</action>"
