"""The per-image vision cache: cached features give exactly the uncached answers, each distinct image is
encoded once, and stale features are never served (weight changes, adapter switches, autocast)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.agents.vision_cache import QWEN_FAMILIES, VisionCache, _towers
from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import sample_segments
from tests.transformers_release import needs_qwen_encoded_images

from .test_hf import conversations

QWEN = [f for f in BUILDERS if f in QWEN_FAMILIES]


def _user(rng: np.random.Generator, text: str) -> dict:
    image = rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)
    return {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}


def _inputs(family: str, seed: int = 0):
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    rng = np.random.default_rng(seed)
    segs = [turns.start([_user(rng, "Go"), {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                         _user(rng, "Again")]) for _ in range(2)]
    return model, turns.collate([(s, len(s)) for s in segs], padding_side="left")


def _features(model, inputs) -> torch.Tensor:
    """Reference: the model's own encoder on all images of the batch."""
    with torch.no_grad():
        out = model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True)
    return torch.cat(out.pooler_output)


def _cached(cache: VisionCache, model, inputs) -> torch.Tensor:
    with torch.no_grad():
        prepared = cache.prepare(model, inputs)
    assert "pixel_values" not in prepared
    return torch.cat(prepared["mm_encoder_outputs"]["image"].pooler_output)


@needs_qwen_encoded_images
@pytest.mark.parametrize("family", QWEN)
def test_policy_answers_equal_uncached(family):
    """Two rounds of the same batch: the second is served from the cache; tokens and log-probs are those
    of the policy without a cache, to the bit."""
    model, proc = build_tiny(family)
    # prefix cache off: with it the second round would be served from the KV store, past the vision cache
    plain = HFPolicy(model, proc, device="cpu", vision_cache_mb=0, prefix_cache_mb=0)
    cached = HFPolicy(model, proc, device="cpu", prefix_cache_mb=0)
    assert plain.vision_cache is None and cached.vision_cache is not None
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, seed=3)
    for _ in range(2):
        for a, b in zip(plain.generate(conversations(0), sampling), cached.generate(conversations(0), sampling),
                        strict=True):
            assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert cached.usage["vision_cache_misses"] == 3 and cached.usage["vision_cache_hits"] == 3


@needs_qwen_encoded_images
@pytest.mark.parametrize("family", QWEN)
def test_rollout_sampling_equals_uncached(family):
    """Multi-turn sampling from token segments (G=2 forks of each prompt): the same samples, and each
    distinct image goes through the vision tower once."""
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    rng = np.random.default_rng(1)
    convs = [[_user(rng, "Go" * (i + 1))] for i in range(2)]
    bases = [turns.start(c) for c in convs]
    runs = {}
    for name, cache in (("plain", None), ("cached", VisionCache(64))):
        segs = [b.fork() for b in bases for _ in range(2)]
        history = [list(convs[i // 2]) for i in range(4)]
        step_rng = np.random.default_rng(2)
        gen = torch.Generator().manual_seed(0)
        out = []
        for k in range(3):
            samples = sample_segments(model, turns, segs, SamplingParams(1.0, 1.0, 4), gen, vision_cache=cache)
            out.append(samples)
            new_user = _user(step_rng, f"t{k}")  # the same next frame for every sample of a turn
            for i, (ids, lps) in enumerate(samples):
                turns.add_policy(segs[i], ids, lps, k)
                history[i] = history[i] + [{"role": "assistant", "content": [
                    {"type": "text", "text": proc.tokenizer.decode(ids, skip_special_tokens=True)}]}, new_user]
                assert turns.extend(segs[i], ids, history[i])
        runs[name] = (out, cache)
    # Token ids to the bit; log-probs to float32 rounding: here the cache encodes each turn's new frame on
    # its own while the plain path encodes the batch's frames together, and since transformers 5.25 the
    # Qwen towers' batched and single-image features differ by ~4e-8 (summation order).
    for plain_turn, cached_turn in zip(runs["plain"][0], runs["cached"][0], strict=True):
        for (ids_a, lps_a), (ids_b, lps_b) in zip(plain_turn, cached_turn, strict=True):
            assert ids_a == ids_b
            np.testing.assert_allclose(lps_a, lps_b, rtol=0, atol=1e-5)
    cache = runs["cached"][1]
    assert cache.misses == 2 + 3 - 1  # two prompts' images, then one new frame per turn (the last unused)
    assert cache.hits == 4 + 2 * 4 + 3 * 4 - cache.misses


@needs_qwen_encoded_images
def test_weight_change_clears_the_cache():
    model, inputs = _inputs("qwen2_5_vl")
    cache = VisionCache(64)
    first = _cached(cache, model, inputs)
    assert torch.equal(first, _features(model, inputs))
    assert cache.misses == len(inputs["image_grid_thw"]) == 4  # two segments of two distinct images
    with torch.no_grad():
        next(_towers(model)[0].parameters()).mul_(1.5)
    again = _cached(cache, model, inputs)
    assert not torch.allclose(again, first)
    assert torch.equal(again, _features(model, inputs))
    assert cache.hits == 0


def test_bypassed_while_the_vision_tower_trains():
    model, inputs = _inputs("qwen2_5_vl")
    cache = VisionCache(64)
    prepared = cache.prepare(model, inputs)
    assert "pixel_values" in prepared and "mm_encoder_outputs" not in prepared
    assert cache.hits == cache.misses == 0 and len(cache) == 0


@needs_qwen_encoded_images
def test_autocast_is_part_of_the_key():
    model, inputs = _inputs("qwen2_5_vl")
    cache = VisionCache(64)
    _cached(cache, model, inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _cached(cache, model, inputs)
    assert cache.hits == 0 and len(cache) == 2 * cache.misses // 2


@needs_qwen_encoded_images
def test_lru_bound():
    model, inputs = _inputs("qwen2_5_vl")
    one_image = _features(model, inputs)[: int(inputs["image_grid_thw"][0].prod()) // 4]
    size = one_image.numel() * one_image.element_size()
    cache = VisionCache(max_mb=1.5 * size / 2**20)  # room for one image's features, not two
    _cached(cache, model, inputs)  # a call keeps every image it returns, then evicts down to the bound
    assert len(cache) == len(inputs["image_grid_thw"])
    _, other = _inputs("qwen2_5_vl", seed=5)
    _cached(cache, model, other)
    assert len(cache) == len(other["image_grid_thw"]) and cache.nbytes == len(cache) * size


@needs_qwen_encoded_images
def test_peft_adapter_switch_clears_the_cache():
    peft = pytest.importorskip("peft")
    model, inputs = _inputs("qwen2_5_vl")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=r".*visual\.blocks\.\d+\.attn\.qkv",
                                                      init_lora_weights=False))
    lora.eval()
    cache = VisionCache(64)
    on = _cached(cache, lora, inputs)
    with lora.disable_adapter():
        off = _cached(cache, lora, inputs)
        assert torch.equal(off, _features(lora, inputs))
    assert not torch.allclose(on, off) and cache.hits == 0


def test_off_where_transformers_cannot_take_precomputed_features(monkeypatch):
    """transformers releases before ``mm_encoder_outputs`` (the H200 image had 5.17): no cache, pixels pass."""
    model, inputs = _inputs("qwen2_5_vl")
    if VisionCache.supports(model):  # a release that takes them: made into one that does not
        monkeypatch.setattr(type(model), "forward", lambda self, input_ids=None, pixel_values=None, **kwargs: None)
    assert not VisionCache.supports(model)
    with torch.no_grad():
        prepared = VisionCache(64).prepare(model, inputs)
    assert "pixel_values" in prepared and "mm_encoder_outputs" not in prepared


def test_mllama_scoring_equals_uncached():
    """Llama-3.2-Vision: teacher-forced log-probs with cached ``cross_attention_states`` equal the
    pixel path's, on a batch whose samples hold two, one and no images (empty slots are zeros the
    cross-attention mask removes); the second pass encodes nothing."""
    from spatialrl.train.policy_ops import collate_inputs, score_tokens

    model, proc = build_tiny("mllama")
    model.eval()
    assert all(float(p) == 1.0 for n, p in model.named_parameters() if n.endswith("_gate"))  # images matter
    assert VisionCache.supports(model) and not VisionCache.supports(model, generate=True)
    assert HFPolicy(model, proc, device="cpu").vision_cache is None  # generate keeps the pixel path
    turns = TurnTokenizer(proc, model.config.model_type)
    rng = np.random.default_rng(3)
    answer = {"role": "assistant", "content": [{"type": "text", "text": "left"}]}
    convs = [[_user(rng, "Go"), answer, _user(rng, "Again")], [_user(rng, "Go on")],
             [{"role": "user", "content": [{"type": "text", "text": "No image here"}]}]]
    views = [(s, len(s)) for s in (turns.start(c) for c in convs)]
    start = min(n for _, n in views) - 1
    cache = VisionCache(64)
    with torch.no_grad():
        plain = score_tokens(model, collate_inputs(turns, views, "right", "cpu"), start).logp
        for _ in range(2):
            inputs = collate_inputs(turns, views, "right", "cpu", (cache, model))
            assert "pixel_values" not in inputs and "cross_attention_states" in inputs
            assert torch.equal(score_tokens(model, inputs, start).logp, plain)
    assert (cache.misses, cache.hits) == (4, 8)  # 3 images + the empty slot; 3 samples × 2 slots, twice


def test_families_without_a_supported_vision_tower_pass_through():
    model, proc = build_tiny("idefics3")
    assert not VisionCache.supports(model)
    assert HFPolicy(model, proc, device="cpu").vision_cache is None
    with pytest.raises(ValueError, match="> 0 MB"):
        VisionCache(0)
