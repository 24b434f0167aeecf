"""Prefix KV reuse for callers that hand over whole conversations each turn (the eval policy, ``HFPolicy``).

Why: the eval runner asks the policy for one answer per turn with the whole conversation so far. A
view-all (VA) TVR episode of 20 turns then prefills its first frame 20 times, and the prefill cost of an
episode grows with the square of its length. The trainers' rollouts keep each segment's cache by
identity (:class:`~spatialrl.models.sampling.PrefixKV`); a conversation-level caller has no segment
identity, so this store finds earlier caches by *content*: each entry is the KV cache of an earlier
call's prompt + answer with the token ids it holds and the hashes of its images, and a new prompt
continues the entry with the longest common prefix (token ids equal and, for every image inside it, the
same processed pixels and layout). The entry is cut to that prefix, never through an image's
placeholder tokens. Entries are shared, not consumed (a claim is a view of the entry's tensors; stacking
copies), so G conversations with one opening all start from it; an entry that a new one extends is
dropped (the new one offers everything it did).

Mllama keeps image K/V in its cross-attention layers rather than in the sequence, so an entry is reused
there only when every image it holds lies inside the common prefix. Qwen families need no such rule:
images are tokens of the sequence and their 3-D rope positions are recomputed for the whole row.

Answers equal those without the store up to float rounding (``tests/agents/test_conversation_kv.py``);
the weights' signature is checked on every call and a change clears the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from spatialrl.lru import MegabyteCache
from spatialrl.models.encode import pixel_digest
from spatialrl.models.family import model_family
from spatialrl.models.sampling import WeightsBound, cross_attention_layer_ids, transformers_model

# (start, tokens, key) of one image's placeholder run in a row
ImageRun = tuple[int, int, tuple]


@dataclass(eq=False)
class Claim:
    """What :meth:`ConversationKV.claim` found for one row; goes back to :meth:`ConversationKV.put`."""

    cache: Any  # a view of the entry's cache cut to ``length`` tokens, or None (nothing reused)
    length: int
    source: Any  # the entry's key, or None
    runs: list[ImageRun]  # the row's images, hashed once per call


@dataclass(eq=False)
class _Entry:
    ids: torch.Tensor  # (L,) the token ids whose K/V the cache holds
    images: list[ImageRun]  # the images among them
    cache: Any  # transformers DynamicCache of L tokens
    nbytes: int = field(default=0)


def image_runs(model: Any, row: dict[str, torch.Tensor]) -> list[ImageRun]:
    """Each image's placeholder run in one unpadded row (``input_ids`` of shape ``(1, n)``) with a key of its
    processed pixels and layout: Qwen families one run of ``grid / merge²`` tokens per image, Mllama one
    ``<|image|>`` token per slot; ``[]`` for a text-only row."""
    if "pixel_values" not in row:
        return []
    inner = transformers_model(model)
    image_id = getattr(inner.config, "image_token_id", None)
    if image_id is None:
        image_id = getattr(inner.config, "image_token_index", None)
    ids = row["input_ids"][0]
    if "image_grid_thw" in row:
        grid = row["image_grid_thw"]
        merge = inner.config.vision_config.spatial_merge_size
        counts = (grid.prod(-1) // merge**2).tolist()
        digests = [pixel_digest(c) for c in torch.split(row["pixel_values"], grid.prod(-1).tolist())]
        firsts = (ids == image_id).nonzero().squeeze(-1).tolist()
        runs, k = [], 0
        for n, digest, layout in zip(counts, digests, grid.tolist(), strict=True):
            runs.append((firsts[k], n, (digest, tuple(layout))))
            k += n
        return runs
    slots = (ids == image_id).nonzero().squeeze(-1).tolist()
    pixels, ratio = row["pixel_values"], row.get("aspect_ratio_ids")
    return [(s, 1, (pixel_digest(pixels[0, i]), int(ratio[0, i]) if ratio is not None else -1))
            for i, s in enumerate(slots)]


def _common_length(a: torch.Tensor, b: torch.Tensor) -> int:
    m = min(len(a), len(b))
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0, 0]) if len(differ) else m


def _cache_bytes(cache: Any) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers if layer.is_initialized
               for t in (layer.keys, layer.values) if t is not None)


def _cut(model: Any, cache: Any, length: int) -> Any:
    """A cache of the first ``length`` tokens of ``cache``: views of its self-attention K/V (cross-attention
    layers whole); the source is untouched."""
    from transformers import DynamicCache

    out = DynamicCache(config=transformers_model(model).config)
    cross = cross_attention_layer_ids(model)
    for idx, layer in enumerate(cache.layers):
        if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
            continue
        keys, values = (layer.keys, layer.values) if idx in cross else \
            (layer.keys[..., :length, :], layer.values[..., :length, :])
        out.update(keys, values, idx)
    return out


class ConversationKV(WeightsBound, MegabyteCache):
    """Content-addressed KV caches of earlier prompts + answers (module docstring).

    ``max_mb`` bounds the kept K/V (least recently used evicted first); ``min_tokens`` is the shortest
    prefix worth a claim (below it the row prefills from scratch)."""

    what = "prefix cache"

    def __init__(self, max_mb: float = 1024, min_tokens: int = 8):
        super().__init__(max_mb, size=lambda e: e.nbytes)
        self.min_tokens = min_tokens
        self._next_key = 0
        self.reused_tokens = 0  # prompt tokens served from an entry instead of prefilled again
        self.prefilled_tokens = 0

    @staticmethod
    def supports(model: Any) -> bool:
        """Qwen-VL families and Mllama (what :func:`~spatialrl.models.sampling.generate_from_prefixes` can
        prefill image by image)."""
        return model_family(model).vision_features in ("qwen", "mllama")

    def claim(self, model: Any, row: dict[str, torch.Tensor]) -> Claim:
        """The best entry for one unpadded row, as a view cut to the prefix it shares with the row (at most
        the row's length minus one: the last prompt token goes through ``generate``); ``cache`` None when
        no entry shares ``min_tokens``."""
        ids = row["input_ids"][0]
        limit = len(ids) - 1
        runs = image_runs(model, row)
        mllama = bool(cross_attention_layer_ids(model))
        best, best_len = None, 0
        for key, entry in self._entries.items():
            n = min(_common_length(entry.ids, ids), limit)
            if n <= best_len:
                continue
            n = self._image_safe(n, runs, entry.images)
            if mllama and any(start >= n for start, _, _ in entry.images):
                continue  # its cross-attention layers hold an image this row does not have there
            if n > best_len:
                best, best_len = key, n
        if best is None or best_len < self.min_tokens:
            self.prefilled_tokens += len(ids)
            return Claim(None, 0, None, runs)
        entry = self._entries.get(best)  # now most recently used
        self.reused_tokens += best_len
        self.prefilled_tokens += len(ids) - best_len
        return Claim(_cut(model, entry.cache, best_len), best_len, best, runs)

    @staticmethod
    def _image_safe(n: int, runs: list[ImageRun], cached: list[ImageRun]) -> int:
        """``n`` lowered to the first image of the row that straddles it or differs from the entry's image
        at the same place."""
        theirs = {start: key for start, _, key in cached}
        for start, count, key in runs:
            if start >= n:
                break
            if start + count > n or theirs.get(start) != key:
                return start
        return n

    def put(self, row: dict[str, torch.Tensor], answer: list[int], cache: Any, length: int, claim: Claim) -> None:
        """Keep the cache of ``row``'s prompt + ``answer`` (its first ``length`` tokens); drop the entry the
        row was claimed from when the new entry extends it."""
        ids = torch.cat([row["input_ids"][0], torch.tensor(answer, dtype=row["input_ids"].dtype)])[:length]
        runs = [r for r in claim.runs if r[0] + r[1] <= length]
        if claim.source is not None:
            old = self._entries.get(claim.source)
            if old is not None and len(old.ids) <= length and _common_length(old.ids, ids) == len(old.ids):
                self._entries.pop(claim.source)
        self._next_key += 1
        self._entries.put(self._next_key, _Entry(ids.clone(), runs, cache, _cache_bytes(cache)))
