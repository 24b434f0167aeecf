"""Token sampling: the one decode loop of eval (``HFPolicy.generate``) and RL (``sample_segments``).

Token selection happens in our own logits processor (:class:`TokenSampler`), with HF's greedy search
picking the one token it leaves. Why: the log-prob of each chosen token is then recorded from the very
logits it was drawn from (``logits / temperature``, or the raw logits for greedy) without keeping every
step's full-vocabulary logits, sampling draws from a ``torch.Generator`` (seeded per call by the eval
policy, carried in checkpoints by the trainers; never global RNG state), and the model's own
``generation_config`` (Qwen ships ``repetition_penalty=1.05``) cannot silently change the
distribution the trainer later re-scores. :func:`generate_tokens` runs ``model.generate`` with it on a
left-padded batch and cuts each answer after its first end-of-turn token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from spatialrl.conversation import SamplingParams


class TokenSampler(LogitsProcessor):
    """Chooses each next token (greedy or temperature/top-p sampling) and records its log-prob.

    Returns scores that are ``-inf`` everywhere except the chosen token, so HF's greedy search takes
    exactly our choice. ``banned`` tokens (image/video placeholders) are never chosen: one in an answer
    would make the next prompt's placeholder count disagree with its images. Log-probs stay those of
    the unrestricted distribution, which a teacher-forced forward pass reproduces.
    """

    def __init__(self, sampling: SamplingParams, generator: torch.Generator | None, banned: list[int],
                 row_seeds: list[list[int]] | None = None):
        self.sampling = sampling
        self.generator = generator
        self.banned = banned
        # Per-row seed material (``SamplingParams.stream_seed``): row i's token at step k is drawn by
        # inverse-CDF from one uniform of ``default_rng([*row_seeds[i], k])``, so a row's draws do not
        # depend on the other rows of the batch (batch size, resume point). None: one shared generator.
        self.row_seeds = row_seeds
        self.chosen: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logits = scores.float()
        if self.sampling.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logits.index_fill(-1, self._banned(logits), float("-inf")).argmax(dim=-1)
        else:
            logp = torch.log_softmax(logits / self.sampling.temperature, dim=-1)
            probs = logp.exp().index_fill(-1, self._banned(logits), 0.0)
            if self.sampling.top_p < 1.0:
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= self.sampling.top_p  # keeps at least one
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
            if self.row_seeds is not None:
                k = len(self.chosen)
                u = torch.tensor([np.random.default_rng([*seed, k]).random() for seed in self.row_seeds],
                                 dtype=torch.float64, device=probs.device)
                cdf = probs.double().cumsum(dim=-1)
                chosen = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
                chosen = chosen.clamp_(max=probs.shape[-1] - 1)
            else:
                chosen = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        self.chosen.append(chosen)
        self.logprobs.append(logp.gather(-1, chosen[:, None]).squeeze(-1))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, chosen[:, None], 0.0)

    def _banned(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.banned, dtype=torch.long, device=logits.device)


def cache_kwarg() -> str:
    """The keyword a model's forward and ``generate`` take a KV cache under: ``cache`` in the transformers
    that renamed it (5.2x, where ``past_key_values`` is deprecated), ``past_key_values`` before (the GPU
    machine's 5.17, which rejects ``cache``)."""
    import transformers.generation.utils as gu

    return "cache" if "cache" in getattr(gu, "ALL_CACHE_NAMES", ()) else "past_key_values"


def static_cache_kwargs(model: Any, max_cache_len: int) -> dict[str, Any]:
    """``generate_tokens`` keywords for transformers' fixed-size (static) KV cache.

    Usually ``cache_implementation="static"``. Models with cross-attention layers (Mllama) get the cache
    built here instead: transformers 5.17 (the GPU machine's) sizes every layer of a static cache to the
    text's ``max_cache_len``, so a cross-attention layer's keys — the image states, fewer — came back
    padded with zeros to that length and its attention mask no longer matched (a shape error). Here those
    layers are sized to the image states they receive, as later releases do; still static, so still
    compileable."""
    layers = getattr(model.config.get_text_config(decoder=True), "cross_attention_layers", None)
    if not layers:
        return {"cache_implementation": "static"}
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    class CrossAttentionLayer(StaticLayer):
        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.max_cache_len = key_states.shape[-2]  # the image states, written once at prefill
            super().lazy_initialization(key_states, value_states)

    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    for idx in layers:
        cache.layers[idx] = CrossAttentionLayer(max_cache_len=max_cache_len)
    return {"cache": cache}


@torch.no_grad()
def generate_tokens(
    model: Any,
    inputs: dict[str, Any],
    sampling: SamplingParams,
    generator: torch.Generator | None,
    eos_ids: list[int],
    banned: list[int],
    pad_id: int,
    row_seeds: list[list[int]] | None = None,
    min_new_tokens: int = 0,
    keep_rows: int | None = None,
    cache: Any = None,
    **generation_kwargs: Any,
) -> list[tuple[list[int], list[float]]]:
    """Decode one answer per row of the left-padded ``inputs``: ``[(token_ids, logprobs)]``, each cut
    after its first token in ``eos_ids``. ``keep_rows`` returns only the first rows (filler rows of a
    fixed-shape batch still draw from ``generator``); ``generation_kwargs`` go to the
    ``GenerationConfig`` (``cache_implementation="static"``). ``cache``: a KV cache that already holds
    all but the last token of every row (``generate_from_prefixes``)."""
    sampler = TokenSampler(sampling, generator, banned, row_seeds)
    width = inputs["input_ids"].shape[1]
    result = model.generate(
        **inputs,
        generation_config=GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            min_new_tokens=min(min_new_tokens, sampling.max_new_tokens) or None,
            do_sample=False, num_beams=1, repetition_penalty=1.0, use_cache=True,
            eos_token_id=list(eos_ids), pad_token_id=pad_id, **generation_kwargs,
        ),
        logits_processor=LogitsProcessorList([sampler]),
        **({cache_kwarg(): cache} if cache is not None else {}),
    )
    sequences = result if isinstance(result, torch.Tensor) else result.sequences
    n = sequences.shape[0] if keep_rows is None else keep_rows
    new = sequences[:n, width:].tolist()
    logprobs = torch.stack(sampler.logprobs, dim=1)[:n].tolist() if sampler.logprobs else [[] for _ in new]
    eos = set(eos_ids)
    out = []
    for row, lps in zip(new, logprobs, strict=True):
        ids = row
        for k, tok in enumerate(row):
            if tok in eos:
                ids = row[: k + 1]
                break
        out.append((ids, [float(x) for x in lps[: len(ids)]]))
    return out


# ---------------------------------------------------------------------------------------------------
# Prefix KV reuse across the turns of a multi-turn rollout (``sampling.prefix_cache``)
#
# Why: a multi-turn episode's segment is append-only (``rollout/trajectory.py``): turn t's prompt is
# turn t-1's prompt + the sampled answer + the env's increment. Re-prefilling it whole every turn costs
# O(turn length) per turn, O(T^2) per episode; keeping each segment's KV cache costs only the new tokens.
# How: each segment's ``DynamicCache`` covers its first ``length`` tokens. A turn (1) prefills, per row
# (batch 1, no padding), the tokens after the cached ones except the last, with only the new images'
# features; (2) stacks the rows' caches left-padded into one batch cache and runs the usual
# ``model.generate`` + ``TokenSampler`` from it (transformers slices the input to the one uncached
# token); (3) cuts every row's cache back out (prompt + answer but its last token, never fed) for the
# next turn. Family specifics: Qwen's 3-D (mrope) positions of the new tokens come from
# ``get_rope_index`` over the whole row, and the decode positions from its per-row ``rope_deltas``;
# Mllama's cross-attention layers keep the projected K/V of every image so far (transformers appends
# a chunk's new images to them), padded per row to the batch's most images and masked by
# ``cross_attention_mask``.


def transformers_model(model: Any) -> Any:
    """The transformers model under PEFT / DDP wrappers (where ``get_rope_index`` and configs live)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, "module", base)


def cross_attention_layer_ids(model: Any) -> set[int]:
    """Cache layer indices that hold cross-attention (image) K/V: Mllama's ``cross_attention_layers``."""
    text = transformers_model(model).config.get_text_config(decoder=True)
    return set(getattr(text, "cross_attention_layers", None) or [])


def weights_signature(model: Any) -> tuple:
    """The model and each parameter's storage and in-place version (bumped by optimizer steps): a KV cache
    made under another signature is stale."""
    return (id(model), tuple((p.data_ptr(), p._version) for p in model.parameters()))


class WeightsBound:
    """Mixin of a KV store whose entries hold only under the weights that made them (:class:`PrefixKV`,
    :class:`~spatialrl.models.conversation_kv.ConversationKV`): :meth:`check_weights`, called on every
    use, empties the store (its own ``clear``) when the model's :func:`weights_signature` differs from the
    one last checked."""

    _signature: tuple | None = None

    def check_weights(self, model: Any) -> None:
        signature = weights_signature(model)
        if signature != self._signature:
            self.clear()
            self._signature = signature


class PrefixKV(WeightsBound):
    """The KV cache of each live segment's tokens so far, kept between the turns of a rollout.

    Entries are keyed by segment identity (a segment is append-only, so a cache of its first ``length``
    tokens stays valid while the weights do). The weights' signature (each parameter's storage and
    in-place version, bumped by optimizer steps) is checked on every use and a change clears every
    entry, so PPO's episodes carried across an update re-prefill under the new weights. Memory: one
    conversation's K/V per live slot between turns (stacking and cutting move them layer by layer, so a
    turn's peak is about one batch cache, as without reuse). Llama-3.2-11B in bf16: 128 KiB per text
    token (32 self-attention layers) and 200 MiB per image (8 cross-attention layers x 4 tiles x 1601
    patches, padded tiles included); 8 slots at 4k tokens and 30 images: 4 + 47 GiB."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[Any, Any, int]] = {}  # id(segment) -> (segment, cache, length)
        self.reused_tokens = 0  # prompt tokens served from a cache instead of prefilled again
        self.prefilled_tokens = 0

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()

    def get(self, segment: Any) -> tuple[Any, int]:
        """``(cache, cached length)`` of ``segment``, or ``(None, 0)``."""
        row = self._rows.get(id(segment))
        if row is None or row[0] is not segment:
            return None, 0
        return row[1], row[2]

    def put(self, segment: Any, cache: Any, length: int) -> None:
        self._rows[id(segment)] = (segment, cache, length)

    def drop(self, segment: Any) -> None:
        row = self._rows.get(id(segment))
        if row is not None and row[0] is segment:
            del self._rows[id(segment)]


def prefill_row(model: Any, row: dict[str, torch.Tensor], start: int, end: int, cache: Any,
                vision_cache: Any, device: Any) -> tuple[Any, torch.Tensor | None]:
    """Run tokens ``[start, end)`` of one unpadded row (``row``: its collated inputs, on the CPU) through
    the model on top of ``cache`` (its first ``start`` tokens), with the images whose tokens lie in the
    chunk. Returns the grown cache and, for Qwen families, the row's ``rope_deltas`` (``(1, 1)``: 3-D
    position of the next token minus its index), which decoding continues from."""
    from transformers import DynamicCache

    inner = transformers_model(model)
    if cache is None:
        cache = DynamicCache(config=inner.config)
    ids = row["input_ids"]
    kwargs: dict[str, Any] = {"input_ids": ids[:, start:end], "attention_mask": torch.ones((1, end), dtype=torch.long)}
    pixels: dict[str, torch.Tensor] = {}
    delta = None
    image_id = getattr(inner.config, "image_token_id", None)
    if image_id is None:
        image_id = getattr(inner.config, "image_token_index", None)
    if "image_grid_thw" in row:  # Qwen families: flattened patches, one grid row per image
        grid = row["image_grid_thw"]
        merge = inner.config.vision_config.spatial_merge_size
        counts = (grid.prod(-1) // merge**2).tolist()
        firsts = (ids[0] == image_id).nonzero().squeeze(-1).tolist()
        starts, k = [], 0
        for n in counts:  # each image's placeholder run starts at the next unclaimed image token
            starts.append(firsts[k])
            k += n
        new = [i for i, s in enumerate(starts) if start <= s < end]
        if any(s < start < s + n for s, n in zip(starts, counts, strict=True)):
            raise ValueError("an image's placeholder tokens straddle the cached prefix")
        rope_kwargs = {"mm_token_type_ids": row["mm_token_type_ids"], "image_grid_thw": grid,
                       "attention_mask": torch.ones_like(ids)}
        mrope, delta = inner.model.get_rope_index(ids, **rope_kwargs)
        text = torch.arange(ids.shape[1])[None, None]
        kwargs["position_ids"] = torch.cat([text, mrope.cpu()], dim=0)[:, :, start:end]
        if new:
            chunks = torch.split(row["pixel_values"], grid.prod(-1).tolist())
            pixels = {"pixel_values": torch.cat([chunks[i] for i in new]), "image_grid_thw": grid[new]}
    elif "aspect_ratio_ids" in row:  # Mllama: one image slot per <|image|> token, states in cross-attention
        slot_tokens = (ids[0] == image_id).nonzero().squeeze(-1).tolist()
        new = [i for i, s in enumerate(slot_tokens) if start <= s < end]
        kwargs["position_ids"] = torch.arange(start, end)[None]
        # rows [start, end) of the mask; transformers before the cache rename (5.17) cuts them out itself
        # from the cache length, so it takes the rows from 0
        first = 0 if cache_kwarg() == "past_key_values" else start
        kwargs["cross_attention_mask"] = row["cross_attention_mask"][:, first:end]
        if new:
            pixels = {k: row[k][:, new] for k in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask")}
    elif "pixel_values" not in row and hasattr(inner.model, "get_rope_index"):  # Qwen, text only so far
        kwargs["position_ids"] = torch.arange(start, end)[None]
        delta = torch.zeros((1, 1), dtype=torch.long)
    elif "pixel_values" not in row:
        kwargs["position_ids"] = torch.arange(start, end)[None]
    else:
        raise ValueError(f"prefix_cache: family {inner.config.model_type!r} is not supported (Qwen-VL, Mllama)")
    if pixels:
        pixels["input_ids"] = kwargs["input_ids"]
        if vision_cache is not None:
            # Qwen: features through ``mm_encoder_outputs`` (a generate-capable path); Mllama:
            # ``cross_attention_states`` of the new slots (a plain forward, which this is).
            pixels = vision_cache.prepare(model, pixels, device, generate="image_grid_thw" in pixels)
        pixels.pop("input_ids")
        if "mm_encoder_outputs" in pixels:
            pixels.pop("image_grid_thw", None)  # positions are given: the grid would only re-derive them
        kwargs.update(pixels)
    if end > start:
        kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        model(**kwargs, **{cache_kwarg(): cache}, use_cache=True, logits_to_keep=1)
    return cache, delta


def _stack_caches(model: Any, caches: list[Any], lengths: list[int], width: int) -> Any:
    """One batch cache from per-row caches: self-attention K/V left-padded with zeros to ``width``
    (masked by the attention mask), cross-attention K/V right-padded to the most image tokens (masked by
    ``cross_attention_mask``, whose padded image slots are 0). The rows' tensors are released layer by
    layer as they are copied (the row caches are spent)."""
    from transformers import DynamicCache

    out = DynamicCache(config=transformers_model(model).config)
    cross = cross_attention_layer_ids(model)
    for idx in range(max(len(c.layers) for c in caches)):
        layers = [c.layers[idx] if idx < len(c.layers) and c.layers[idx].is_initialized
                  and c.layers[idx].keys is not None and c.layers[idx].keys.numel() else None for c in caches]
        ref = next((layer for layer in layers if layer is not None), None)
        if ref is None:
            continue  # a cross-attention layer no row has images for yet
        most = max(layer.keys.shape[-2] for layer in layers if layer is not None)
        keys, values = [], []
        for layer, n in zip(layers, lengths, strict=True):
            have = 0 if layer is None else layer.keys.shape[-2]
            if idx not in cross and have != n:
                raise ValueError(f"cache layer {idx} holds {have} tokens, expected {n}")
            left, right = (0, most - have) if idx in cross else (width - n, 0)
            for parts, t, r in ((keys, None if layer is None else layer.keys, ref.keys),
                                (values, None if layer is None else layer.values, ref.values)):
                shape = [1, *r.shape[1:-2]]
                pieces = [r.new_zeros([*shape, left, r.shape[-1]])]
                if t is not None:
                    pieces.append(t)
                pieces.append(r.new_zeros([*shape, right, r.shape[-1]]))
                parts.append(torch.cat(pieces, dim=-2))
        for layer in layers:
            if layer is not None:
                layer.keys = layer.values = torch.empty(0)  # copied above: free it before the next layer
        out.update(torch.cat(keys), torch.cat(values), idx)
    return out


def _cross_length(model: Any, cache: Any) -> int:
    """How many image tokens a row cache's cross-attention layers hold (0 without any)."""
    for idx in sorted(cross_attention_layer_ids(model)):
        if idx < len(cache.layers) and cache.layers[idx].is_initialized and cache.layers[idx].keys is not None:
            return int(cache.layers[idx].keys.shape[-2])
    return 0


def _split_cache(model: Any, batch: Any, spans: list[tuple[int, int, int]]) -> list[Any]:
    """Per-row caches out of a batch cache: row ``b`` keeps self-attention columns ``[lo, hi)`` and its
    first ``image_tokens`` cross-attention ones (``spans[b] = (lo, hi, image_tokens)``); copies, made
    layer by layer with each batch layer freed once cut."""
    from transformers import DynamicCache

    config = transformers_model(model).config
    out = [DynamicCache(config=config) for _ in spans]
    cross = cross_attention_layer_ids(model)
    for idx, layer in enumerate(batch.layers):
        if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
            continue
        for b, (lo, hi, images) in enumerate(spans):
            cols = slice(0, images) if idx in cross else slice(lo, hi)
            if idx in cross and images == 0:
                continue
            out[b].update(layer.keys[b : b + 1, :, cols].clone(), layer.values[b : b + 1, :, cols].clone(), idx)
        layer.keys = layer.values = torch.empty(0)
    return out


@torch.no_grad()
def generate_from_prefixes(
    model: Any,
    rows: list[dict[str, torch.Tensor]],
    batch: dict[str, torch.Tensor],
    cached: list[tuple[Any, int]],
    sampling: SamplingParams,
    generator: torch.Generator | None,
    eos_ids: list[int],
    banned: list[int],
    pad_id: int,
    vision_cache: Any = None,
    row_seeds: list[list[int]] | None = None,
    min_new_tokens: int = 0,
) -> tuple[list[tuple[list[int], list[float]]], list[tuple[Any, int]]]:
    """:func:`generate_tokens` for rows whose first tokens are already in a KV cache.

    ``rows``: each row's collated inputs, unpadded, on the CPU (images included); ``batch``: the same
    rows left-padded (``input_ids``, ``attention_mask``, Qwen's ``mm_token_type_ids``, Mllama's
    ``cross_attention_mask``; its image tensors are not used); ``cached``: per row ``(cache, length)``
    (``(None, 0)``: nothing cached). Returns the answers, as :func:`generate_tokens`, and per row the
    cache of its prompt + answer but the answer's last token, with that length."""
    device = next(model.parameters()).device
    width = batch["input_ids"].shape[1]
    caches, deltas, lengths = [], [], []
    for row, (cache, start) in zip(rows, cached, strict=True):
        n = row["input_ids"].shape[1]
        if not 0 <= start < n:
            raise ValueError(f"cached length {start} outside a prompt of {n} tokens")
        cache, delta = prefill_row(model, row, start, n - 1, cache, vision_cache, device)
        caches.append(cache)
        deltas.append(delta)
        lengths.append(n - 1)
    images = [_cross_length(model, c) for c in caches]
    stacked = _stack_caches(model, caches, lengths, width - 1)
    del caches
    inputs = {k: v.to(device) for k, v in batch.items()
              if k in ("input_ids", "attention_mask", "mm_token_type_ids", "cross_attention_mask")}
    if deltas[0] is not None:
        # Qwen: generate continues a cache with text positions + the model's stored ``rope_deltas``
        # (transformers' ``_prepare_position_ids_for_generation``), which must be this batch's rows'.
        transformers_model(model).model.rope_deltas = torch.cat(deltas).to(device)
    answers = generate_tokens(model, inputs, sampling, generator, eos_ids, banned, pad_id, row_seeds=row_seeds,
                              min_new_tokens=min_new_tokens, cache=stacked)
    spans = [(width - 1 - n, width - 1 + len(ids), images[b]) for b, ((ids, _), n) in enumerate(zip(answers, lengths,
                                                                                                   strict=True))]
    kept = _split_cache(model, stacked, spans)
    return answers, [(c, n + len(ids)) for c, n, (ids, _) in zip(kept, lengths, answers, strict=True)]
