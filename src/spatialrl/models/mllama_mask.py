"""Mllama (Llama-3.2-Vision): zero the cross-attention output of text rows that see no image.

transformers (through 5.24 at least; issue huggingface/transformers#39379, fixes proposed in PRs #46627,
#47103, #47845) applies ``full_text_row_masked_out_mask`` only to the cross-attention layer's MLP
output. A text row with no image before it (the system prompt; every row of a text-only sample in a
batch with images) has its attention mask cleared instead, so it attends to *all* image states —
including the empty image slots a batch pads with — and the result enters the residual stream. Two
consequences: the model differs from Meta's reference (which masks after attention as well), and a
conversation's log-probs depend on what else is in its batch (its padded slots), so sampling, scoring
and training passes over differently composed batches disagree. The hooks here apply the reference's
mask to the attention output; they change nothing for rows that see an image.
"""

from __future__ import annotations

from typing import Any

_FLAG = "_spatialrl_row_mask"


def mask_cross_attention_rows(model: Any) -> int:
    """Hook every ``MllamaCrossAttentionDecoderLayer`` of ``model`` (idempotent); returns how many layers
    carry the hooks. Models of other families are left alone (0)."""
    count = 0
    for layer in model.modules():
        if type(layer).__name__ != "MllamaCrossAttentionDecoderLayer":
            continue
        count += 1
        if getattr(layer, _FLAG, False):
            continue
        state: dict[str, Any] = {}

        def remember(_module, _args, kwargs, state=state):
            state["mask"] = kwargs.get("full_text_row_masked_out_mask")

        def apply(_module, _args, output, state=state):
            mask = state.get("mask")
            if mask is None:
                return output
            attn, *rest = output if isinstance(output, tuple) else (output,)
            attn = mask[:, 0].to(attn.dtype) * attn  # (B, S, 1): 0 on rows that see no image
            return (attn, *rest) if isinstance(output, tuple) else attn

        layer.register_forward_pre_hook(remember, with_kwargs=True)
        layer.cross_attn.register_forward_hook(apply)
        setattr(layer, _FLAG, True)
    return count
