"""The reasoning experience model M_exp: what it reads and writes, how it predicts, the data it learns from, how
it is trained, and the checkpoint it lives in.

Owns, one concept per module (each imports only the ones listed before it):

- `config`: `ExperienceModelConfig`, the settings saved with every checkpoint;
- `edits`: line edits of a state (what changed: lines that go, come, stay), derived from a pair of states and
  applied to a state;
- `hooks`: the environment families' optional hooks, the package's only door to a family;
- `format`: the prompt, the strict output format (the next state whole or as an edit) and its parser, the reset
  pseudo-action, the failure state, `FORMAT_VERSION`, and `Prediction`;
- `reasoning`: reasoning-trace teachers (environment-grounded, LLM) for the training targets' `<think>`;
- `checkpoint`: the checkpoint layout (`em_config.json`, `model/`, the resumable `checkpoint/`) and reading it back;
- `shortcuts`: the `OutcomeResolver` seam (outcomes given without a model call, answers rejected as
  contradicting the action) and `FamilyShortcuts`, its implementation from the family hooks;
- `model`: `ExperienceModel`, batched prediction with retrieval, retries and the failure state;
- `data`: experience-model transitions, the seed replay buffer, tokenized training examples;
- `train`: `TrainEMConfig`, the SFT loop (`train_em`) and the `dreamgym train-em` command;
- `consistency`: the checks that call a predicted next state a self-contradiction (a generic one, and one per family
  that has its own: the only place the package reads the dial's, WebShop's and ALFWorld's state formats);
- `fidelity`: how faithful a trained model is on held-out real transitions (`dreamgym eval-em`) and the gate that
  says whether it is fit to dream in.

Must not know: any concrete environment (families are reached through `dreamgym.envs.family` only, for their
optional hooks and reasoning teachers), trainers of the agent, the replay buffer's storage (it is used through
`add`, `retrieve` and `transitions`). torch, transformers and peft are imported inside the functions that need
them, so importing this package, or predicting through a backend of the LLM seam other than `dreamgym.llm.hf`,
never loads them.
"""

from dreamgym.experience.checkpoint import EM_CONFIG_FILE, read_checkpoint_meta
from dreamgym.experience.config import ExperienceModelConfig
from dreamgym.experience.data import buffer_for, checkpoint_buffer, em_transitions
from dreamgym.experience.format import FAILURE_STATE, RESET_ACTION, Prediction, query_for
from dreamgym.experience.model import ExperienceModel
from dreamgym.experience.shortcuts import OutcomeResolver

__all__ = ["EM_CONFIG_FILE", "FAILURE_STATE", "RESET_ACTION", "ExperienceModel", "ExperienceModelConfig",
           "OutcomeResolver", "Prediction", "buffer_for", "checkpoint_buffer", "em_transitions", "query_for",
           "read_checkpoint_meta"]
