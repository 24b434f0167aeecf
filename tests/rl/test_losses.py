"""Every loss term against values computed by hand on small fixed batches."""

from __future__ import annotations

import math

import pytest
import torch

from spatialrl.train import losses


def close(a, b, tol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol)


def test_gae_by_hand():
    # one env, three steps; the episode ends after step 1, so step 1 does not bootstrap
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [0.2], [0.1]])
    ends = torch.tensor([[0.0], [1.0], [0.0]])
    adv, ret = losses.compute_gae(rewards, values, ends, torch.tensor([0.4]), gamma=0.9, lam=0.95)
    a2 = 2 + 0.9 * 0.4 - 0.1  # 2.26, bootstrapped from next_value
    a1 = 0 - 0.2  # terminal: no bootstrap, no carry
    a0 = (1 + 0.9 * 0.2 - 0.5) + 0.9 * 0.95 * a1  # 0.509
    assert close(adv[:, 0], [a0, a1, a2])
    assert close(ret[:, 0], [a0 + 0.5, a1 + 0.2, a2 + 0.1])


def test_gae_envs_are_independent():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    values = torch.zeros(2, 2)
    ends = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    adv, _ = losses.compute_gae(rewards, values, ends, torch.tensor([1.0, 2.0]), gamma=0.5, lam=1.0)
    # env 0: A1 = 0 + 0.5*1 = 0.5, A0 = 1 + 0.5*A1 = 1.25; env 1: A1 = 1 + 0.5*2 = 2, A0 = 0 (ended)
    assert close(adv, [[1.25, 0.0], [0.5, 2.0]])


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same"):
        losses.compute_gae(torch.zeros(2, 1), torch.zeros(3, 1), torch.zeros(2, 1), torch.zeros(1))


def test_normalize_uses_unbiased_std():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    std = math.sqrt(((1.5**2) * 2 + (0.5**2) * 2) / 3)
    assert close(losses.normalize(x), (x - 2.5) / (std + 1e-5))
    masked = losses.normalize(torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0]), torch.tensor([1, 1, 1, 1, 0]))
    assert close(masked[:4], (x - 2.5) / (std + 1e-5)) and masked[4] == 0


def test_clipped_policy_loss_by_hand():
    logp = torch.log(torch.tensor([1.0, 1.5, 0.5, 12.0]))
    old = torch.zeros(4)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, st = losses.clipped_policy_loss(logp, old, adv, clip=0.2)
    # ratio 1: -1; ratio 1.5, A>0: clipped to 1.2 → -1.2; ratio 0.5, A<0: min(-0.5, -0.8) → 0.8;
    # ratio 12, A<0: min(-12, -1.2) = -12 → 12
    assert close(loss, [-1.0, -1.2, 0.8, 12.0], 1e-5)
    assert close(st["clipped"], [0, 1, 1, 1])
    assert close(st["approx_kl"], [0.0, 0.5 - math.log(1.5), -0.5 - math.log(0.5), 11 - math.log(12)], 1e-5)
    guarded, _ = losses.clipped_policy_loss(logp, old, adv, clip=0.2, ratio_guard=10.0)
    assert close(guarded, [-1.0, -1.2, 0.8, 1.2], 1e-5)  # ρ > 10: only the clipped term


def test_clipped_value_loss_by_hand():
    v, v_old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.45])
    # clipped values 0.6 and 0.4; squared errors (1.0 vs 1.96) and (0.2025 vs 0.0025)
    assert close(losses.clipped_value_loss(v, v_old, ret, clip=0.1), [0.5 * 1.96, 0.5 * 0.2025])


def test_k3_kl_by_hand():
    logp = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    ref = torch.log(torch.tensor([0.25, 0.3, 0.4]))
    r = torch.tensor([0.5, 1.0, 2.0])  # π_ref / π
    assert close(losses.k3_kl(logp, ref), r - 1 - torch.log(r), 1e-6)
    # log-ratio clamped to ±20 (exp(-20) + 20 - 1 = 19), then the estimate clamped to 10
    assert losses.k3_kl(torch.tensor([0.0]), torch.tensor([-50.0])).item() == 10.0
    assert losses.k3_kl(torch.tensor([0.0]), torch.tensor([50.0])).item() == 10.0
    assert losses.k3_kl(torch.tensor([0.0]), torch.tensor([-5.0])).item() == pytest.approx(math.exp(-5) + 4, abs=1e-5)


def test_group_advantages_by_hand():
    scores = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 7.0])
    adv, zero = losses.group_advantages(scores, ["a", "a", "a", "b", "b", "c"])
    assert close(adv, [-1 / (1 + 1e-6), 0.0, 1 / (1 + 1e-6), 0.0, 0.0, 0.0])
    assert zero.tolist() == [False, False, False, True, True, True]  # equal rewards / a group of one
    centred, _ = losses.group_advantages(scores, ["a", "a", "a", "b", "b", "c"], scale=False)
    assert close(centred, [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def test_step_groups_by_hand():
    # two trajectories of one task: rewards [0, 1] and [0, 0]; both start from pose p0
    g1 = losses.discounted_step_returns([0.0, 1.0], gamma=0.5)
    g2 = losses.discounted_step_returns([0.0, 0.0], gamma=0.5)
    assert g1 == [0.5, 1.0] and g2 == [0.0, 0.0]
    keys = [("t", "p0"), ("t", "p1"), ("t", "p0"), ("t", "p2")]
    adv = losses.step_group_advantages(torch.tensor(g1 + g2), keys)
    s = math.sqrt(2 * 0.25**2)  # unbiased std of [0.5, 0]
    assert close(adv, [0.25 / (s + 1e-6), 0.0, -0.25 / (s + 1e-6), 0.0])


def test_loss_aggregation_and_masks_by_hand():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 0], [0, 0, 0]])
    assert close(losses.aggregate_loss(per_token, mask, "token-mean"), 8 / 3)
    assert close(losses.aggregate_loss(per_token, mask, "seq-mean-token-mean"), (1.5 + 5.0) / 2)
    assert close(losses.aggregate_loss(per_token, mask, "seq-mean-token-sum"), (3.0 + 5.0) / 2)
    # values under the mask never matter (verl's multi-turn property: env tokens do not move the loss)
    noisy = per_token + (1 - mask) * torch.randn(3, 3) * 100
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        assert close(losses.aggregate_loss(noisy, mask, mode), losses.aggregate_loss(per_token, mask, mode))
    total, count = losses.loss_sum_and_count(per_token, mask, "token-mean")
    assert total.item() == 8.0 and count.item() == 3.0
    assert losses.masked_mean(per_token, torch.zeros(3, 3)).item() == 0.0  # empty mask: 0, not NaN
    with pytest.raises(ValueError, match="loss_agg"):
        losses.aggregate_loss(per_token, mask, "bogus")  # type: ignore[arg-type]


def test_micro_batched_reduction_equals_whole_batch():
    torch.manual_seed(0)
    per_token, mask = torch.randn(6, 5), (torch.rand(6, 5) > 0.4).float()
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        whole = losses.aggregate_loss(per_token, mask, mode)
        parts = [losses.loss_sum_and_count(per_token[i:i + 2], mask[i:i + 2], mode) for i in range(0, 6, 2)]
        assert close(sum(p[0] for p in parts) / sum(p[1] for p in parts), whole)


def test_action_token_weights_from_offsets():
    # tokens ending at characters 5, 10, 17, 20; the action field starts at character 10
    assert losses.action_token_weights([5, 10, 17, 20], 10, 0.5) == [0.5, 0.5, 1.0, 1.0]
    assert losses.action_token_weights([5, 11, 17], 10, 0.5) == [0.5, 1.0, 1.0]  # straddling → action
    assert losses.action_token_weights([5, 10], None, 0.5) == [1.0, 1.0]  # no action field
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0]])
    w = torch.tensor([[0.5, 0.5, 1.0, 0.0]])
    assert close(losses.weighted_sequence_logprob(logp, w), [-0.5 - 1.0 - 3.0])


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0])
    assert losses.explained_variance(r, r) == pytest.approx(1.0)
    assert losses.explained_variance(torch.zeros(3), r) == pytest.approx(0.0)
    assert math.isnan(losses.explained_variance(r, torch.ones(3)))
    # by hand: R − V = [1, 0, 2, −1] (mean 0.5, Σ dev² 5), R = [2, 2, 5, 3] (mean 3, Σ dev² 6): 1 − 5/6
    assert losses.explained_variance(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 2.0, 5.0, 3.0])) \
        == pytest.approx(1.0 / 6.0)


# two answers in a (2, 4) batch: position 0 is prompt (weight 0), row 1's last position is padding
PPO_WEIGHTS = torch.tensor([[0.0, 0.5, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
PPO_ADV = torch.tensor([1.0, -2.0])


@pytest.mark.parametrize("ratio", ["sequence", "token"])
def test_ppo_policy_loss_is_one_with_identical_policies(ratio):
    logp = torch.tensor([[-9.0, -1.5, -0.2, -3.0], [-7.0, -0.4, -2.2, 4.0]])
    loss, st = losses.ppo_policy_loss(logp, logp.clone(), PPO_WEIGHTS, PPO_ADV, 0.1, 10.0, ratio)
    assert close(st["ratio"], [1.0, 1.0]) and close(st["approx_kl"], [0.0, 0.0])
    assert st["clipped_sequence"].sum() == 0 and st["clipped_tokens"].sum() == 0
    assert close(st["kl_sequence"], [0.0, 0.0]) and close(st["kl_tokens"], [0.0, 0.0])
    assert close(st["tokens"], [3.0, 2.0])
    assert close(loss, -PPO_ADV)  # −min(A, A) whatever the weighting


def test_ppo_policy_loss_per_token_by_hand():
    old = torch.zeros(2, 4)
    # token ratios 1.05, 1.3, 0.75 (row 0) and 0.7, 1.0 (row 1); entries off the answer must not count
    new = torch.log(torch.tensor([[20.0, 1.05, 1.3, 0.75], [9.0, 0.7, 1.0, 50.0]]))
    loss, st = losses.ppo_policy_loss(new, old, PPO_WEIGHTS, PPO_ADV, 0.2, None, "token")
    # row 0, A = 1: terms −1.05, −min(1.3, 1.2) = −1.2, −min(0.75, 0.8) = −0.75, weights 0.5, 1, 1
    # row 1, A = −2: −min(−1.4, −1.6) = 1.6 and −min(−2, −2) = 2, weights 1, 1
    assert close(loss, [(-0.5 * 1.05 - 1.2 - 0.75) / 2.5, (1.6 + 2.0) / 2], tol=1e-5)
    assert close(st["clipped_tokens"], [2.0, 1.0]) and close(st["tokens"], [3.0, 2.0])
    assert close(st["ratio"], [(1.05 + 1.3 + 0.75) / 3, (0.7 + 1.0) / 2], tol=1e-5)
    k3 = lambda r: (r - 1) - math.log(r)  # noqa: E731
    assert close(st["approx_kl"], [(k3(1.05) + k3(1.3) + k3(0.75)) / 3, (k3(0.7) + k3(1.0)) / 2], tol=1e-6)
    # both KLs in either variant: the tokens' own k3 summed over the answer, and the sequence ratio's
    assert close(st["kl_tokens"], [k3(1.05) + k3(1.3) + k3(0.75), k3(0.7) + k3(1.0)], tol=1e-6)
    assert close(st["kl_sequence"], [k3(1.05 ** 0.5 * 1.3 * 0.75), k3(0.7)], tol=1e-6)
    # the sequence ratios of the same tokens: 1.05^0.5 · 1.3 · 0.75 ≈ 0.9991 (inside 1 ± 0.2), 0.7 (clipped)
    seq_loss, seq = losses.ppo_policy_loss(new, old, PPO_WEIGHTS, PPO_ADV, 0.2, None, "sequence")
    r0 = 1.05 ** 0.5 * 1.3 * 0.75
    assert close(seq["ratio"], [r0, 0.7], tol=1e-5) and close(seq["clipped_sequence"], [0.0, 1.0])
    assert close(seq_loss, [-r0, 1.6], tol=1e-5)
    assert close(seq["clipped_tokens"], st["clipped_tokens"])  # token diagnostics in either variant
    assert close(seq["kl_tokens"], st["kl_tokens"]) and close(seq["kl_sequence"], st["kl_sequence"])
    assert close(seq["approx_kl"], seq["kl_sequence"])
    # the gradient reaches only answer tokens, through the term min() picked (d/dlogp of −w·ρA / Σw):
    # 1.3 is cut at 1.2 (no gradient), 0.75 < 0.8 keeps its unclipped term, row 1's 0.7 takes the clipped one
    new.requires_grad_(True)
    loss, _ = losses.ppo_policy_loss(new, old, PPO_WEIGHTS, PPO_ADV, 0.2, None, "token")
    loss.sum().backward()
    assert close(new.grad, [[0.0, -0.5 * 1.05 / 2.5, 0.0, -0.75 / 2.5], [0.0, 0.0, 2.0 / 2, 0.0]], tol=1e-5)
    with pytest.raises(ValueError, match="ratio"):
        losses.ppo_policy_loss(new, old, PPO_WEIGHTS, PPO_ADV, 0.2, None, "tokens")


def test_broadcast_to_tokens():
    values = torch.tensor([2.0, -1.0])
    seg = torch.tensor([[0, 0, 1, 1]])
    mask = torch.tensor([[1, 0, 1, 1]])
    assert close(losses.broadcast_to_tokens(values, seg, mask), [[2.0, 0.0, -1.0, -1.0]])
