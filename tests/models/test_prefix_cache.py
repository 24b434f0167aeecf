"""Prefix KV reuse across the turns of a multi-turn rollout (``sampling.prefix_cache``): a turn that
prefills only the tokens added since the segment's last answer samples the same tokens with the same
log-probs as re-prefilling the whole conversation, for both model families RL supports (Qwen-VL: 3-D
rope positions of new images, Qwen3-VL's DeepStack features too; Mllama: cross-attention K/V of earlier
images kept), rows of different
lengths in one left-padded batch, greedy and seeded sampling, and with the vision cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.vision_cache import VisionCache
from spatialrl.models.family import family_of
from spatialrl.models.sampling import PrefixKV
from spatialrl.models.tiny import build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import collate_inputs, sample_segments, score_tokens
from tests.conversations import assistant, user


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen3_vl", "mllama"])
def tiny(request):
    model, proc = build_tiny(request.param)
    model = model.to(torch.float32).eval()
    family_of(request.param).prepare_model(model)  # Mllama: the cross-attention row mask HFPolicy applies
    return model, TurnTokenizer(proc, request.param)


def rollout(model, turns, sampling, prefix: bool, vision: bool, n_turns: int = 4, rows: int = 3):
    """``n_turns`` lock-step turns of ``rows`` conversations (a new image every turn, texts of different
    lengths so rows pad differently); returns each turn's answers and the final segments."""
    rng = np.random.default_rng(7)
    convs = [[user(rng, "Go" + " on" * (3 * i))] for i in range(rows)]
    segs = [turns.start(c) for c in convs]
    store = PrefixKV() if prefix else None
    cache = VisionCache() if vision else None
    generator = None if sampling.greedy else torch.Generator().manual_seed(5)
    answers = []
    for t in range(n_turns):
        out = sample_segments(model, turns, segs, sampling, generator, vision_cache=cache, prefix_cache=store)
        answers.append(out)
        for i, (seg, (ids, lps)) in enumerate(zip(segs, out, strict=True)):
            turns.add_policy(seg, ids, lps, t)
            text = turns.tokenizer.decode(ids, skip_special_tokens=True)
            convs[i] = convs[i] + [assistant(text), user(rng, "Then" + " more" * (i + t))]
            assert turns.extend(seg, ids, convs[i])
    if prefix:
        assert len(store) == rows and store.reused_tokens > 0
    return answers, segs


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prefix_cache_keeps_tokens_and_logprobs(tiny, temperature):
    model, turns = tiny
    sampling = SamplingParams(temperature=temperature, max_new_tokens=5)
    plain, _ = rollout(model, turns, sampling, prefix=False, vision=False)
    for vision in (False, True):
        reused, segs = rollout(model, turns, sampling, prefix=True, vision=vision)
        for t, (a, b) in enumerate(zip(plain, reused, strict=True)):
            for (ids_a, lps_a), (ids_b, lps_b) in zip(a, b, strict=True):
                assert ids_a == ids_b, f"turn {t}"
                np.testing.assert_allclose(lps_a, lps_b, atol=1e-5, rtol=0)
    # and the log-probs recorded through the cache are the teacher-forced ones (the trainer's first ratio)
    seg = segs[1]
    with torch.no_grad():
        logp = score_tokens(model, collate_inputs(turns, [(seg, len(seg))], "right", "cpu"), len(seg.prompt_ids),
                            temperature=sampling.temperature or 1.0).logp[0, len(seg.prompt_ids):]
    mask = torch.tensor(seg.response_mask, dtype=torch.bool)
    np.testing.assert_allclose(logp[mask].numpy(), np.array(seg.response_logprobs)[mask.numpy()], atol=1e-5)


def test_prefix_cache_clears_when_weights_change(tiny):
    model, turns = tiny
    store = PrefixKV()
    seg = turns.start([user(np.random.default_rng(0), "Go")])
    sample_segments(model, turns, [seg], SamplingParams(temperature=0.0, max_new_tokens=2), None, prefix_cache=store)
    assert store.get(seg)[1] > 0
    store.check_weights(model)
    assert len(store) == 1  # same weights: kept
    with torch.no_grad():
        p = next(model.parameters())
        p.add_(0.0)  # an in-place update bumps the version, as an optimizer step does
    store.check_weights(model)
    assert len(store) == 0 and store.get(seg) == (None, 0)
