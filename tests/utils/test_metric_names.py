"""Metric namespaces: every name a run logs today is under one of them, and a name an older run logged reads as
the one that replaced it (so old run folders display beside new ones)."""

import pytest

from dreamgym.utils.metric_names import NAMESPACES, current_name, current_row, namespaced

OLD_TO_NEW = {
    # the run loop's rollout figures and counts, once logged without a namespace
    "success_rate": "rollout/success_rate", "mean_reward": "rollout/mean_reward", "episodes": "rollout/episodes",
    "episodes_failed": "rollout/episodes_failed", "end_won": "rollout/end_won",
    "end_env_error": "rollout/end_env_error", "iteration": "rollout/iteration",
    "real_steps_used": "rollout/real_steps_used", "synthetic_steps": "rollout/synthetic_steps",
    "rollout_time_s": "rollout/rollout_time_s", "gen_tokens": "rollout/gen_tokens",
    # the update's, once logged without a namespace
    "loss": "losses/loss", "policy_loss": "losses/policy_loss", "zero_variance_groups": "losses/zero_variance_groups",
    "explained_variance": "losses/explained_variance", "update_time_s": "losses/update_time_s",
    "update_tokens_per_s": "losses/update_tokens_per_s", "optimizer_steps": "losses/optimizer_steps",
    # SFT's and DPO's, once under the trainer's name
    "sft/loss": "losses/loss", "sft/epoch": "losses/epoch", "dpo/margin": "losses/margin",
    "sft/replay_success": "eval/replay_success",
    # already under today's namespaces
    "dream/buffer/size": "dream/buffer/size", "dream/curriculum/valid_share": "dream/curriculum/valid_share",
    "em/loss": "em/loss", "eval/success_rate": "eval/success_rate",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_name_reads_as_todays_and_todays_names_stay(old):
    new = OLD_TO_NEW[old]
    assert current_name(old) == new
    assert current_name(new) == new  # a row written today is read unchanged
    assert new.startswith(NAMESPACES)


def test_a_row_keeps_its_step_and_time():
    row = {"step": 3, "time": 1.5, "loss": 0.25, "success_rate": 0.5}
    assert current_row(row) == {"step": 3, "time": 1.5, "losses/loss": 0.25, "rollout/success_rate": 0.5}


def test_namespaced():
    assert namespaced("losses/", {"loss": 1.0, "kl": 0.0}) == {"losses/loss": 1.0, "losses/kl": 0.0}
