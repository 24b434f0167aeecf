"""A model's probabilities of a fixed set of answers to one prompt, by teacher forcing each answer.

Used where a closed set of answers is read as a distribution rather than sampled: the image-sensitivity
probe (``eval/image_probe.py``, the nine TVR answers ``Action: X``) and the tried-actions memory of greedy
evaluation (``agents/tried_actions.py``, which needs the model's second choice when its first was already
tried from the same view).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

QWEN_TYPES = ("qwen2_vl", "qwen2_5_vl")


@torch.no_grad()
def answer_distributions(model: Any, processor: Any, conversations: list[list[dict]], responses: Sequence[str],
                         batch_size: int = 16, shared_prefix: bool = True) -> np.ndarray:
    """(n, len(responses)) probabilities of the answers, the softmax over each answer's summed log-prob.

    The answers of a state share the whole prompt (and, for TVR, ``Action:``), so with ``shared_prefix``
    (Qwen families) the shared part is prefilled once per state and the continuations run from its KV
    cache as one batch (:func:`shared_prefix_scores`): 5.35x faster than nine whole passes for the shipped
    AO model on the 2-core VM (``benchmarks/image_probe_speed.py``; the conversations are still encoded
    one per answer), with the same distributions up to float rounding (``tests/models/test_image_probe.py``)."""
    from spatialrl.models.encode import encode_conversations

    model_type = model.config.model_type
    device = next(model.parameters()).device
    responses = list(responses)
    answered = [[[*conv, {"role": "assistant", "content": [{"type": "text", "text": c}]}] for c in responses]
                for conv in conversations]
    scores = np.zeros((len(conversations), len(responses)))
    full: list[int] = []  # states scored with whole passes
    for i, convs in enumerate(answered):
        got = None
        if shared_prefix and model_type in QWEN_TYPES:
            got = shared_prefix_scores(model, encode_conversations(processor, convs, model_type=model_type), device)
        if got is None:
            full.append(i)
        else:
            scores[i] = got
    pairs = [(i, k) for i in full for k in range(len(responses))]
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        batch = encode_conversations(processor, [answered[i][k] for i, k in chunk], model_type=model_type)
        for (i, k), score in zip(chunk, full_scores(model, batch, device), strict=True):
            scores[i, k] = score
    scores -= scores.max(axis=1, keepdims=True)
    probs = np.exp(scores)
    return probs / probs.sum(axis=1, keepdims=True)


def label_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Sum over each row of log P(target) where the target is a label (not ``IGNORE_INDEX``)."""
    from spatialrl.models.encode import IGNORE_INDEX

    mask = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits.float(), -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logp * mask).sum(-1).cpu().numpy()


def full_scores(model: Any, batch: dict[str, torch.Tensor], device: Any) -> np.ndarray:
    """Each row's summed label log-prob from one whole forward pass."""
    batch = {k: v.to(device) for k, v in batch.items()}
    labels = batch.pop("labels")
    logits = model(**batch, use_cache=False).logits[:, :-1]
    return label_logprobs(logits, labels[:, 1:])


def shared_prefix_scores(model: Any, batch: dict[str, torch.Tensor], device: Any) -> np.ndarray | None:
    """The summed label log-probs of rows that are one prompt with different answers, from the answers'
    first differing token on: the prompt and the answers' shared head are prefilled once
    (``sampling.prefill_row``: the same 3-D rope positions as a whole pass), its cache repeated per row,
    and the rows' tails run as one batch. The label tokens of the shared head have the same log-prob in
    every row, so leaving them out shifts all scores equally and the softmax over answers is unchanged.
    None when the rows do not fit that (padding, or images after the first difference)."""
    from spatialrl.models.sampling import cache_kwarg, prefill_row, transformers_model

    ids, mask = batch["input_ids"], batch["attention_mask"]
    rows, length = ids.shape
    differ = (ids != ids[:1]).any(0).nonzero().flatten()
    if rows < 2 or not bool(mask.all()) or not len(differ) or "image_grid_thw" not in batch:
        return None
    first = int(differ[0])  # the tails [first - 1, length): logits at first - 1 predict the first difference
    inner = transformers_model(model)
    per_row = batch["image_grid_thw"].shape[0] // rows
    grid = batch["image_grid_thw"][:per_row]
    image_id = inner.config.image_token_id
    if per_row and int((ids[0] == image_id).nonzero().max()) >= first - 1:
        return None
    row = {"input_ids": ids[:1], "mm_token_type_ids": batch["mm_token_type_ids"][:1], "image_grid_thw": grid,
           "pixel_values": batch["pixel_values"][: int(grid.prod(-1).sum())]}
    cache, _ = prefill_row(model, row, 0, first - 1, None, None, device)
    cache.batch_repeat_interleave(rows)
    mrope, _ = inner.model.get_rope_index(ids[:1], mm_token_type_ids=row["mm_token_type_ids"], image_grid_thw=grid,
                                          attention_mask=torch.ones_like(ids[:1]))
    positions = torch.cat([torch.arange(length)[None, None], mrope.cpu()], dim=0)[:, :, first - 1:]
    out = model(input_ids=ids[:, first - 1:].to(device), attention_mask=torch.ones_like(ids).to(device),
                position_ids=positions.expand(-1, rows, -1).to(device), use_cache=True, **{cache_kwarg(): cache})
    return label_logprobs(out.logits[:, :-1], batch["labels"][:, first:].to(device))
