"""Qwen vision attention in a few batched calls instead of one call per image and window.

The Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision towers run all images of a batch as one packed sequence
with ``cu_seqlens`` marking where each image (or, in Qwen2.5-VL's windowed layers, each window) starts.
With flash-attention that is one varlen kernel; with ``sdpa`` or ``eager`` (our CPU default, and the GPU
machine has no flash-attn wheel) transformers splits the sequence and calls attention once per chunk —
a python loop of ``images x windows`` tiny calls per layer, forward and backward. A TVR action-only batch
of 128 samples has 256 frames of 6 windows each: 1,536 calls in every windowed layer. On the H200 that
loop, not the GPU, set the pace (2026-12-05: 65-90 samples/s for an 8M model; docs/training.md).

Here the chunks are grouped by length (frames of one size give at most a handful of distinct lengths)
and each group is one ``scaled_dot_product_attention`` over a batch of chunks: the same attention
(each chunk still sees only itself), a handful of kernels per layer. :func:`batch_vision_attention`
swaps the forward of a model's vision attention modules (idempotent; flash-attention models and
unknown layouts keep transformers' forward); ``tests/models/test_vision_attention.py`` checks outputs
and gradients against transformers' loop.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

# Vision attention classes whose forward has the packed layout handled here (transformers 5.x).
QWEN_VISION_ATTENTION = ("VisionAttention", "Qwen2_5_VLVisionAttention", "Qwen3VLVisionAttention",
                         "Qwen3VLMoeVisionAttention")
_FLAG = "_spatialrl_batched_attention"


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """Attention within each chunk of a packed sequence. ``q``/``k``/``v``: (heads, tokens, head_dim);
    chunk ``i`` is ``cu_seqlens[i]:cu_seqlens[i+1]``. Returns (tokens, heads, head_dim)."""
    heads, tokens, dim = q.shape
    bounds = cu_seqlens.tolist()
    groups: dict[int, list[int]] = {}
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            groups.setdefault(end - start, []).append(start)
    if len(groups) == 1:
        (length, starts), = groups.items()
        if len(starts) * length == tokens and starts == list(range(0, tokens, length)):
            # equal chunks back to back (full-attention layers over same-size frames): a plain view
            def split(x: torch.Tensor) -> torch.Tensor:
                return x.view(heads, len(starts), length, dim).transpose(0, 1)

            out = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=scale)
            return out.permute(0, 2, 1, 3).reshape(tokens, heads, dim)
    out = q.new_zeros(tokens, heads, dim)
    for length, starts in groups.items():
        index = (torch.tensor(starts, device=q.device)[:, None] + torch.arange(length, device=q.device)).reshape(-1)
        shape = (heads, len(starts), length, dim)
        qg, kg, vg = (x.index_select(1, index).view(shape).transpose(0, 1) for x in (q, k, v))
        o = F.scaled_dot_product_attention(qg, kg, vg, scale=scale)  # (chunks, heads, length, head_dim)
        out = out.index_copy(0, index, o.permute(0, 2, 1, 3).reshape(-1, heads, dim))
    return out


def _forward(self: Any, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor,
             rotary_pos_emb: torch.Tensor | None = None,
             position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, **kwargs: Any) -> torch.Tensor:
    if position_embeddings is None:  # an older layout (rotary_pos_emb only): transformers' own forward
        return type(self).forward(self, hidden_states, cu_seqlens, rotary_pos_emb=rotary_pos_emb, **kwargs)
    seq_length = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = self._spatialrl_rotary(q, k, cos, sin)
    out = grouped_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), cu_seqlens, self.scaling)
    return self.proj(out.reshape(seq_length, -1))


def batch_vision_attention(model: Any) -> int:
    """Give every Qwen vision attention module of ``model`` the grouped forward (idempotent). Returns how
    many modules have it; 0 for other families, flash-attention models and layouts we do not know."""
    count = 0
    for module in model.modules():
        if type(module).__name__ not in QWEN_VISION_ATTENTION:
            continue
        impl = getattr(getattr(module, "config", None), "_attn_implementation", None) or "sdpa"
        rotary = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb_vision", None)
        if impl not in ("sdpa", "eager") or rotary is None or not all(
                hasattr(module, a) for a in ("qkv", "proj", "num_heads", "scaling")):
            continue
        if not getattr(module, _FLAG, False):
            module._spatialrl_rotary = rotary
            module.forward = types.MethodType(_forward, module)
            setattr(module, _FLAG, True)
        count += 1
    return count
