"""The Mllama cross-attention row mask (``models/mllama_mask.py``): without it a conversation's
log-probs depend on what else is in its batch (transformers #39379); with it they do not."""

from __future__ import annotations

import numpy as np
import torch

from spatialrl.models.mllama_mask import mask_cross_attention_rows
from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import score_tokens


def _conversations():
    rng = np.random.default_rng(0)

    def user(text, images):
        parts = [{"type": "image", "image": rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)} for _ in range(images)]
        return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}  # text before the image

    return [[user("Where is the red box?", 1)], [user("Compare these two.", 2)], [user("Text only.", 0)]]


def _alone_vs_batched(model, proc) -> float:
    """Largest |Δ log p| of conversation 0 scored alone and in a batch with the other two."""
    turns = TurnTokenizer(proc, "mllama")
    segs = [turns.start(c) for c in _conversations()]
    n = len(segs[0])
    with torch.no_grad():
        alone = score_tokens(model, turns.collate([(segs[0], n)]), 1).logp[0, 1:n]
        batch = score_tokens(model, turns.collate([(s, len(s)) for s in segs]), 1).logp[0, 1:n]
    return float((alone - batch).abs().max())


def test_row_mask_makes_log_probs_batch_invariant():
    torch.manual_seed(0)
    raw, proc = BUILDERS["mllama"]()  # transformers' own behaviour (the builder opens the gates)
    raw.eval()
    assert _alone_vs_batched(raw, proc) > 1e-3  # the bug: padded image slots leak into text rows
    assert mask_cross_attention_rows(raw) == 1 and mask_cross_attention_rows(raw) == 1  # idempotent
    assert _alone_vs_batched(raw, proc) < 1e-5
    model, proc = build_tiny("mllama")  # build_tiny applies it, as HFPolicy and the trainers do
    assert _alone_vs_batched(model, proc) < 1e-5


def test_other_families_untouched():
    model, _ = build_tiny("qwen2_5_vl")
    assert mask_cross_attention_rows(model) == 0
