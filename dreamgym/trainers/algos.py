"""Advantage and loss math for the agent trainers, as pure functions on tensors.

Owns: GRPO group advantages, turn-level GAE, the clipped PPO policy and value losses, the KL estimator, the
DPO loss, the masked mean and the loss mask of a packed (prompt + completion) batch. (Per-token log-probabilities
and entropies come from `trainers.common.policy_forward`, which projects onto the vocabulary only where trained.)
Must not know: models, tokenizers, environments, optimizers, configs. Nothing here has side effects; every
function is unit-tested on small hand-computed tensors (tests/trainers/test_algos.py).

Shape letters used below: N = samples (episodes or turns), G = groups, B = rows of a packed batch,
T = tokens per row, L = T - 1 (positions that predict a next token), V = vocabulary size,
E = episodes, K = turns per episode (padded).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------- reductions
def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is true (0.0 when the mask is empty); returns a scalar.

    A float `mask` holds weights, and the result is the weighted mean sum(x * w) / sum(w) (weights may sum to
    less than one, so the empty-mask guard is the smallest positive float, not 1)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=torch.finfo(m.dtype).tiny)


# ----------------------------------------------------------------------------------------------- masks
def completion_loss_mask(prompt_lens: torch.Tensor, total_lens: torch.Tensor, width: int) -> torch.Tensor:
    """Loss mask of a right-padded batch of `prompt + completion` rows, aligned with next-token targets.

    Row b holds `total_lens[b]` real tokens, the first `prompt_lens[b]` of which are prompt (task, history,
    environment text); the rest are the tokens the policy generated. Position j of the result says whether
    the logits at position j (which predict token j+1) are trained on, i.e. whether token j+1 is a generated
    token. Prompt, environment and padding tokens are never trained on.

    prompt_lens: [B] int; total_lens: [B] int; width: T (padded row length).
    Returns: [B, L] bool with L = T - 1.
    """
    target_pos = torch.arange(1, width, device=prompt_lens.device).unsqueeze(0)  # [1, L] index of the target
    return (target_pos >= prompt_lens.unsqueeze(1)) & (target_pos < total_lens.unsqueeze(1))


# ----------------------------------------------------------------------------------------------- GRPO
def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, scale_by_std: bool = True,
                    eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages: A_i = (r_i - mean_g) / (std_g + eps), or r_i - mean_g without std.

    The std is the population std of the group (divide by n, matching the curriculum's reward variance V_τ).
    A group whose rewards are all equal has advantage exactly 0 for every member (it carries no signal).

    rewards: [N] float (one episode return each); group_ids: [N] int (episodes of one task/seed share an id).
    Returns: (advantages [N] float32, zero_variance [N] bool — true for members of all-equal groups).
    """
    rewards = rewards.float()
    _, inv = torch.unique(group_ids, return_inverse=True)  # [N] dense group index
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    count = torch.zeros(n_groups).index_add_(0, inv, torch.ones_like(rewards))  # [G]
    mean = torch.zeros(n_groups).index_add_(0, inv, rewards) / count  # [G]
    centred = rewards - mean[inv]  # [N]
    var = torch.zeros(n_groups).index_add_(0, inv, centred**2) / count  # [G] population variance
    std = var.sqrt()
    # "All equal" is decided on the max-min spread, so float noise in the mean cannot make it nonzero.
    gmax = torch.full((n_groups,), -torch.inf).scatter_reduce(0, inv, rewards, "amax")
    gmin = torch.full((n_groups,), torch.inf).scatter_reduce(0, inv, rewards, "amin")
    zero_var = (gmax - gmin)[inv] <= 0
    adv = centred / (std[inv] + eps) if scale_by_std else centred
    adv = torch.where(zero_var, torch.zeros_like(adv), adv)
    return adv, zero_var


# ----------------------------------------------------------------------------------------------- GAE
def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the turns of each episode.

    Turn k of episode e has reward rewards[e, k] (DreamGym: 0 except the last turn, which carries the
    outcome) and value estimate values[e, k] = V(s_k). The turn after an episode's last valid turn is
    terminal (value 0): episodes end by termination or by the environment's own step limit, which is part of
    the task, so nothing is bootstrapped.

        delta_k = r_k + gamma * V_{k+1} - V_k
        A_k     = delta_k + gamma * lam * A_{k+1}
        R_k     = A_k + V_k   (the value target)

    rewards, values: [E, K] float; mask: [E, K] bool, true on valid turns (a prefix of each row).
    Returns: (advantages [E, K], returns [E, K]), both 0 on padding.
    """
    m = mask.float()
    rewards, values = rewards.float() * m, values.float() * m
    E, K = rewards.shape
    adv = torch.zeros(E, K)
    next_adv = torch.zeros(E)
    next_value = torch.zeros(E)
    for k in range(K - 1, -1, -1):
        delta = rewards[:, k] + gamma * next_value - values[:, k]
        next_adv = (delta + gamma * lam * next_adv) * m[:, k]
        adv[:, k] = next_adv
        next_value = values[:, k]
    return adv, (adv + values) * m


def normalize(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps) over the masked entries (population std); masked-out entries become 0.

    x, mask: same shape. Returns: same shape as x.
    """
    m = mask.float()
    mean = masked_mean(x, m)
    var = masked_mean((x - mean) ** 2, m)
    return (x - mean) / (var.sqrt() + eps) * m


# ----------------------------------------------------------------------------------------------- PPO / GRPO losses
def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, *, clip_eps: float,
                        clip_eps_high: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, averaged over every trained token of the batch (token-level mean).

        ratio = exp(logp - old_logp);  loss_tok = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps_high) * A)

    `old_logp` are the sampling log-probabilities of the tokens (the behaviour policy); `advantages` is per
    token or per row (broadcast along the tokens). `clip_eps_high` defaults to `clip_eps` (symmetric).

    logp, old_logp: [B, L]; advantages: [B, L] or [B] ; mask: [B, L] bool, or float per-token weights (then
    every mean is weighted; `GRPOConfig.loss_agg="episode"` uses this).
    Returns: (loss scalar, stats with "clip_frac" — share of trained tokens whose ratio was clipped in the
    direction that matters — and "approx_kl" = mean(old_logp - logp)).
    """
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    advantages = advantages.expand_as(logp)
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + hi) * advantages
    loss_tok = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        clip_frac = masked_mean((clipped < unclipped).float(), mask)
        approx_kl = masked_mean(-log_ratio, mask)
    return masked_mean(loss_tok, mask), {"clip_frac": clip_frac, "approx_kl": approx_kl}


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi: exp(d) - d - 1 with d = ref_logp - logp.

    Non-negative, unbiased and low-variance (Schulman's "k3"; the estimator GRPO uses).
    logp, ref_logp: [B, L]. Returns: [B, L].
    """
    d = ref_logp - logp
    return d.exp() - d - 1.0


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       mask: torch.Tensor, *, clip_eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's value loss: 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)).

    With `clip_eps=None` it is plain 0.5 * mean((V - R)^2).
    values, old_values, returns, mask: [N]. Returns: (loss scalar, clip fraction scalar).
    """
    err = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * masked_mean(err, mask), torch.zeros(())
    v_clip = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    err_clip = (v_clip - returns) ** 2
    with torch.no_grad():
        frac = masked_mean((err_clip > err).float(), mask)
    return 0.5 * masked_mean(torch.maximum(err, err_clip), mask), frac


# ----------------------------------------------------------------------------------------------- DPO
def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, *, beta: float,
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Direct preference optimisation (sigmoid loss, optional conservative label smoothing).

        h = beta * ((pi_c - ref_c) - (pi_r - ref_r))
        loss = -(1 - ls) * log sigmoid(h) - ls * log sigmoid(-h), averaged over pairs

    Each argument is the summed log-probability of one whole response (all trained tokens) under the policy
    or the frozen reference. All inputs: [N]. Returns: (loss scalar, stats with "accuracy" — share of pairs
    where the implicit reward prefers the chosen one —, "margin" = mean h / beta, "chosen_reward" and
    "rejected_reward" = mean beta * (pi - ref)).
    """
    chosen_r = beta * (policy_chosen - ref_chosen)
    rejected_r = beta * (policy_rejected - ref_rejected)
    h = chosen_r - rejected_r
    loss = -(1 - label_smoothing) * F.logsigmoid(h) - label_smoothing * F.logsigmoid(-h)
    with torch.no_grad():
        stats = {"accuracy": (h > 0).float().mean(), "margin": (h / beta).mean(),
                 "chosen_reward": chosen_r.mean(), "rejected_reward": rejected_r.mean()}
    return loss.mean(), stats
