"""The RL math as pure functions over tensors: advantages, surrogate losses, KL, masked reductions.

Everything here is importable and tested on hand-computed batches (``tests/rl/test_losses.py``); the
trainers (``train/ppo.py``, ``train/grpo.py``) only wire these together. Shapes are written as
``(B, T)`` = (sequences, tokens) or ``(S, N)`` = (env steps, envs). Masks are float or bool tensors of
the same shape where 1 marks an element that counts; they are combined by multiplication, never
overwritten (a token counts for the loss only if every mask says so).

Sources: GAE and the clipped losses follow ikostrikov/pytorch-a2c-ppo-acktr as used by RL4VLM and
SFTvsRL (``rl/trainer/algo/ppo.py``); the k3 KL and group advantages follow verl's ``core_algos.py``
(``low_var_kl``, ``compute_grpo_outcome_advantage``); step groups follow GiGPO (arXiv 2505.10978).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import torch

Tensor = torch.Tensor
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


# ----------------------------------------------------------------------------- masked reductions
def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x·mask (over ``dim``, or everything)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x·mask / Σ mask; an empty mask gives 0 (not NaN), so a batch without policy tokens is a no-op."""
    mask = mask.to(x.dtype)
    total = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / total.clamp(min=1.0)


def loss_sum_and_count(per_token: Tensor, mask: Tensor, mode: LossAgg = "token-mean") -> tuple[Tensor, Tensor]:
    """Numerator and denominator of a loss reduction, so a reduction over a whole mini-batch split into
    micro-batches (and processes) is exact: loss = Σ numerators / Σ denominators.

    * ``token-mean``: (Σ loss·mask, #tokens) — every policy token weighs the same (verl's default,
      used by TVRBench's multi-turn GRPO);
    * ``seq-mean-token-mean``: (Σ_seq token-mean of the sequence, #sequences) — the GRPO paper;
    * ``seq-mean-token-sum``: (Σ_seq token-sum of the sequence, #sequences) — no length normalisation.

    Sequences without any masked-in token count for nothing in the ``seq-*`` modes.
    """
    if mode == "token-mean":
        return masked_sum(per_token, mask), mask.to(per_token.dtype).sum()
    seq_tokens = mask.to(per_token.dtype).sum(-1)
    has_tokens = (seq_tokens > 0).to(per_token.dtype)
    if mode == "seq-mean-token-mean":
        per_seq = masked_sum(per_token, mask, dim=-1) / seq_tokens.clamp(min=1.0)
    elif mode == "seq-mean-token-sum":
        per_seq = masked_sum(per_token, mask, dim=-1)
    else:
        raise ValueError(f"loss_agg must be token-mean, seq-mean-token-mean or seq-mean-token-sum, got {mode!r}")
    return (per_seq * has_tokens).sum(), has_tokens.sum()


def aggregate_loss(per_token: Tensor, mask: Tensor, mode: LossAgg = "token-mean") -> Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar the three ways verl names (``agg_loss``)."""
    total, count = loss_sum_and_count(per_token, mask, mode)
    return total / count.clamp(min=1.0)


# ----------------------------------------------------------------------------- PPO (SFTvsRL)
def compute_gae(
    rewards: Tensor,
    values: Tensor,
    episode_ends: Tensor,
    next_value: Tensor,
    gamma: float = 0.9,
    lam: float = 0.95,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over a rollout of ``S`` steps × ``N`` envs.

    ``rewards``, ``values``, ``episode_ends``: ``(S, N)``; ``episode_ends[t]`` is 1 where the action of
    step ``t`` ended its episode (no bootstrap across it). ``next_value``: ``(N,)``, V of the state after
    the last step (the bootstrap for unfinished episodes).

        δ_t = r_t + γ V_{t+1} (1 − end_t) − V_t
        A_t = δ_t + γ λ (1 − end_t) A_{t+1}
        R_t = A_t + V_t                                   (the value target)
    """
    if rewards.shape != values.shape or rewards.shape != episode_ends.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and episode_ends "
                         f"{tuple(episode_ends.shape)} must have the same (steps, envs) shape")
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        not_end = 1.0 - episode_ends[t].to(rewards.dtype)
        next_v = next_value if t == steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * next_v * not_end - values[t]
        last = delta + gamma * lam * not_end * last
        advantages[t] = last
    return advantages, advantages + values


def normalize(x: Tensor, mask: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x − mean) / (std + eps), over the masked elements; the reference's advantage normalisation.

    ``std`` is the unbiased sample std like ``torch.std`` (what the reference called).
    """
    if mask is None:
        return (x - x.mean()) / (x.std() + eps)
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n.clamp(min=1.0)
    var = (((x - mean) ** 2) * m).sum() / (n - 1).clamp(min=1.0)
    return (x - mean) / (var.sqrt() + eps) * m


def clipped_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    clip: float,
    ratio_guard: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Element-wise PPO clipped surrogate (to be reduced by the caller with its mask).

        ρ = exp(logp − old_logp)
        L = −min(ρ A, clip(ρ, 1−ε, 1+ε) A)

    ``ratio_guard`` reproduces the reference's safety switch (``if any(ratio > 10): -surr2``): where
    ρ exceeds it, only the clipped term is used, so a stale sample cannot pull with an unbounded ratio.
    Returns the per-element loss and per-element diagnostics (``ratio``, ``clipped`` indicator, and the
    k3 estimate of KL(old‖new) ``(ρ − 1) − log ρ`` that CleanRL logs as ``approx_kl``).
    """
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.min(surr1, surr2)
    if ratio_guard is not None:
        loss = torch.where(ratio > ratio_guard, -surr2, loss)
    with torch.no_grad():
        stats = {
            "ratio": ratio.detach(),
            "clipped": ((ratio - 1.0).abs() > clip).to(logp.dtype),
            "approx_kl": ((ratio - 1.0) - log_ratio).detach(),
        }
    return loss, stats


def ppo_policy_loss(
    token_logp: Tensor,
    old_token_logp: Tensor,
    weights: Tensor,
    advantages: Tensor,
    clip: float,
    ratio_guard: float | None = None,
    ratio: Literal["sequence", "token"] = "sequence",
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's per-sample clipped surrogate ``(B,)`` from per-token log-probs ``(B, T)``, with the ratio
    taken over the whole answer or per token. ``weights`` ``(B, T)``: the SFTvsRL token weights
    (thought_prob_coef before the action field, 1 from it, 0 off the answer); ``advantages`` ``(B,)``.

    * ``sequence`` (SFTvsRL): ρ = exp(Σ_t w_t (logp_t − old_t)), L = −min(ρA, clip(ρ)A). At sampling
      temperature 0.2 a sum over 60–128 tokens moves far from 1 for small per-token changes.
    * ``token`` (TRL/verl): ρ_t = exp(logp_t − old_t), L = Σ_t w_t · (−min(ρ_t A, clip(ρ_t) A)) / Σ_t w_t —
      the per-token surrogate averaged over the answer, so one token's drift clips only that token.

    Diagnostics (``(B,)`` each) of both ratios whatever ``ratio`` is, so runs of either variant report
    what the other would have clipped: ``ratio`` / ``approx_kl`` of the variant in use (token: plain
    means over the answer's tokens), ``clipped_sequence`` (1 where |ρ − 1| > ε), ``clipped_tokens`` and
    ``tokens`` (answer tokens with |ρ_t − 1| > ε, and all answer tokens), ``kl_sequence`` (the sequence
    ratio's k3 KL) and ``kl_tokens`` (the sum of the answer tokens' own k3 KLs: over ``tokens``, the
    per-token KL). At T 0.2 a sequence KL sums ~100 tokens' drift through exp, so the two tell apart a
    few tokens that moved far from many that moved a little (issue 24's precision check).
    """
    mask = (weights > 0).to(token_logp.dtype)
    seq_loss, seq = clipped_policy_loss(weighted_sequence_logprob(token_logp, weights),
                                        weighted_sequence_logprob(old_token_logp, weights), advantages, clip,
                                        ratio_guard)
    tok_loss, tok = clipped_policy_loss(token_logp, old_token_logp, advantages[:, None].expand_as(token_logp),
                                        clip, ratio_guard)
    stats = {"clipped_sequence": seq["clipped"], "clipped_tokens": masked_sum(tok["clipped"], mask, dim=-1),
             "tokens": mask.sum(-1), "kl_sequence": seq["approx_kl"],
             "kl_tokens": masked_sum(tok["approx_kl"], mask, dim=-1)}
    if ratio == "sequence":
        return seq_loss, {**stats, "ratio": seq["ratio"], "approx_kl": seq["approx_kl"]}
    if ratio != "token":
        raise ValueError(f"ratio must be 'sequence' or 'token', got {ratio!r}")
    w = weights.to(token_logp.dtype)
    loss = (tok_loss * w).sum(-1) / w.sum(-1).clamp(min=1e-12)
    return loss, {**stats, "ratio": masked_mean(tok["ratio"], mask, dim=-1),
                  "approx_kl": masked_mean(tok["approx_kl"], mask, dim=-1)}


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float) -> Tensor:
    """Element-wise clipped value loss (the reference's ``use_clipped_value_loss``):

        V_clip = V_old + clip(V − V_old, −ε, ε)
        L_V = ½ max((V − R)², (V_clip − R)²)
    """
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)


def explained_variance(values: Tensor, returns: Tensor) -> float:
    """1 − Var[R − V] / Var[R] (CleanRL's diagnostic; NaN when the returns are constant)."""
    var_r = returns.var()
    return float("nan") if var_r == 0 else float(1.0 - (returns - values).var() / var_r)


# ----------------------------------------------------------------------------- SFTvsRL action log-prob
def action_token_weights(
    char_ends: Sequence[int],
    anchor_char: int | None,
    thought_prob_coef: float,
) -> list[float]:
    """Per-token weights of the SFTvsRL action log-prob, from character offsets.

        log π(a|s) = thought_prob_coef · Σ logp(tokens before the action field) + Σ logp(tokens from it)

    ``char_ends[i]`` is the end character offset of response token ``i`` in the decoded response;
    ``anchor_char`` is where the action field starts (the opening quote of ``"action"``), or ``None``
    when the response has no action field — then every token gets weight 1 (the whole response is the
    action; the reference fell back to an arbitrary 4th-last token). A token that straddles the anchor
    belongs to the action part. Unlike the reference we keep the first generated token (it skipped it
    because of a LLaVA tokenisation quirk).
    """
    if anchor_char is None:
        return [1.0] * len(char_ends)
    return [thought_prob_coef if end <= anchor_char else 1.0 for end in char_ends]


def weighted_sequence_logprob(token_logp: Tensor, weights: Tensor) -> Tensor:
    """Σ_t w_t · logp_t per sequence: ``(B, T)`` → ``(B,)``. Weights are 0 off the response."""
    return (token_logp * weights).sum(-1)


# ----------------------------------------------------------------------------- GRPO
def k3_kl(logp: Tensor, ref_logp: Tensor, clamp: float = 10.0) -> Tensor:
    """Element-wise k3 estimator of KL(π‖π_ref) from samples of π (Schulman's "approximating KL"):

        k3 = exp(ref_logp − logp) − (ref_logp − logp) − 1    ≥ 0, unbiased, low variance

    Clamped like verl's ``low_var_kl`` (log-ratio to ±20, result to [−clamp, clamp]) so one
    pathological token cannot blow up the loss.
    """
    log_ratio = torch.clamp(ref_logp - logp, -20.0, 20.0)
    kl = torch.exp(log_ratio) - log_ratio - 1.0
    return torch.clamp(kl, -clamp, clamp)


def group_advantages(
    scores: Tensor,
    group_ids: Sequence[Hashable],
    scale: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GRPO group-relative advantages: A_i = (s_i − mean_g) / (std_g + ε) within each group g.

    ``scores``: ``(N,)`` one scalar per sample (single-turn) or per trajectory (multi-turn: the sum of
    its step rewards). ``std`` is the unbiased sample std (verl uses ``torch.std``); a group of one
    sample gets advantage 0. ``scale=False`` gives Dr. GRPO's mean-centred advantages. Also returns a
    ``(N,)`` bool tensor: True where the sample's group had zero reward variance (its advantages are
    all 0 and carry no learning signal — the "drop zero-variance groups" option removes them).
    """
    if len(group_ids) != scores.shape[0]:
        raise ValueError(f"{len(group_ids)} group ids for {scores.shape[0]} scores")
    adv = torch.zeros_like(scores)
    zero_var = torch.zeros(scores.shape[0], dtype=torch.bool, device=scores.device)
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    for idx in members.values():
        ix = torch.tensor(idx, device=scores.device)
        s = scores[ix]
        if len(idx) == 1:
            zero_var[ix] = True
            continue
        centred = s - s.mean()
        std = s.std()
        zero_var[ix] = bool(std == 0)
        adv[ix] = centred / (std + eps) if scale else centred
    return adv, zero_var


def discounted_step_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = Σ_{k≥t} γ^{k−t} r_k for one trajectory (GiGPO's step return)."""
    out, running = [0.0] * len(step_rewards), 0.0
    for t in reversed(range(len(step_rewards))):
        running = float(step_rewards[t]) + gamma * running
        out[t] = running
    return out


def step_group_advantages(
    step_returns: Tensor,
    anchor_keys: Sequence[Hashable],
    scale: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO-style per-step advantages: steps whose ``anchor_key`` (task group, pose) coincide across
    the G trajectories of a task form a step group; each step's discounted return is normalised within
    its group. A step whose anchor state no other step shares gets 0 (no comparison, no signal).
    """
    adv, _ = group_advantages(step_returns, anchor_keys, scale=scale, eps=eps)
    return adv


def broadcast_to_tokens(values: Tensor, segment_of_token: Tensor, mask: Tensor) -> Tensor:
    """Spread one value per segment (trajectory, or turn) onto its tokens: ``out[b, t] =
    values[segment_of_token[b, t]] · mask[b, t]``. ``segment_of_token`` is ``(B, T)`` long; entries
    under ``mask == 0`` may be anything in range."""
    return values[segment_of_token.clamp(min=0)] * mask.to(values.dtype)
