"""Hand-computed checks of the advantage and loss math in dreamgym.trainers.algos."""

import math

import pytest
import torch

from dreamgym.trainers import algos


def test_grpo_advantages_normalise_per_group_and_zero_equal_groups():
    # group 0: rewards 1,0,0,1 -> mean .5, population std .5 -> +1,-1,-1,+1
    # group 1: all 0 -> no signal, counted as zero-variance
    # group 2: 1,0 -> mean .5, std .5 -> +1,-1
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 7, 7, 3, 3])
    adv, zero = algos.grpo_advantages(rewards, groups, eps=0.0)
    assert adv.tolist() == pytest.approx([1, -1, -1, 1, 0, 0, 1, -1])
    assert zero.tolist() == [False] * 4 + [True, True] + [False, False]


def test_grpo_advantages_uneven_group_and_no_std_option():
    # rewards 1,0,0 : mean 1/3, var = ((2/3)^2 + 2*(1/3)^2)/3 = 2/9, std = sqrt(2)/3
    r = torch.tensor([1.0, 0.0, 0.0])
    g = torch.tensor([5, 5, 5])
    adv, _ = algos.grpo_advantages(r, g, eps=0.0)
    std = math.sqrt(2) / 3
    assert adv.tolist() == pytest.approx([(2 / 3) / std, (-1 / 3) / std, (-1 / 3) / std])
    raw, _ = algos.grpo_advantages(r, g, scale_by_std=False)
    assert raw.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    # a group of one has no signal
    one, zero = algos.grpo_advantages(torch.tensor([1.0]), torch.tensor([0]))
    assert one.tolist() == [0.0] and zero.tolist() == [True]


def test_gae_by_hand():
    # one episode of 3 turns, reward only at the end; gamma=.9, lam=.8
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.4, 0.6]])
    m = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = algos.gae(r, v, m, gamma=0.9, lam=0.8)
    d2 = 1.0 - 0.6  # terminal: next value 0
    d1 = 0.0 + 0.9 * 0.6 - 0.4
    d0 = 0.0 + 0.9 * 0.4 - 0.5
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    assert adv[0].tolist() == pytest.approx([a0, a1, a2])
    assert ret[0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.4, a2 + 0.6])


def test_gae_padding_and_lambda_one_is_monte_carlo():
    # episode 0 has 2 turns, episode 1 has 1 turn; padding must not leak into the valid turns
    r = torch.tensor([[0.0, 1.0], [0.0, 99.0]])
    v = torch.tensor([[0.3, 0.2], [0.7, 55.0]])
    m = torch.tensor([[True, True], [True, False]])
    adv, ret = algos.gae(r, v, m, gamma=1.0, lam=1.0)
    # lam = gamma = 1: returns are the undiscounted reward-to-go, advantages = return - V
    assert ret.flatten().tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert adv.flatten().tolist() == pytest.approx([0.7, 0.8, -0.7, 0.0])


def test_completion_loss_mask_covers_exactly_the_generated_tokens():
    # row 0: prompt 3 tokens, completion 2 (total 5) in width 6; row 1: prompt 2, completion 3 (total 5)
    mask = algos.completion_loss_mask(torch.tensor([3, 2]), torch.tensor([5, 5]), 6)
    # position j predicts token j+1: row 0 trains on targets 3,4 -> positions 2,3
    assert mask.tolist() == [[False, False, True, True, False],
                             [False, True, True, True, False]]


def test_clipped_policy_loss_by_hand():
    # three tokens with ratios 1.5, 0.5, 1.0 and advantages +1, -1, +2; eps = .2
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0, 3.0]]))
    adv = torch.tensor([[1.0, -1.0, 2.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])  # the 4th token is not trained on
    loss, st = algos.clipped_policy_loss(logp, old, adv, mask, clip_eps=0.2)
    # tok0: min(1.5, 1.2) = 1.2 ; tok1: min(-0.5, -0.8) = -0.8 ; tok2: min(2, 2) = 2
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 2.0) / 3)
    assert st["clip_frac"].item() == pytest.approx(2 / 3)
    # approx_kl = mean(old - logp) over trained tokens
    assert st["approx_kl"].item() == pytest.approx(-(math.log(1.5) + math.log(0.5) + 0) / 3)
    # on-policy (ratio 1): the loss is -mean(A) and its gradient is -A/n per token's logp
    lp = torch.zeros(1, 3, requires_grad=True)
    loss, st = algos.clipped_policy_loss(lp, torch.zeros(1, 3), torch.tensor([2.0]), torch.ones(1, 3, dtype=torch.bool),
                                         clip_eps=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-2.0) and st["clip_frac"].item() == 0.0
    assert lp.grad.flatten().tolist() == pytest.approx([-2 / 3] * 3)


def test_asymmetric_clip_high():
    logp = torch.log(torch.tensor([[1.5]]))
    mask = torch.ones(1, 1, dtype=torch.bool)
    loss, _ = algos.clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), mask, clip_eps=0.2,
                                        clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-1.28)


def test_kl_k3_and_value_loss_by_hand():
    logp = torch.log(torch.tensor([0.5, 0.25]))
    ref = torch.log(torch.tensor([0.25, 0.25]))
    k3 = algos.kl_k3(logp, ref)
    # d = ln(.5): e^d - d - 1 = .5 - ln .5 - 1 ; d = 0 -> 0
    assert k3.tolist() == pytest.approx([0.5 - math.log(0.5) - 1.0, 0.0])

    v = torch.tensor([1.0, 0.0])
    old = torch.tensor([0.5, 0.0])
    ret = torch.tensor([0.0, 1.0])
    m = torch.tensor([True, True])
    loss, frac = algos.clipped_value_loss(v, old, ret, m, clip_eps=0.2)
    # row 0: unclipped (1-0)^2 = 1, clipped v = .7 -> .49 ; max = 1.   row 1: both 1.
    assert loss.item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    assert frac.item() == 0.0
    v2 = torch.tensor([0.0])
    loss2, frac2 = algos.clipped_value_loss(v2, torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([True]),
                                            clip_eps=0.2)
    # unclipped 0 ; clipped v = .3 -> .09 ; the max picks the clipped one
    assert loss2.item() == pytest.approx(0.5 * 0.09) and frac2.item() == 1.0
    plain, _ = algos.clipped_value_loss(v2, torch.tensor([0.5]), torch.tensor([1.0]), torch.tensor([True]),
                                        clip_eps=None)
    assert plain.item() == pytest.approx(0.5)


def test_dpo_loss_by_hand():
    pc, pr = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    rc, rr = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    loss, st = algos.dpo_loss(pc, pr, rc, rr, beta=0.5)
    # pair 0: h = .5*((−1+2) − (−3+2)) = 1 ; pair 1: h = .5*(0 − 1) = −.5
    expect = (-math.log(1 / (1 + math.exp(-1.0))) - math.log(1 / (1 + math.exp(0.5)))) / 2
    assert loss.item() == pytest.approx(expect)
    assert st["accuracy"].item() == 0.5
    assert st["margin"].item() == pytest.approx((2.0 - 1.0) / 2)
    # equal policy and reference: loss is ln 2 whatever the data
    z = torch.zeros(3)
    assert algos.dpo_loss(z, z, z, z, beta=0.1)[0].item() == pytest.approx(math.log(2))


def test_masked_mean_and_normalize():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    m = torch.tensor([True, True, True, False])
    assert algos.masked_mean(x, m).item() == pytest.approx(2.0)
    assert algos.masked_mean(x, torch.zeros(4, dtype=torch.bool)).item() == 0.0
    # Float weights summing to less than one: (0.1 * 1 + 0.1 * 2 + 0.2 * 3) / 0.4 = 2.25.
    assert algos.masked_mean(x, torch.tensor([0.1, 0.1, 0.2, 0.0])).item() == pytest.approx(2.25)
    n = algos.normalize(x, m, eps=0.0)
    s = math.sqrt(2 / 3)
    assert n.tolist() == pytest.approx([-1 / s, 0.0, 1 / s, 0.0])
