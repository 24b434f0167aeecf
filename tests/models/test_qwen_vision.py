"""Batched Qwen vision attention (``models/qwen_vision.py``): the same outputs and gradients as
transformers' per-chunk loop, in a handful of attention calls."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spatialrl.models.encode import encode_conversations
from spatialrl.models.qwen_vision import (
    QWEN_VISION_ATTENTION,
    batch_vision_attention,
    grouped_attention,
    memoise_vision_metadata,
    speed_up_vision,
)
from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.train.sft import token_loss


def _loop(q, k, v, cu, scale):
    """Reference: one attention call per chunk, as transformers does without flash-attention."""
    outs = [F.scaled_dot_product_attention(q[:, a:b][None], k[:, a:b][None], v[:, a:b][None], scale=scale)[0]
            for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
    return torch.cat(outs, dim=1).transpose(0, 1)


@pytest.mark.parametrize("lengths", [[16, 16, 16], [4, 9, 4, 0, 9, 1], [7]])
def test_grouped_attention_equals_the_per_chunk_loop(lengths):
    torch.manual_seed(0)
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    q, k, v = (torch.randn(3, int(cu[-1]), 8, requires_grad=True) for _ in range(3))
    ref = _loop(q, k, v, cu, 0.3)
    out = grouped_attention(q, k, v, cu, 0.3)
    assert out.shape == ref.shape == (int(cu[-1]), 3, 8)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    grads = torch.autograd.grad(out, (q, k, v), g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _batch(proc, model):
    """Chats with frames of two sizes (chunks of several lengths, windows cut unevenly)."""
    rng = np.random.default_rng(0)
    chats = []
    for h, w in ((112, 168), (84, 84), (112, 168)):
        images = [{"type": "image", "image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8)} for _ in range(2)]
        chats.append([{"role": "user", "content": [*images, {"type": "text", "text": "Same?"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "yes"}]}])
    return encode_conversations(proc, chats, model_type=model.config.model_type)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_batched_model_matches_transformers(family):
    torch.manual_seed(0)
    raw, proc = BUILDERS[family]()  # transformers' own forward
    fast = copy.deepcopy(raw)
    layers = sum(type(m).__name__ in QWEN_VISION_ATTENTION for m in fast.modules())
    towers = 0 if family == "qwen3_vl" else 1  # Qwen3-VL's tower has no vision_utils kwargs to memoise
    assert speed_up_vision(fast) == {"attention": layers, "towers": towers} and layers == fast.config.vision_config.depth
    assert speed_up_vision(fast) == speed_up_vision(fast)  # idempotent
    batch = _batch(proc, raw)
    losses, grads = [], []
    for model in (raw, fast, fast):  # the second pass of `fast` reads the memoised grid metadata
        model.zero_grad()
        model.train()
        loss_sum, count, _ = token_loss(model, batch)
        (loss_sum / count).backward()
        losses.append(loss_sum.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    for i in (1, 2):
        torch.testing.assert_close(losses[i], losses[0], rtol=1e-5, atol=1e-5)
        assert grads[i].keys() == grads[0].keys() and any("visual" in n for n in grads[0])
        for name, g in grads[0].items():
            torch.testing.assert_close(grads[i][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_grid_metadata_is_computed_once_per_distinct_grid_list():
    model, proc = BUILDERS["qwen2_5_vl"]()
    assert memoise_vision_metadata(model) == 1
    tower = model.model.visual
    calls = []
    import transformers.vision_utils as vu

    original = vu.get_vision_window_index
    vu.get_vision_window_index = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        batch = _batch(proc, model)
        with torch.no_grad():
            for _ in range(3):
                model(**{k: v for k, v in batch.items() if k != "labels"})
            assert len(calls) == 1 and len(tower._spatialrl_grid_memo) == 1
            small = {k: v[:1] for k, v in batch.items() if k in ("input_ids", "attention_mask", "mm_token_type_ids")}
            n = int(batch["image_grid_thw"][:2].prod(dim=1).sum())  # the first chat's two images
            model(**small, pixel_values=batch["pixel_values"][:n], image_grid_thw=batch["image_grid_thw"][:2])
            assert len(calls) == 2 and len(tower._spatialrl_grid_memo) == 2
    finally:
        vu.get_vision_window_index = original


def test_models_are_built_and_loaded_with_it():
    model, _ = build_tiny("qwen2_5_vl")  # Family.prepare_model, as HFPolicy and the trainers apply it
    attn = [m for m in model.modules() if type(m).__name__ == "Qwen2_5_VLVisionAttention"]
    assert attn and all(getattr(m, "_spatialrl_batched_attention", False) for m in attn)
    other, _ = BUILDERS["idefics3"]()
    assert batch_vision_attention(other) == 0  # other families keep their forward


def test_flash_attention_models_keep_their_varlen_kernel():
    raw, _ = BUILDERS["qwen2_5_vl"]()
    for m in raw.modules():
        if type(m).__name__ == "Qwen2_5_VLVisionAttention":
            m.config = copy.copy(m.config)
            m.config._attn_implementation = "flash_attention_2"
    assert batch_vision_attention(raw) == 0
