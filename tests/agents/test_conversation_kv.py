"""The eval policy's prefix cache (``models/conversation_kv.py``): multi-turn conversations handed over
whole each turn give the same answers and log-probs as without the cache, for Qwen-VL and Mllama,
whether the next prompt extends the last one (view-all memory) or shares only its opening (action-only
memory: the last image differs), and the cache is actually used."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.models.conversation_kv import ConversationKV, image_runs
from spatialrl.models.tiny import build_tiny
from tests.conversations import assistant, image, user

SYSTEM = {"role": "system", "content": [{"type": "text", "text": "You are an agent in a room. " * 4}]}


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen3_vl", "mllama"])
def tiny(request):
    model, proc = build_tiny(request.param)
    return model.to(torch.float32).eval(), proc


def play(policy: HFPolicy, sampling: SamplingParams, memory: str, turns: int = 4, rows: int = 3):
    """``turns`` lock-step turns of ``rows`` episodes; ``va``: the conversation grows by the answer and a
    new frame; ``ao``: each turn is the opening (system, target frame) + the newest frame and the history
    as text. Returns every turn's (token ids, log-probs)."""
    rng = np.random.default_rng(3)
    targets = [image(rng) for _ in range(rows)]
    convs = [[SYSTEM, {"role": "user", "content": [{"type": "text", "text": "Target:"},
                                                   {"type": "image", "image": targets[i]},
                                                   {"type": "text", "text": "Go" + " on" * (2 * i)}]}]
             for i in range(rows)]
    history = [""] * rows
    out = []
    for t in range(turns):
        gens = policy.generate(convs, SamplingParams(sampling.temperature, sampling.top_p, sampling.max_new_tokens,
                                                     seed=sampling.seed, streams=tuple(range(rows))))
        assert not any(g.error for g in gens), [g.error for g in gens]
        out.append([(g.token_ids, g.logprobs) for g in gens])
        for i, g in enumerate(gens):
            frame = user(rng, f"Step {t}")
            if memory == "va":
                convs[i] = convs[i] + [assistant(g.text), frame]
            else:
                history[i] += f" {g.text!r}"
                convs[i] = convs[i][:2] + [{"role": "user", "content": [
                    *frame["content"], {"type": "text", "text": "History:" + history[i]}]}]
    return out


@pytest.mark.parametrize("memory", ["va", "ao"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_answers_equal_without_the_cache(tiny, memory, temperature):
    model, proc = tiny
    sampling = SamplingParams(temperature=temperature, max_new_tokens=4, seed=11)
    plain = HFPolicy(model, proc, device="cpu", prefix_cache_mb=0)
    cached = HFPolicy(model, proc, device="cpu")
    assert plain.prefix_cache is None and cached.prefix_cache is not None
    a, b = play(plain, sampling, memory), play(cached, sampling, memory)
    for t, (turn_a, turn_b) in enumerate(zip(a, b, strict=True)):
        for (ids_a, lps_a), (ids_b, lps_b) in zip(turn_a, turn_b, strict=True):
            assert ids_a == ids_b, f"turn {t}"
            np.testing.assert_allclose(lps_a, lps_b, rtol=0, atol=1e-4)
    store = cached.prefix_cache
    assert cached.usage["prefix_reused_tokens"] == store.reused_tokens > 0
    # va: every later turn continues its own conversation; ao: at least the opening is shared
    assert store.reused_tokens > (store.prefilled_tokens if memory == "va" else 0)


def answered_once(tiny, seed: int) -> tuple[HFPolicy, np.random.Generator]:
    """A policy with the cache on that has answered one (system, image + "Go") conversation."""
    model, proc = tiny
    policy = HFPolicy(model, proc, device="cpu")
    rng = np.random.default_rng(seed)
    policy.generate([[SYSTEM, user(rng, "Go")]], SamplingParams(temperature=0.0, max_new_tokens=2))
    return policy, rng


def test_a_changed_image_is_never_served(tiny):
    """Same token ids, another picture in the first image's place: the prefix stops before that image."""
    policy, rng = answered_once(tiny, 0)
    other = [SYSTEM, user(rng, "Go")]  # a fresh random image, the same text
    row = policy._encode_one(policy._prepare(other))
    found = policy.prefix_cache.claim(policy.model, row)
    cache, n = found.cache, found.length
    start = image_runs(policy.model, row)[0][0]
    assert n <= start
    if n:  # the system prompt alone can still be reused
        assert cache.get_seq_length() == n


def test_weight_change_clears_the_store(tiny):
    policy, _ = answered_once(tiny, 1)
    assert len(policy.prefix_cache) == 1
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.0)  # an in-place write bumps the version
    policy.prefix_cache.check_weights(policy.model)
    assert len(policy.prefix_cache) == 0


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="> 0 MB"):
        ConversationKV(0)


def test_both_kv_stores_share_one_weights_check():
    """ConversationKV and the rollouts' PrefixKV clear on new weights by the same rule (models/sampling.py)."""
    from spatialrl.models.sampling import PrefixKV, WeightsBound

    assert ConversationKV.check_weights is PrefixKV.check_weights is WeightsBound.check_weights
