"""Local Hugging Face image-text-to-text models as a batched :class:`Policy`.

One code path for every family transformers loads with ``AutoModelForImageTextToText`` (tested on
Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llama-3.2-Vision/Mllama, Idefics3 and SmolVLM). The policy is a thin
shell over the model-I/O layer the trainers use as well: the family adapter (``models/family.py``:
system folding, image nesting, EOS, banned ids, processor quirks), the conversation encoder
(``models/encode.py``) and the token sampler (``models/sampling.py``: ``TokenSampler`` inside one
``model.generate`` over a left-padded batch with the KV cache). What stays here is what only eval
needs: a thread pool for preprocessing, per-conversation errors, ``max_batch_size`` chunks, halving
on out-of-memory, per-call generator seeding and usage counters.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from transformers import BatchFeature, GenerationConfig

from spatialrl.agents.base import Conversation, Generation, SamplingParams
from spatialrl.agents.vision_cache import VisionCache
from spatialrl.errors import DataError
from spatialrl.models.conversation_kv import ConversationKV
from spatialrl.models.encode import Rendered, collate, encode_text, extend_inputs, render
from spatialrl.models.family import banned_token_ids, eos_token_ids, family_of, pad_token_id
from spatialrl.models.sampling import generate_from_prefixes, generate_tokens


class HFPolicy:
    """A local transformers VLM. ``generate`` runs a batch of conversations in one ``model.generate``.

    Knobs: ``min_pixels``/``max_pixels`` set the image size the model sees (Qwen families: the image
    processor's own bounds; other families: images above ``max_pixels`` are downscaled before the
    processor), ``max_batch_size`` caps one ``generate`` call (larger batches are split),
    ``min_new_tokens`` forces response length (benchmarks), ``fold_system`` merges the system prompt into
    the first user turn (default on for Mllama, whose chat template refuses a system message next to
    images), ``vision_cache_mb`` keeps Qwen-family image features between calls (``agents/vision_cache.py``;
    0 turns it off) so a multi-turn episode encodes each frame once; ``prefix_cache_mb`` keeps the KV
    cache of each answered conversation (``models/conversation_kv.py``; Qwen families and Mllama; 0 turns
    it off) so the next turn of the same conversation prefills only what was added since — by default
    1024 MB on the CPU, where it was measured to win (``benchmarks/tvr_memory_cost.py``), and off on a
    GPU until it has a row there (its prefill runs row by row, launch-bound for short increments).
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        name: str = "hf",
        device: str | None = None,
        dtype: torch.dtype | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_batch_size: int | None = None,
        min_new_tokens: int = 0,
        fold_system: bool | None = None,
        vision_cache_mb: float = 1024,
        prefix_cache_mb: float | None = None,
    ):
        self.name = name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.family = model.config.model_type
        self.adapter = family_of(self.family)
        self.adapter.prepare_model(self.model)  # Mllama: transformers' cross-attention row-mask bug
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"
        self.max_batch_size = max_batch_size
        self.min_new_tokens = min_new_tokens
        self.fold_system = self.adapter.fold_system if fold_system is None else fold_system
        # Qwen's processor resizes itself (to multiples of patch * merge); others are downscaled first.
        self.max_pixels = None if self.adapter.set_pixel_bounds(processor, min_pixels, max_pixels) else max_pixels
        original = model.generation_config
        eos = eos_token_ids(model, self.tokenizer)
        self.eos_token_ids = set(eos)
        self.pad_token_id = pad_token_id(self.tokenizer, eos)
        # A clean generation config: nothing from the checkpoint's defaults alters the distribution.
        self.model.generation_config = GenerationConfig(
            eos_token_id=eos, pad_token_id=self.pad_token_id, bos_token_id=original.bos_token_id,
        )
        self.banned_token_ids = banned_token_ids(model, eos)
        use_cache = vision_cache_mb and VisionCache.supports(self.model, generate=True)
        self.vision_cache = VisionCache(vision_cache_mb) if use_cache else None
        if prefix_cache_mb is None:
            prefix_cache_mb = 1024 if self.device.type == "cpu" else 0
        use_prefix = prefix_cache_mb and ConversationKV.supports(self.model)
        self.prefix_cache = ConversationKV(prefix_cache_mb) if use_prefix else None
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "oom_splits": 0,
                      "vision_cache_hits": 0, "vision_cache_misses": 0, "prefix_reused_tokens": 0}

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> HFPolicy:
        """Load model + processor from a local folder (no network, ever)."""
        from transformers import AutoModelForImageTextToText

        from spatialrl.models.processor import load_processor, model_type_of

        path = Path(path)
        if not path.is_dir():
            raise DataError(f"{path}: model folder does not exist")
        model_type_of(path)  # clear error when config.json is missing or malformed
        device = torch.device(kwargs.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = kwargs.get("dtype") or (torch.bfloat16 if device.type == "cuda" else torch.float32)
        kwargs.update(device=str(device), dtype=dtype)
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, local_files_only=True)
        kwargs.setdefault("name", f"hf:{path}")
        return cls(model, load_processor(path), **kwargs)

    # ------------------------------------------------------------------ inputs
    def _prepare(self, conversation: Conversation, add_generation_prompt: bool = True) -> Rendered:
        return render(self.processor, conversation, add_generation_prompt, self.fold_system, self.max_pixels)

    def _encode_one(self, p: Rendered) -> dict[str, torch.Tensor]:
        """Processor outputs of one conversation (no padding, on the CPU)."""
        return encode_text(self.processor, self.adapter, p.text, p.images)

    def _encode(self, prepared: list[Rendered]) -> Any:
        """Left-padded model inputs of a batch, collated from per-conversation processor outputs."""
        return BatchFeature(collate([self._encode_one(p) for p in prepared], self.pad_token_id)).to(self.device)

    def _try_encode(self, conversation: Conversation) -> dict[str, torch.Tensor] | str:
        """Template + processor for one conversation, or the error message that conversation gets."""
        try:
            return self._encode_one(self._prepare(conversation))
        except (DataError, ValueError, KeyError, TypeError, IndexError) as e:
            return f"bad conversation: {type(e).__name__}: {e}"

    def prompt_inputs(self, conversation: Conversation, add_generation_prompt: bool = True) -> Any:
        """Model inputs (``input_ids``, ``attention_mask``, pixel tensors, ...) of one conversation, unpadded.

        Trainers call this so training prompts are tokenized exactly as rollout prompts were.
        """
        return self._encode([self._prepare(conversation, add_generation_prompt)])

    @torch.no_grad()
    def completion_logprobs(self, conversation: Conversation, token_ids: list[int], temperature: float = 0.0) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids`` as the answer to ``conversation`` (1-D float tensor).

        Same definition as ``generate`` records: log-softmax of ``logits / temperature`` (raw logits
        when ``temperature`` is 0).
        """
        inputs = extend_inputs(self.prompt_inputs(conversation), token_ids)
        n = len(token_ids)
        logits = self.model(**inputs).logits[0, -n - 1 : -1].float()
        if temperature > 0:
            logits = logits / temperature
        ids = torch.tensor(token_ids, device=logits.device)
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, None]).squeeze(-1)

    def _model_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """A collated CPU batch on the device; through the vision cache when there is one."""
        if self.vision_cache is None:
            return dict(BatchFeature(batch).to(self.device))
        before = self._vision_counts()
        out = self.vision_cache.prepare(self.model, batch, self.device, generate=True)
        self._count_vision(before)
        return out

    def _vision_counts(self) -> tuple[int, int]:
        return (self.vision_cache.hits, self.vision_cache.misses) if self.vision_cache is not None else (0, 0)

    def _count_vision(self, before: tuple[int, int]) -> None:
        """Add the vision cache's hits and misses since ``before`` to ``usage``."""
        hits, misses = self._vision_counts()
        self.usage["vision_cache_hits"] += hits - before[0]
        self.usage["vision_cache_misses"] += misses - before[1]

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]:
        """Answer a batch. Conversations are templated and run through the processor in a thread pool
        (image resizing and normalisation release the GIL; the Mllama processor took 0.17 s per 2405²
        V-IRL grid on one core here, ~20 s per turn at batch 128 if done serially), collated exactly as
        the processor pads a batch, then decoded by one ``model.generate`` per ``max_batch_size``."""
        encoded = list(_pool().map(self._try_encode, conversations)) if len(conversations) > 1 else \
            [self._try_encode(c) for c in conversations]
        results: list[Generation | None] = [None] * len(conversations)
        ready: list[tuple[int, dict[str, torch.Tensor]]] = []
        for i, enc in enumerate(encoded):
            if isinstance(enc, str):
                results[i] = Generation(text="", error=enc)
            else:
                ready.append((i, enc))
        step = self.max_batch_size or max(1, len(ready))
        for start in range(0, len(ready), step):
            chunk = ready[start : start + step]
            seeds = [sampling.stream_seed(i) for i, _ in chunk]
            row_seeds = seeds if all(x is not None for x in seeds) else None
            for (i, _), gen in zip(chunk, self._generate_safe([e for _, e in chunk], sampling, row_seeds),
                                   strict=True):
                results[i] = gen
        return [g for g in results if g is not None]

    def _generate_safe(self, parts: list[dict[str, torch.Tensor]], sampling: SamplingParams,
                       row_seeds: list[list[int]] | None = None) -> list[Generation]:
        """Generate, halving the batch on out-of-memory; a single conversation that still fails gets an error.

        The halves run after the ``except`` block, not in it: while the exception is being handled its
        traceback keeps the failed call's frames alive, and with them every tensor the failed batch had
        allocated (KV cache, Mllama's cross-attention states), so a retry inside the handler finds no more
        free memory than the batch that failed (the 11B's batch 128 split 255 times, down to batch 1, and
        ran no turn)."""
        try:
            return self._generate_batch(parts, sampling, row_seeds)
        except torch.OutOfMemoryError as e:
            error = f"out of memory: {e}"
        self.usage["oom_splits"] += 1
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # now that the failed batch's tensors are unreferenced
        if len(parts) == 1:
            return [Generation(text="", error=error)]
        half = len(parts) // 2
        seeds = (row_seeds[:half], row_seeds[half:]) if row_seeds is not None else (None, None)
        return (self._generate_safe(parts[:half], sampling, seeds[0])
                + self._generate_safe(parts[half:], sampling, seeds[1]))

    @torch.no_grad()
    def _generate_batch(self, parts: list[dict[str, torch.Tensor]], sampling: SamplingParams,
                        row_seeds: list[list[int]] | None = None) -> list[Generation]:
        generator = None
        if not sampling.greedy:
            generator = torch.Generator(device=self.device)
            if sampling.seed is not None:
                generator.manual_seed(sampling.seed)
            else:
                generator.seed()
        if self.prefix_cache is not None:
            answers = self._generate_from_prefixes(parts, sampling, generator, row_seeds)
        else:
            inputs = self._model_inputs(collate(parts, self.pad_token_id))
            answers = generate_tokens(self.model, inputs, sampling, generator, sorted(self.eos_token_ids),
                                      self.banned_token_ids, self.pad_token_id, row_seeds, self.min_new_tokens)
        prompt_counts = [int(p["input_ids"].shape[1]) for p in parts]
        results = []
        for (ids, lps), n_prompt in zip(answers, prompt_counts, strict=True):
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(Generation(text=text, token_ids=ids, logprobs=lps,
                                      prompt_tokens=int(n_prompt), completion_tokens=len(ids)))
            self.usage["prompt_tokens"] += int(n_prompt)
            self.usage["completion_tokens"] += len(ids)
        self.usage["requests"] += len(results)
        return results

    def _generate_from_prefixes(self, parts: list[dict[str, torch.Tensor]], sampling: SamplingParams,
                                generator: torch.Generator | None,
                                row_seeds: list[list[int]] | None) -> list[tuple[list[int], list[float]]]:
        """``generate_tokens`` with each row continuing the stored cache of its longest known prefix."""
        store = self.prefix_cache
        assert store is not None
        store.check_weights(self.model)
        claims = [store.claim(self.model, p) for p in parts]
        before = self._vision_counts()
        answers, kept = generate_from_prefixes(
            self.model, parts, collate(parts, self.pad_token_id), [(c.cache, c.length) for c in claims], sampling,
            generator, sorted(self.eos_token_ids), self.banned_token_ids, self.pad_token_id,
            vision_cache=self.vision_cache, row_seeds=row_seeds, min_new_tokens=self.min_new_tokens)
        for part, (ids, _), (cache, n), claim in zip(parts, answers, kept, claims, strict=True):
            store.put(part, ids, cache, n, claim)
        self.usage["prefix_reused_tokens"] += sum(c.length for c in claims)
        self._count_vision(before)
        return answers


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="hf-preprocess")
    return _POOL
