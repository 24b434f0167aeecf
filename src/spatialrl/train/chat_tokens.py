"""Conversations → model inputs with a mask that is 1 exactly on the assistant's tokens.

Used by SFT (loss only on what the assistant wrote) and by RL to score conversations. The mask is
derived from the processor's own chat template, so it works for any family without special-casing:

1. **Render** the conversation to text with the processor's chat template (images as the family's
   placeholder). The character span of assistant turn *i* is found by rendering the conversation up to
   turn *i* twice: ``messages[:i]`` with the generation prompt (everything before the answer) and
   ``messages[:i+1]`` (through the end-of-turn marker). The span is the difference, trailing
   whitespace after the end-of-turn marker excluded — the content plus the end-of-turn token, which
   the model must learn to emit to stop. A template that re-renders earlier turns differently when
   later ones exist (e.g. stripping old reasoning) breaks this prefix property and is reported.
2. **Tokenise** the text with the tokenizer alone (offsets give each token's characters): a token is
   an assistant token iff its characters lie inside an assistant span; a token straddling a span
   border is an error (the training tokens would differ from what generation produces).
3. **Expand** with the processor (one call for the whole batch, as inference does): it replaces each
   image placeholder by the image's tokens and otherwise tokenises identically. Walking the processor
   ids and the tokenizer ids side by side, every processor id that is not the next tokenizer id is an
   inserted image token (checked: it must be a special token), so the mask carries over exactly.

Prompts are prepared exactly as :class:`spatialrl.agents.hf.HFPolicy` prepares them (same image
conversion, same system folding, ``add_special_tokens=False``), and the tests check that the prompt
part of an encoded conversation equals ``HFPolicy.prompt_inputs`` token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from spatialrl.agents.base import Conversation
from spatialrl.agents.hf import NESTED_IMAGE_FAMILIES, to_pil
from spatialrl.errors import DataError

IGNORE_INDEX = -100  # label value the loss skips (the torch / transformers convention)


class ChatTemplateError(DataError):
    """The processor's chat template cannot be masked exactly (non-incremental or merging tokens)."""


@dataclass
class RenderedConversation:
    """A conversation as chat-template text: image placeholders unexpanded, images in order, and the
    character spans ``[start, end)`` of every assistant turn (content + end-of-turn token)."""

    text: str
    images: list[Image.Image]
    assistant_spans: list[tuple[int, int]]


def prepare_messages(
    conversation: Conversation, fold_system: bool = False
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """Template-ready messages (image parts reduced to ``{"type": "image"}``) and the PIL images in order.

    ``fold_system`` merges the system text into the first user turn (Mllama's template refuses a system
    message beside images) — the same rule ``HFPolicy`` applies.
    """
    messages: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    system_text = ""
    for index, message in enumerate(conversation):
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise DataError(f"message {index}: unknown role {role!r} (expected system, user or assistant)")
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out: list[dict[str, Any]] = []
        for part in parts:
            kind = part.get("type")
            if kind == "image":
                if role == "assistant":
                    raise DataError(f"message {index}: assistant turns cannot hold images")
                images.append(to_pil(part["image"]))
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


def default_fold_system(processor: Any, model_type: str | None = None) -> bool:
    """Whether the family needs the system prompt folded into the first user turn (as HFPolicy does)."""
    return (model_type or "") == "mllama" or type(processor).__name__.lower().startswith("mllama")


def render_conversation(
    processor: Any, conversation: Conversation, fold_system: bool = False
) -> RenderedConversation:
    """Chat-template text of ``conversation`` and the character spans of its assistant turns."""
    messages, images = prepare_messages(conversation, fold_system)

    def render(msgs: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return processor.apply_chat_template(msgs, add_generation_prompt=add_generation_prompt, tokenize=False)

    text = render(messages, False)
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
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
    assistant mask. ``names`` label samples in errors (e.g. dataset sample ids).
    """
    if not conversations:
        raise ValueError("encode_conversations needs at least one conversation")
    names = names or [f"conversation {i}" for i in range(len(conversations))]
    fold = default_fold_system(processor, model_type) if fold_system is None else fold_system
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
        if _wants_nested_images(processor, model_type):
            kwargs["images"] = [r.images for r in rendered]
        else:
            kwargs["images"] = [im for r in rendered for im in r.images]
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


def _wants_nested_images(processor: Any, model_type: str | None) -> bool:
    """Processors of the Idefics3/SmolVLM/Mllama families take one image list per sample (Qwen: one flat list)."""
    if model_type:
        return model_type in NESTED_IMAGE_FAMILIES
    name = type(processor).__name__.lower()
    return any(family in name for family in NESTED_IMAGE_FAMILIES)


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
