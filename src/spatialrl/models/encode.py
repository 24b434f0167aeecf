"""Conversations → model inputs: the one path every caller takes (eval, SFT, PPO, GRPO).

Three layers, each used by everyone:

* :func:`prepare_messages` — a conversation as template-ready messages (image parts reduced to
  ``{"type": "image"}``) and its PIL images in order; the family's system folding; optional
  downscaling to ``max_pixels`` (families whose processor does not resize itself).
* :func:`render_messages` — the processor's chat template, the only call of ``apply_chat_template``
  in the package; :func:`render` = both steps.
* :func:`encode_text` — one rendered text and its images through the processor (placeholders
  expanded, ``add_special_tokens=False``, images nested or flat as the family wants).

:func:`encode_prompt` (render + encode) is what ``HFPolicy`` sends to ``generate`` and what
``TurnTokenizer.start`` records as a segment's prompt; :func:`encode_conversations` encodes a batch of
whole conversations with the assistant-token mask (SFT; the tensor SFT engine). ``tests/models/
test_family.py`` checks per family that the three give the same token stream.

**The assistant mask** (:func:`encode_conversations`) is derived from the processor's own chat
template, so it works for any family without special-casing:

1. **Render** the conversation to text with the processor's chat template (images as the family's
   placeholder). The character span of assistant turn *i* is found by rendering the conversation up to
   turn *i* twice: ``messages[:i]`` with the generation prompt (everything before the answer) and
   ``messages[:i+1]`` (through the end-of-turn marker). The span is the difference, trailing
   whitespace after the end-of-turn marker excluded — the content plus the end-of-turn token, which
   the model must learn to emit to stop. A template that re-renders earlier turns differently when
   later ones exist (e.g. stripping old reasoning) breaks this prefix property and is reported.
   An assistant message with ``"train": false`` (axolotl's per-message field) is context, not a target:
   it gets no span — e.g. the wrong answer a V-IRL retry prompt repeats, which the data builder's
   off-path samples keep in the conversation but must not teach (``train/data.py``).
2. **Tokenise** the text with the tokenizer alone (offsets give each token's characters): a token is
   an assistant token iff its characters lie inside an assistant span; a token straddling a span
   border is an error (the training tokens would differ from what generation produces).
3. **Expand** with the processor (one call for the whole batch, as inference does): it replaces each
   image placeholder by the image's tokens and otherwise tokenises identically. Walking the processor
   ids and the tokenizer ids side by side, every processor id that is not the next tokenizer id is an
   inserted image token (checked: it must be a special token), so the mask carries over exactly.

Also here: :func:`collate` (batch single-conversation processor outputs exactly as the processor pads
a batch, left or right) and :func:`extend_inputs` (append answer tokens for teacher forcing).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from spatialrl.conversation import Conversation
from spatialrl.errors import DataError
from spatialrl.models.family import Family, family_of

IGNORE_INDEX = -100  # label value the loss skips (the torch / transformers convention)
ROLES = ("system", "user", "assistant")


def to_pil(image: Any) -> Image.Image:
    """An image part's payload (uint8 HxWx3 array or PIL image) as an RGB PIL image."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise DataError(f"image part: expected a uint8 HxWx3 array, got dtype {arr.dtype} shape {arr.shape}")
    return Image.fromarray(arr)


def downscale(image: Image.Image, max_pixels: int | None) -> Image.Image:
    """``image`` shrunk (bicubic, aspect kept) to at most ``max_pixels`` pixels; unchanged when smaller."""
    if max_pixels and image.width * image.height > max_pixels:
        scale = (max_pixels / (image.width * image.height)) ** 0.5
        size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
        image = image.resize(size, Image.Resampling.BICUBIC)
    return image


def prepare_messages(
    conversation: Conversation, fold_system: bool = False, max_pixels: int | None = None
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """Template-ready messages (image parts reduced to ``{"type": "image"}``) and the PIL images in order.

    ``fold_system`` merges the system text into the first user turn (``Family.fold_system``: Mllama's
    template refuses a system message beside images); ``max_pixels`` downscales larger images.
    """
    messages: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    system_text = ""
    for index, message in enumerate(conversation):
        role = message.get("role")
        if role not in ROLES:
            raise DataError(f"message {index}: unknown role {role!r} (expected system, user or assistant)")
        trained(message, index)  # a malformed "train" field is an error here, not silently trained on
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out: list[dict[str, Any]] = []
        for part in parts:
            kind = part.get("type")
            if kind == "image":
                if role == "assistant":
                    raise DataError(f"message {index}: assistant turns cannot hold images")
                images.append(downscale(to_pil(part["image"]), max_pixels))
                out.append({"type": "image"})
            elif kind == "text":
                out.append({"type": "text", "text": part["text"]})
            else:
                raise DataError(f"message {index}: unknown part type {kind!r} (expected 'text' or 'image')")
        if fold_system and role == "system":
            system_text += "".join(p["text"] for p in out if p["type"] == "text")
            continue
        if system_text and role == "user":
            out = [{"type": "text", "text": system_text + "\n\n"}, *out]
            system_text = ""
        messages.append({"role": role, "content": out})
    return messages, images


def trained(message: dict[str, Any], index: int = 0) -> bool:
    """Whether a message's tokens are SFT targets: assistant messages unless ``"train": false``."""
    flag = message.get("train", True)
    if not isinstance(flag, bool):
        raise DataError(f"message {index}: field 'train' must be true or false, got {flag!r}")
    if not flag and message.get("role") != "assistant":
        raise DataError(f"message {index}: 'train': false only applies to assistant messages "
                        f"(got role {message.get('role')!r}); other roles are never trained on")
    return message.get("role") == "assistant" and flag


def render_messages(processor: Any, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """The chat-template text of prepared messages (image placeholders unexpanded)."""
    return processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)


@dataclass
class Rendered:
    """One conversation ready for the processor: chat-template text and its images in order."""

    text: str
    images: list[Image.Image]


def render(processor: Any, conversation: Conversation, add_generation_prompt: bool = True,
           fold_system: bool = False, max_pixels: int | None = None) -> Rendered:
    """Chat-template text of ``conversation`` and its PIL images (see :func:`prepare_messages`)."""
    messages, images = prepare_messages(conversation, fold_system, max_pixels)
    return Rendered(text=render_messages(processor, messages, add_generation_prompt), images=images)


def encode_text(processor: Any, family: Family, text: str, images: list[Any],
                continuation: bool = False) -> dict[str, torch.Tensor]:
    """Processor output for one rendered text (batch of 1): placeholders expanded, no added specials.

    ``continuation``: the text continues a token stream (a turn's template increment), so a BOS the
    processor inserted (Mllama's ``build_string_from_input`` adds ``<|begin_of_text|>`` to any text
    lacking it) is dropped; a prompt keeps whatever the processor gives, as a batched call would.
    """
    kwargs: dict[str, Any] = dict(text=[text], return_tensors="pt", add_special_tokens=False)
    if images:
        kwargs["images"] = family.processor_images([images])
    out = {k: v for k, v in dict(processor(**kwargs)).items() if isinstance(v, torch.Tensor)}
    tokenizer = getattr(processor, "tokenizer", processor)
    bos_token, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    ids = out["input_ids"]
    if continuation and bos_token and bos_id is not None and bos_token not in text and ids.shape[1] and ids[0, 0] == bos_id:
        seq = ids.shape[1]
        out = {k: (v[:, 1:] if v.dim() >= 2 and v.shape[:2] == (1, seq) else v) for k, v in out.items()}
    return out


def encode_prompt(processor: Any, family: Family, conversation: Conversation, add_generation_prompt: bool = True,
                  fold_system: bool | None = None, max_pixels: int | None = None) -> dict[str, torch.Tensor]:
    """The model inputs of one conversation (unpadded, on the CPU): the one conversation → tokens
    function. ``fold_system`` defaults to the family's rule."""
    fold = family.fold_system if fold_system is None else fold_system
    r = render(processor, conversation, add_generation_prompt, fold, max_pixels)
    return encode_text(processor, family, r.text, r.images)


# ----------------------------------------------------------------------------- assistant masks
class ChatTemplateError(DataError):
    """The processor's chat template cannot be masked exactly (non-incremental or merging tokens)."""


@dataclass
class RenderedConversation:
    """A conversation as chat-template text: image placeholders unexpanded, images in order, and the
    character spans ``[start, end)`` of every assistant turn (content + end-of-turn token)."""

    text: str
    images: list[Image.Image]
    assistant_spans: list[tuple[int, int]]


def render_conversation(
    processor: Any, conversation: Conversation, fold_system: bool = False
) -> RenderedConversation:
    """Chat-template text of ``conversation`` and the character spans of its assistant turns."""
    messages, images = prepare_messages(conversation, fold_system)
    # prepare_messages drops only folded system messages, so the rest align with ``messages``
    targets = [trained(m) for m in conversation if not (fold_system and m.get("role") == "system")]

    def render(msgs: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return render_messages(processor, msgs, add_generation_prompt)

    text = render(messages, False)
    spans: list[tuple[int, int]] = []
    for i, target in enumerate(targets):
        if not target:
            continue
        before = render(messages[:i], True)
        through = render(messages[: i + 1], False)
        if not (through.startswith(before) and text.startswith(through)):
            raise ChatTemplateError(
                f"assistant turn {i}: the chat template does not render the conversation incrementally "
                f"(the text before turn {i} changes when later turns are added), so its tokens cannot be "
                "masked exactly; use a template that renders earlier turns unchanged"
            )
        end = len(through.rstrip())
        if end <= len(before):
            raise ChatTemplateError(f"assistant turn {i}: the chat template renders no assistant text")
        spans.append((len(before), end))
    return RenderedConversation(text=text, images=images, assistant_spans=spans)


def assistant_token_mask(tokenizer: Any, rendered: RenderedConversation) -> tuple[list[int], list[int]]:
    """Token ids of ``rendered.text`` (tokenizer only, placeholders unexpanded) and their 0/1 mask."""
    enc = tokenizer(rendered.text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    mask = [0] * len(ids)
    spans = rendered.assistant_spans
    for k, (start, end) in enumerate(offsets):
        for s, e in spans:
            inside = s <= start and end <= e and (start < end or s <= start < e)
            overlap = start < e and end > s
            if inside:
                mask[k] = 1
                break
            if overlap:
                raise ChatTemplateError(
                    f"token {k} ({rendered.text[start:end]!r}) straddles the border of an assistant turn "
                    f"(characters {s}..{e}); this tokenizer merges across turns"
                )
    return ids, mask


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i in added)
    return ids


def _align(row: list[int], ids: list[int], mask: list[int], special: set[int], where: str) -> list[int]:
    """Carry ``mask`` (over tokenizer ``ids``) onto the processor's ``row`` (ids with images expanded)."""
    out = [0] * len(row)
    i = 0
    for j, token in enumerate(row):
        if i < len(ids) and token == ids[i]:
            out[j] = mask[i]
            i += 1
        elif token not in special:
            raise ChatTemplateError(
                f"{where}: the processor produced token {token} at position {j} that the tokenizer did not "
                "(only image tokens may be inserted); cannot align the assistant mask"
            )
    if i != len(ids):
        raise ChatTemplateError(f"{where}: only {i} of {len(ids)} text tokens found in the processor output")
    if sum(out) != sum(mask):
        raise ChatTemplateError(f"{where}: assistant token count changed in the processor output")
    return out


def encode_conversations(
    processor: Any,
    conversations: list[Conversation],
    model_type: str | None = None,
    max_length: int | None = None,
    names: list[str] | None = None,
    fold_system: bool | None = None,
) -> dict[str, torch.Tensor]:
    """Batch of conversations → right-padded model inputs plus ``labels`` (-100 off assistant tokens).

    Returns the processor's tensors (``input_ids``, ``attention_mask``, ``pixel_values``,
    ``image_grid_thw``, ... whatever the family uses) and ``labels``; ``labels != -100`` is the
    assistant mask. ``names`` label samples in errors (e.g. dataset sample ids). The family (system
    folding, image nesting) comes from ``model_type``, else from the processor's class.
    """
    if not conversations:
        raise ValueError("encode_conversations needs at least one conversation")
    names = names or [f"conversation {i}" for i in range(len(conversations))]
    family = family_of(model_type, processor)
    fold = family.fold_system if fold_system is None else fold_system
    rendered = []
    for conv, name in zip(conversations, names, strict=True):
        try:
            rendered.append(render_conversation(processor, conv, fold))
        except DataError as e:
            raise type(e)(f"{name}: {e}") from None
    tokenizer = processor.tokenizer
    token_masks = [assistant_token_mask(tokenizer, r) for r in rendered]

    texts = [r.text for r in rendered]
    kwargs: dict[str, Any] = dict(text=texts, padding=True, padding_side="right", return_tensors="pt",
                                  add_special_tokens=False)
    if any(r.images for r in rendered):
        kwargs["images"] = family.processor_images([r.images for r in rendered])
    batch = dict(processor(**kwargs))

    special = _special_ids(tokenizer)
    input_ids, attention = batch["input_ids"], batch["attention_mask"]
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for b, ((ids, mask), name) in enumerate(zip(token_masks, names, strict=True)):
        length = int(attention[b].sum())
        if max_length is not None and length > max_length:
            raise DataError(f"{name}: {length} tokens exceed data.max_length={max_length}")
        row = input_ids[b, :length].tolist()
        row_mask = _align(row, ids, mask, special, name)
        keep = torch.tensor(row_mask, dtype=torch.bool)
        labels[b, :length][keep] = input_ids[b, :length][keep]
    batch["labels"] = labels
    return batch


def assistant_texts(processor: Any, batch: dict[str, torch.Tensor]) -> list[list[str]]:
    """Decode each row's runs of assistant tokens (one string per assistant turn) — for checks and tests."""
    out = []
    for row_ids, row_labels in zip(batch["input_ids"].tolist(), batch["labels"].tolist(), strict=True):
        runs: list[list[int]] = []
        previous = False
        for token, label in zip(row_ids, row_labels, strict=True):
            on = label != IGNORE_INDEX
            if on and not previous:
                runs.append([])
            if on:
                runs[-1].append(token)
            previous = on
        out.append([processor.tokenizer.decode(r, skip_special_tokens=False) for r in runs])
    return out



def pixel_digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (one image's processed pixels): the image identity shared by the vision
    cache and the prefix cache, so an entry one stored is found by the other's key."""
    data = t.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    return hashlib.sha256(data.contiguous().view(torch.uint8).numpy()).hexdigest()

# ----------------------------------------------------------------------------- batching
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


def mllama_cross_attention_mask(streams: list[list[int]], tile_masks: list[torch.Tensor | None],
                                pixel_values: list[torch.Tensor | None], image_token_id: int, offsets: list[int],
                                width: int, slots: int) -> torch.Tensor:
    """Mllama's ``cross_attention_mask`` ``(B, width, slots, tiles)`` for a batch of token streams,
    rebuilt with the processor's own rule (each text token attends to the images before it): row ``b``
    holds ``streams[b]`` at ``offsets[b]``, with its images' ``aspect_ratio_mask`` ``tile_masks[b]``
    (``(1, images, tiles)``; None for a row without images). How ``TurnTokenizer`` collates segments."""
    from transformers.models.mllama.processing_mllama import (
        convert_sparse_cross_attention_mask_to_dense,
        get_cross_attention_token_mask,
    )

    tiles = int(next(t for t in pixel_values if t is not None).shape[2])
    out = torch.zeros((len(streams), width, slots, tiles), dtype=torch.long)
    for b, ids in enumerate(streams):
        masks = tile_masks[b]
        if masks is None:
            continue
        n = len(ids)
        sparse = get_cross_attention_token_mask(ids, image_token_id)
        num_tiles = [int(x) for x in masks[0].sum(-1).tolist()]
        dense = convert_sparse_cross_attention_mask_to_dense([sparse], [num_tiles], tiles, n)
        out[b, offsets[b] : offsets[b] + n, : dense.shape[2]] = torch.from_numpy(dense[0])
    return out
