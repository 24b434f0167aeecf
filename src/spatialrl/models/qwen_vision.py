"""The Qwen vision tower without its per-image Python loops: batched attention, memoised grid metadata.

The Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision towers run all images of a batch as one packed sequence. Two
things in transformers' forward cost a Python loop over the images (or windows) on every call, which on
a GPU means thousands of tiny kernel launches and syncs per update; for our small models that loop, not
the GPU, set the pace (2026-12-05, H200: 65-90 samples/s for the 8M TVR model; docs/training.md):

1. **Attention.** With flash-attention it is one varlen kernel; with ``sdpa`` or ``eager`` (our CPU
   default, and the GPU machine has no flash-attn wheel) transformers calls attention once per chunk —
   ``images x windows`` calls in every layer, forward and backward (a TVR action-only batch of 128 samples:
   256 frames of 6 windows, 1,536 calls per windowed layer). :func:`grouped_attention` groups the chunks
   by length (frames of one size give a handful of distinct lengths) and runs each group as one
   ``scaled_dot_product_attention`` over a batch of chunks: the same attention, each chunk still seeing
   only itself. :func:`batch_vision_attention` swaps it into a model's vision attention modules.
2. **Grid metadata.** The rotary position ids, ``cu_seqlens`` and (Qwen2.5-VL) the window permutation
   are rebuilt image by image from ``grid_thw`` on every forward, though a training run sees the same few
   grids over and over. transformers (``vision_utils``, 5.17 and later) takes them precomputed through the
   tower's kwargs; :func:`memoise_vision_metadata` adds a pre-hook that computes them once per distinct
   ``grid_thw`` (a small LRU per tower) and passes them in.

Both are exact (``tests/models/test_qwen_vision.py``: outputs and gradients equal transformers' own);
``benchmarks/qwen_vision_ops.py`` counts the operations per update with and without them.
:func:`speed_up_vision` applies both; ``Family.prepare_model`` calls it for the Qwen families, so
``HFPolicy``, the trainers and ``build_tiny`` all run with it. Flash-attention models and layouts we do
not know keep transformers' code.
"""

from __future__ import annotations

import sys
import types
from collections import OrderedDict
from typing import Any

import torch
import torch.nn.functional as F

# Vision attention classes whose forward has the packed layout handled here (transformers 5.x).
QWEN_VISION_ATTENTION = ("VisionAttention", "Qwen2_5_VLVisionAttention", "Qwen3VLVisionAttention",
                         "Qwen3VLMoeVisionAttention")
# Vision towers whose forward reads precomputed grid metadata from its kwargs (transformers' vision_utils)
QWEN_VISION_TOWERS = ("Qwen2VisionTransformerPretrainedModel", "Qwen2_5_VisionTransformerPretrainedModel")
_FLAG = "_spatialrl_batched_attention"
_MEMO = "_spatialrl_grid_memo"
MEMO_SIZE = 16  # distinct grid lists kept per tower (a run cycles through a few batch compositions)


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


def _grid_metadata(tower: Any, grid_thw: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the tower's forward would compute from ``grid_thw`` (with transformers' own functions)."""
    from transformers import vision_utils as vu

    meta = {"position_ids": vu.get_vision_position_ids(grid_thw, tower.spatial_merge_size),
            "cu_seqlens": vu.get_vision_cu_seqlens(grid_thw)}
    if hasattr(tower, "window_size"):  # Qwen2.5-VL: windowed layers
        meta["window_index"], meta["cu_window_seqlens"] = vu.get_vision_window_index(
            grid_thw, spatial_merge_size=tower.spatial_merge_size, window_size=tower.window_size,
            patch_size=tower.patch_size)
    return {k: v.to(grid_thw.device) for k, v in meta.items()}  # transformers builds the window index on the CPU


def _memo_hook(tower: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
    if grid is None or any(k in kwargs for k in ("position_ids", "cu_seqlens", "window_index")):
        return args, kwargs
    memo: OrderedDict = getattr(tower, _MEMO)
    key = (str(grid.device), tuple(grid.flatten().tolist()))
    if key in memo:
        memo.move_to_end(key)
    else:
        memo[key] = _grid_metadata(tower, grid)
        while len(memo) > MEMO_SIZE:
            memo.popitem(last=False)
    return args, {**kwargs, **memo[key]}


def memoise_vision_metadata(model: Any) -> int:
    """Hook every Qwen2-VL / Qwen2.5-VL vision tower of ``model`` to reuse its grid metadata (idempotent).
    Returns how many towers carry the hook; 0 where transformers has no ``vision_utils`` kwargs."""
    try:
        from transformers import vision_utils  # noqa: F401  (transformers >= 5.17: precomputed kwargs)
    except ImportError:
        return 0
    count = 0
    for tower in model.modules():
        if type(tower).__name__ not in QWEN_VISION_TOWERS:
            continue
        if not hasattr(tower, _MEMO):
            setattr(tower, _MEMO, OrderedDict())
            tower.register_forward_pre_hook(_memo_hook, with_kwargs=True)
        count += 1
    return count


def speed_up_vision(model: Any) -> dict[str, int]:
    """Both fixes of this module on ``model``; how many attention modules and towers got them."""
    return {"attention": batch_vision_attention(model), "towers": memoise_vision_metadata(model)}
