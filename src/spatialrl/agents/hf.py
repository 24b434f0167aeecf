"""Local Hugging Face image-text-to-text models as a batched :class:`Policy`.

One code path for every family transformers loads with ``AutoModelForImageTextToText`` (tested on
Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llama-3.2-Vision/Mllama, Idefics3 and SmolVLM): the family's own
processor and chat template build the inputs, ``model.generate`` decodes a left-padded batch with the
KV cache.

Token selection happens in our own logits processor (``TokenSampler``), with HF's greedy search picking
the one token it leaves. Why: the log-prob of each chosen token is then recorded from the very logits
it was drawn from (``logits / temperature``, or the raw logits for greedy) without keeping every
step's full-vocabulary logits, sampling draws from a ``torch.Generator`` seeded per call (no global RNG
state), and the model's own ``generation_config`` (Qwen ships ``repetition_penalty=1.05``) cannot
silently change the distribution the trainer later re-scores.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import BatchFeature, GenerationConfig, LogitsProcessor, LogitsProcessorList

from spatialrl.agents.base import Conversation, Generation, SamplingParams
from spatialrl.agents.vision_cache import QWEN_FAMILIES, VisionCache
from spatialrl.errors import DataError
from spatialrl.models.mllama_mask import mask_cross_attention_rows

# Families whose processors take one image list per sample (Qwen takes one flat list for the batch).
NESTED_IMAGE_FAMILIES = ("idefics3", "smolvlm", "mllama")


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


@dataclass
class _Prepared:
    """One conversation ready for the processor: chat-template text and its images in order."""

    text: str
    images: list[Image.Image]


def to_pil(image: Any) -> Image.Image:
    """An image part's payload (uint8 HxWx3 array or PIL image) as an RGB PIL image."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise DataError(f"image part: expected a uint8 HxWx3 array, got dtype {arr.dtype} shape {arr.shape}")
    return Image.fromarray(arr)


class HFPolicy:
    """A local transformers VLM. ``generate`` runs a batch of conversations in one ``model.generate``.

    Knobs: ``min_pixels``/``max_pixels`` set the image size the model sees (Qwen families: the image
    processor's own bounds; other families: images above ``max_pixels`` are downscaled before the
    processor), ``max_batch_size`` caps one ``generate`` call (larger batches are split),
    ``min_new_tokens`` forces response length (benchmarks), ``fold_system`` merges the system prompt into
    the first user turn (default on for Mllama, whose chat template refuses a system message next to
    images), ``vision_cache_mb`` keeps Qwen-family image features between calls (``agents/vision_cache.py``;
    0 turns it off) so a multi-turn episode encodes each frame once.
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
    ):
        self.name = name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        mask_cross_attention_rows(self.model)  # Mllama: transformers' cross-attention row-mask bug
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"
        self.family = model.config.model_type
        self.max_batch_size = max_batch_size
        self.min_new_tokens = min_new_tokens
        self.fold_system = self.family == "mllama" if fold_system is None else fold_system
        self.max_pixels = max_pixels
        if self.family in QWEN_FAMILIES and (min_pixels or max_pixels):
            ip = processor.image_processor
            size = dict(ip.size)
            if min_pixels:
                size["shortest_edge"] = min_pixels
            if max_pixels:
                size["longest_edge"] = max_pixels
            ip.size = size
            self.max_pixels = None  # the Qwen processor resizes itself (to multiples of patch * merge)
        original = model.generation_config
        eos = original.eos_token_id if original.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else min(self.eos_token_ids)
        # A clean generation config: nothing from the checkpoint's defaults alters the distribution.
        self.model.generation_config = GenerationConfig(
            eos_token_id=sorted(self.eos_token_ids), pad_token_id=self.pad_token_id,
            bos_token_id=original.bos_token_id,
        )
        cfg = model.config
        placeholders = {getattr(cfg, k, None) for k in ("image_token_id", "video_token_id", "image_token_index")}
        self.banned_token_ids = sorted(t for t in placeholders if isinstance(t, int) and t not in self.eos_token_ids)
        use_cache = vision_cache_mb and VisionCache.supports(self.model, generate=True)
        self.vision_cache = VisionCache(vision_cache_mb) if use_cache else None
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "oom_splits": 0,
                      "vision_cache_hits": 0, "vision_cache_misses": 0}

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
    def _prepare(self, conversation: Conversation, add_generation_prompt: bool = True) -> _Prepared:
        messages, images = [], []
        system_text = ""
        for message in conversation:
            content = message["content"]
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            out_parts = []
            for part in parts:
                if part.get("type") == "image":
                    images.append(self._resize(to_pil(part["image"])))
                    out_parts.append({"type": "image"})
                elif part.get("type") == "text":
                    out_parts.append({"type": "text", "text": part["text"]})
                else:
                    raise DataError(f"message part: unknown type {part.get('type')!r} (expected 'text' or 'image')")
            if self.fold_system and message["role"] == "system":
                system_text += "".join(p["text"] for p in out_parts if p["type"] == "text")
                continue
            if system_text and message["role"] == "user":
                out_parts = [{"type": "text", "text": system_text + "\n\n"}, *out_parts]
                system_text = ""
            messages.append({"role": message["role"], "content": out_parts})
        text = self.processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
        return _Prepared(text=text, images=images)

    def _resize(self, image: Image.Image) -> Image.Image:
        if self.max_pixels and image.width * image.height > self.max_pixels:
            scale = (self.max_pixels / (image.width * image.height)) ** 0.5
            size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
            image = image.resize(size, Image.Resampling.BICUBIC)
        return image

    def _encode_one(self, p: _Prepared) -> dict[str, torch.Tensor]:
        """Processor outputs of one conversation (no padding, on the CPU)."""
        kwargs: dict[str, Any] = dict(text=[p.text], return_tensors="pt", add_special_tokens=False)
        if p.images:
            kwargs["images"] = [p.images] if self.family in NESTED_IMAGE_FAMILIES else p.images
        return dict(self.processor(**kwargs))

    def _encode(self, prepared: list[_Prepared]) -> Any:
        """Left-padded model inputs of a batch, collated from per-conversation processor outputs."""
        return BatchFeature(collate([self._encode_one(p) for p in prepared], self.pad_token_id)).to(self.device)

    def _try_encode(self, conversation: Conversation) -> dict[str, torch.Tensor] | str:
        """Template + processor for one conversation, or the error message that conversation gets."""
        try:
            return self._encode_one(self._prepare(conversation))
        except (DataError, ValueError, KeyError, TypeError, IndexError) as e:
            return f"bad conversation: {type(e).__name__}: {e}"

    def chat_text(self, conversation: Conversation, add_generation_prompt: bool = True) -> str:
        """The chat-template text of one conversation (image placeholders unexpanded)."""
        return self._prepare(conversation, add_generation_prompt).text

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
        before = self.vision_cache.hits, self.vision_cache.misses
        out = self.vision_cache.prepare(self.model, batch, self.device, generate=True)
        self.usage["vision_cache_hits"] += self.vision_cache.hits - before[0]
        self.usage["vision_cache_misses"] += self.vision_cache.misses - before[1]
        return out

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
        """Generate, halving the batch on out-of-memory; a single conversation that still fails gets an error."""
        try:
            return self._generate_batch(parts, sampling, row_seeds)
        except torch.OutOfMemoryError as e:
            self.usage["oom_splits"] += 1
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            if len(parts) == 1:
                return [Generation(text="", error=f"out of memory: {e}")]
            half = len(parts) // 2
            seeds = (row_seeds[:half], row_seeds[half:]) if row_seeds is not None else (None, None)
            return (self._generate_safe(parts[:half], sampling, seeds[0])
                    + self._generate_safe(parts[half:], sampling, seeds[1]))

    @torch.no_grad()
    def _generate_batch(self, parts: list[dict[str, torch.Tensor]], sampling: SamplingParams,
                        row_seeds: list[list[int]] | None = None) -> list[Generation]:
        inputs = self._model_inputs(collate(parts, self.pad_token_id))
        generator = None
        if not sampling.greedy:
            generator = torch.Generator(device=self.device)
            if sampling.seed is not None:
                generator.manual_seed(sampling.seed)
            else:
                generator.seed()
        sampler = TokenSampler(sampling, generator, self.banned_token_ids, row_seeds)
        prompt_len = inputs["input_ids"].shape[1]
        out = self.model.generate(
            **inputs,
            generation_config=GenerationConfig(
                max_new_tokens=sampling.max_new_tokens,
                min_new_tokens=min(self.min_new_tokens, sampling.max_new_tokens) or None,
                do_sample=False, num_beams=1, repetition_penalty=1.0, use_cache=True,
                eos_token_id=sorted(self.eos_token_ids), pad_token_id=self.pad_token_id,
            ),
            logits_processor=LogitsProcessorList([sampler]),
        )
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        new = sequences[:, prompt_len:].tolist()
        logprobs = torch.stack(sampler.logprobs, dim=1).tolist() if sampler.logprobs else [[] for _ in new]
        prompt_counts = inputs["attention_mask"].sum(dim=1).tolist()
        results = []
        for row, lps, n_prompt in zip(new, logprobs, prompt_counts, strict=True):
            ids = row
            for k, tok in enumerate(row):
                if tok in self.eos_token_ids:
                    ids = row[: k + 1]
                    break
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(Generation(text=text, token_ids=ids, logprobs=lps[: len(ids)],
                                      prompt_tokens=int(n_prompt), completion_tokens=len(ids)))
            self.usage["prompt_tokens"] += int(n_prompt)
            self.usage["completion_tokens"] += len(ids)
        self.usage["requests"] += len(results)
        return results


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="hf-preprocess")
    return _POOL


# Processor outputs with a token axis (dim 1), left-padded like input_ids.
TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids", "cross_attention_mask")
# Processor outputs without a batch axis (Qwen: all images' patches of the batch stacked).
FLAT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")


def collate(parts: list[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Batch single-conversation processor outputs the way the processors pad a batch.

    Token-axis tensors are left-padded (``input_ids`` with the pad token, the rest with 0); per-sample
    image tensors (Idefics3/SmolVLM/Mllama ``pixel_values``, masks, aspect ratios) are zero-padded on
    every later axis (the models drop all-zero padding images/tiles); Qwen's batch-less image tensors
    are concatenated. A conversation without images gets zeros where others have image tensors.
    """
    if len(parts) == 1:
        return dict(parts[0])
    flat = "image_grid_thw" in {k for p in parts for k in p}
    seq = max(p["input_ids"].shape[1] for p in parts)
    out: dict[str, torch.Tensor] = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        values = [p.get(key) for p in parts]
        present = [v for v in values if v is not None]
        if flat and key in FLAT_KEYS:
            out[key] = torch.cat(present, dim=0)
            continue
        shape = [max(v.shape[d] for v in present) for d in range(present[0].dim())]
        if key in TOKEN_KEYS:
            shape[1] = seq
        rows = []
        for v, p in zip(values, parts, strict=True):
            if v is None:
                v = torch.zeros([1, *shape[1:]], dtype=present[0].dtype)
                if key in TOKEN_KEYS:
                    v = v[:, : p["input_ids"].shape[1]]
            pads: list[int] = []
            for d in range(v.dim() - 1, 0, -1):  # F.pad takes (last dim first) (left, right) pairs
                missing = shape[d] - v.shape[d]
                pads += [missing, 0] if (d == 1 and key in TOKEN_KEYS) else [0, missing]
            if any(pads):
                fill = pad_token_id if key == "input_ids" else 0
                padded = torch.nn.functional.pad(v.to(torch.uint8) if v.dtype == torch.bool else v, pads, value=fill)
                v = padded.to(v.dtype)
            rows.append(v)
        out[key] = torch.cat(rows, dim=0)
    if "aspect_ratio_mask" in out:  # Mllama marks tile 0 of every image slot, padding slots included
        out["aspect_ratio_mask"][:, :, 0] = 1
    return out


def extend_inputs(inputs: Any, token_ids: list[int]) -> dict[str, Any]:
    """Append answer tokens to single-conversation model inputs (for teacher forcing).

    ``input_ids`` gets the tokens, ``attention_mask`` ones; other per-token tensors
    (``mm_token_type_ids``, Mllama's ``cross_attention_mask``) repeat their last position, which is
    what a text token after the prompt carries.
    """
    n = len(token_ids)
    out = dict(inputs)
    ids = inputs["input_ids"]
    seq = ids.shape[1]
    extra = torch.tensor([token_ids], dtype=ids.dtype, device=ids.device)
    for key, value in inputs.items():
        if key == "input_ids":
            out[key] = torch.cat([ids, extra], dim=1)
        elif key == "attention_mask":
            out[key] = torch.cat([value, torch.ones_like(extra, dtype=value.dtype)], dim=1)
        elif isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == (1, seq):
            tail = value[:, -1:].expand(1, n, *value.shape[2:])
            out[key] = torch.cat([value, tail], dim=1)
    return out
