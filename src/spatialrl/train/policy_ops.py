"""Model operations PPO and GRPO share: batched sampling from token segments, teacher-forced scoring.

Sampling continues each :class:`~spatialrl.rollout.trajectory.Segment` from its own token ids (left
padded into one ``generate`` call), so the trainer later scores exactly the stream the policy read.
Decoding is ``HFPolicy``'s own (``models/sampling.py``'s ``generate_tokens``): temperature/top-p
sampling from a seeded ``torch.Generator`` (saved in checkpoints, so a resumed run samples the same
tokens), image placeholder tokens banned (``models/family.py``), and the log-prob of each chosen token
recorded from the unrestricted ``logits / temperature`` — the quantity :func:`score_tokens` recomputes
with gradients.

Scoring runs one forward pass over right-padded segments and returns, per token, ``log π(token | prefix)``
(logits divided by the sampling temperature), optionally the entropy, and the final hidden state at
chosen positions (the value head's input). Logits are kept only at the positions each row scores
(``logits_to_keep`` as an index tensor), so a long multimodal prompt never materialises vocabulary-sized
logits, and neither does a short row padded to a long one's width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.vision_cache import VisionCache
from spatialrl.models.family import banned_token_ids, eos_token_ids
from spatialrl.models.sampling import PrefixKV, generate_from_prefixes, generate_tokens, static_cache_kwargs
from spatialrl.rollout.trajectory import Segment, TurnTokenizer

STATIC_WIDTH_STEP = 256  # kv_cache="static": prompts are left-padded to a multiple of this many tokens


def collate_inputs(turns: TurnTokenizer, views: list[tuple[Segment, int]], padding_side: str, device: Any,
                   vision: tuple[VisionCache, Any] | None = None, generate: bool = False,
                   width: int | None = None) -> dict[str, Any]:
    """``turns.collate`` on ``device`` (padded to at least ``width``); with ``vision = (cache, encoder)``,
    image features (cached, or encoded by ``encoder``: the unwrapped model) replace the pixels. Images
    are hashed on the CPU, so cached ones never travel to the device. The cache passes pixels through
    while the tower trains."""
    if vision is None or vision[0] is None:
        return turns.collate(views, padding_side=padding_side, device=device, width=width)
    cache, encoder = vision
    return cache.prepare(encoder, turns.collate(views, padding_side=padding_side, width=width), device, generate)


@torch.no_grad()
def sample_segments(
    model: Any,
    turns: TurnTokenizer,
    segments: list[Segment],
    sampling: SamplingParams,
    generator: torch.Generator | None,
    max_batch_size: int | None = None,
    vision_cache: VisionCache | None = None,
    kv_cache: str = "dynamic",
    prefix_cache: PrefixKV | None = None,
) -> list[tuple[list[int], list[float]]]:
    """Continue every segment with one sampled answer: ``[(token_ids, logprobs)]`` cut after the eos.

    With ``vision_cache``, images already encoded under the same weights are not encoded again (the
    caller owns the cache and starts a fresh one whenever the weights change).

    ``kv_cache="static"`` decodes with transformers' fixed-size KV cache, which ``generate`` runs through
    ``torch.compile`` (CUDA graphs) on a GPU: per-token Python and kernel-launch overhead goes away, at
    the price of a compile per input shape. So shapes are kept few: every call is filled to
    ``max_batch_size`` rows, or without one to the next power of two (copies of its last segment, whose
    answers are dropped — they still draw from ``generator``), and left-padded to a multiple of
    :data:`STATIC_WIDTH_STEP` tokens.

    ``prefix_cache`` (a :class:`~spatialrl.models.sampling.PrefixKV` the caller keeps across turns)
    keeps every segment's KV cache after its answer, so the segment's next turn prefills only the tokens
    added since (``models/sampling.py``: ``generate_from_prefixes``); the same tokens and log-probs as
    without it, up to float rounding (``tests/models/test_prefix_cache.py``). Dynamic cache only."""
    if not segments:
        return []
    step = max_batch_size or len(segments)
    device = next(model.parameters()).device
    eos = eos_token_ids(model, turns.tokenizer)
    banned = banned_token_ids(model, eos)
    out: list[tuple[list[int], list[float]]] = []
    if kv_cache not in ("dynamic", "static"):
        raise ValueError(f"kv_cache must be 'dynamic' or 'static', not {kv_cache!r}")
    static = kv_cache == "static"
    if prefix_cache is not None:
        if static:
            raise ValueError("prefix_cache needs kv_cache='dynamic' (a static cache is rebuilt per call)")
        prefix_cache.check_weights(model)
    for lo in range(0, len(segments), step):
        chunk = segments[lo : lo + step]
        if prefix_cache is not None:
            out += _sample_from_prefixes(model, turns, chunk, sampling, generator, prefix_cache, vision_cache,
                                         eos, banned)
            continue
        fill = (max_batch_size or 1 << (len(chunk) - 1).bit_length()) if static else len(chunk)
        rows = chunk + [chunk[-1]] * (fill - len(chunk))
        longest = max(len(s) for s in rows)
        width = -(-longest // STATIC_WIDTH_STEP) * STATIC_WIDTH_STEP if static else None
        inputs = collate_inputs(turns, [(s, len(s)) for s in rows], "left", device, (vision_cache, model),
                                generate=True, width=width)
        cache_kwargs = static_cache_kwargs(model, width + sampling.max_new_tokens) if static else {}
        out += generate_tokens(model, inputs, sampling, generator, eos, banned, turns.pad_id,
                               keep_rows=len(chunk), **cache_kwargs)
    return out


def _sample_from_prefixes(model: Any, turns: TurnTokenizer, chunk: list[Segment], sampling: SamplingParams,
                          generator: torch.Generator | None, prefix_cache: PrefixKV, vision_cache: VisionCache | None,
                          eos: list[int], banned: list[int]) -> list[tuple[list[int], list[float]]]:
    """One chunk of :func:`sample_segments` through the segments' cached prefixes; stores the new caches."""
    rows = [turns.collate([(s, len(s))]) for s in chunk]
    batch = turns.collate([(s, len(s)) for s in chunk], padding_side="left")
    cached = [prefix_cache.get(s) for s in chunk]
    for s in chunk:  # the caches are consumed (freed while stacked): none stays behind if this call fails
        prefix_cache.drop(s)
    prefix_cache.reused_tokens += sum(n for _, n in cached)
    prefix_cache.prefilled_tokens += sum(len(s) - n for s, (_, n) in zip(chunk, cached, strict=True))
    answers, kept = generate_from_prefixes(model, rows, batch, cached, sampling, generator, eos, banned,
                                           turns.pad_id, vision_cache=vision_cache)
    for seg, (cache, n) in zip(chunk, kept, strict=True):
        prefix_cache.put(seg, cache, n)
    return answers


@dataclass
class Scores:
    """Teacher-forced outputs for a ``(B, T)`` batch: ``logp[b, t]`` = log π(ids[b, t] | ids[b, :t])
    for ``t`` in the row's scored span (0 elsewhere), ``entropy`` likewise (or None), ``hidden`` = final hidden states at
    the requested positions ``(B, H)``, or the value head's ``(B,)`` values there (or None)."""

    logp: torch.Tensor
    entropy: torch.Tensor | None
    hidden: torch.Tensor | None


def _output_layer(model: Any) -> torch.nn.Module:
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrappers
    head = inner.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(inner).__name__} has no output embeddings (lm_head) to read hidden states from")
    return head


def _per_row(value: int | list[int] | torch.Tensor, batch: int, name: str) -> list[int]:
    if isinstance(value, int):
        return [value] * batch
    rows = [int(v) for v in (value.tolist() if isinstance(value, torch.Tensor) else value)]
    if len(rows) != batch:
        raise ValueError(f"{name} has {len(rows)} entries for a batch of {batch} rows")
    return rows


def _row_spans(start: int | list[int] | torch.Tensor | None, end: int | list[int] | torch.Tensor | None,
               spans: list[list[tuple[int, int]]] | None, batch: int, width: int) -> list[list[tuple[int, int]]]:
    """Every row's scored ``[start, end)`` spans, checked: inside the batch, in order, not overlapping."""
    if spans is None:
        if start is None:
            raise ValueError("score_tokens needs start (and optionally end) or spans")
        starts, ends = _per_row(start, batch, "start"), _per_row(width if end is None else end, batch, "end")
        spans = [[(s, e)] for s, e in zip(starts, ends, strict=True)]
    elif start is not None or end is not None:
        raise ValueError("score_tokens takes start/end or spans, not both")
    if len(spans) != batch:
        raise ValueError(f"spans has {len(spans)} rows for a batch of {batch} rows")
    for row in spans:
        last = 1
        for s, e in row:
            if not last <= s < e <= width:
                raise ValueError(f"scored spans {row} outside a batch of width {width} (need 1 <= start < end, in "
                                 "order, not overlapping)")
            last = e
    return spans


def score_tokens(
    model: Any,
    inputs: dict[str, torch.Tensor],
    start: int | list[int] | torch.Tensor | None,
    temperature: float = 1.0,
    with_entropy: bool = False,
    hidden_positions: torch.Tensor | None = None,
    value_head: torch.nn.Module | None = None,
    entropy_grad: bool = True,
    end: int | list[int] | torch.Tensor | None = None,
    spans: list[list[tuple[int, int]]] | None = None,
    hidden_rows: torch.Tensor | None = None,
) -> Scores:
    """One forward pass: per-token log-probs (and entropy) of the scored tokens, and the final hidden
    state at ``hidden_positions`` — or, with ``value_head``, its values there.

    Scored tokens: ``start <= t < end`` (one int for every row, or one per row; ``end`` defaults to the
    width), or ``spans``: per row a list of ``[start, end)`` spans — several answers of one conversation
    scored in one row (PPO packs a conversation's turns so: causal attention gives each answer the
    log-probs of its own prefix). ``hidden_positions``: ``(B,)`` absolute positions, one per row, or with
    ``hidden_rows`` (same length) any number of ``(row, position)`` pairs; the result has their length.

    Logits are computed only at the positions some row scores or reads a hidden state from (transformers'
    ``logits_to_keep`` as an index tensor): in a right-padded batch whose rows answer at different depths
    (a turn-1 answer beside a turn-3 one), keeping every position from the earliest answer on would
    materialise ``B × (width − min start) × vocab`` logits, where the rows' own spans need a few hundred
    (``benchmarks/score_spans.py``). Each row's fp32 log-softmax likewise runs over its own spans only.

    Log-probs use ``logits / temperature``: the distribution the tokens were sampled from (SFTvsRL
    divides by its sampling temperature 0.2 as well). Gradients flow unless called under ``no_grad``.
    ``entropy_grad=False`` computes the entropy for logging only (no graph kept for it).
    The value head runs inside the model's forward (in a hook on the output layer), where sharded
    wrappers (FSDP) have the root module's parameters — the head is a submodule of the model — gathered.
    """
    ids = inputs["input_ids"]
    batch, width = ids.shape
    spans = _row_spans(start, end, spans, batch, width)
    scored = [torch.cat([torch.arange(s, e) for s, e in row]) for row in spans]  # each row's scored tokens
    need = torch.zeros(width, dtype=torch.bool)
    for positions in scored:
        need[positions - 1] = True  # the logits at position t - 1 predict token t
    if hidden_positions is not None:
        hp = hidden_positions.detach().cpu().long()
        rows = torch.arange(batch) if hidden_rows is None else hidden_rows.detach().cpu().long()
        if hp.shape != rows.shape:
            raise ValueError(f"hidden_positions {tuple(hp.shape)} and hidden_rows {tuple(rows.shape)} differ in shape")
        if bool((hp < 0).any()) or bool((hp >= width).any()) or bool((rows < 0).any()) or bool((rows >= batch).any()):
            raise ValueError(f"hidden_positions must lie in [0, {width}) and hidden_rows in [0, {batch})")
        need[hp] = True
    keep = need.nonzero().squeeze(1)  # sorted absolute positions; logits come back at these, in order
    captured: dict[str, torch.Tensor] = {}
    handle = None
    if hidden_positions is not None:
        rel_hidden = torch.searchsorted(keep, hp)

        def hook(_module, args, _output):
            h = args[0]  # (B, len(keep), H): final hidden states at the kept positions
            picked = h[rows.to(h.device), rel_hidden.to(h.device)]
            captured["hidden"] = value_head(picked) if value_head is not None else picked

        handle = _output_layer(model).register_forward_hook(hook)
    try:
        logits = model(**inputs, logits_to_keep=keep.to(ids.device), use_cache=False).logits  # (B, len(keep), V)
    finally:
        if handle is not None:
            handle.remove()
    rows_logp, rows_ent = [], []
    for b, positions in enumerate(scored):  # per row: the fp32 log-softmax of its own spans
        lsm = torch.log_softmax(logits[b, torch.searchsorted(keep, positions - 1).to(ids.device)].float() / temperature,
                                dim=-1)
        at = positions.to(ids.device)
        rows_logp.append(lsm.new_zeros(width).index_put((at,), lsm.gather(-1, ids[b, at, None]).squeeze(-1)))
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                rows_ent.append(lsm.new_zeros(width).index_put((at,), -(lsm.exp() * lsm).sum(-1)))
    logp = torch.stack(rows_logp)
    entropy = torch.stack(rows_ent) if with_entropy else None
    return Scores(logp=logp, entropy=entropy, hidden=captured.get("hidden"))


def token_char_ends(tokenizer: Any, ids: list[int]) -> tuple[str, list[int]]:
    """The decoded text of sampled ``ids`` (special tokens kept) and each token's end offset in it.

    Offsets come from the tokenizer's offset mapping when re-encoding the text gives back exactly the
    sampled ids (the usual case); otherwise (a non-canonical sample) from decoding growing prefixes.
    """
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if not ids:
        return text, []
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) == list(ids):
        return text, [int(end) for _, end in enc["offset_mapping"]]
    return text, [len(tokenizer.decode(ids[: i + 1], skip_special_tokens=False)) for i in range(len(ids))]
