"""Token-in-token-out records of multi-turn rollouts, and their collation into model inputs.

A rollout is recorded as the exact token stream the model read and wrote, never re-tokenised from
text (verl's agent loop, ``STYLE.md`` §5): a :class:`Segment` starts from the tokenised prompt and is
append-only — each turn adds the sampled token ids (mask 1, with their sampling log-probs) and then the
env's answer as the chat template's *increment* (mask 0, log-prob 0). The trainer scores the very
same ids, so what it optimises is what was sampled.

The increment of a turn is found by rendering with the processor's own chat template:

* ``G`` = conversation so far with the generation prompt (what the model was answering),
* ``A`` = the same plus the assistant message, no generation prompt,
* ``B`` = the next conversation (``A``'s messages plus the env's new messages) with the generation prompt.

``A[len(G):]`` is the assistant text plus the template's end-of-turn suffix; the part of that suffix the
model did not emit itself (e.g. ``<|im_end|>`` when generation hit the token budget, and the ``\\n``
after it) is closed with env tokens, followed by ``B[len(A):]`` tokenised with its images. A prompter
that does not extend the previous conversation (a fresh prompt after a correct V-IRL step, TVR's
action-only memory) starts a new segment of the same trajectory.

``tests/rl/test_trajectory.py`` checks, per model family, that a segment equals the processor's
tokenisation of the whole conversation, and that a teacher-forced forward over the collated segment
reproduces the sampling log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from spatialrl.agents.base import Conversation
from spatialrl.errors import DataError
from spatialrl.models.encode import (
    encode_text,
    mllama_cross_attention_mask,
    prepare_messages,
    render_messages,
)
from spatialrl.models.family import family_of, pad_token_id

# Processor outputs that are not image tensors: the token stream itself and the per-token extras.
_TOKEN_KEYS = ("input_ids", "attention_mask")
_RECOMPUTED_KEYS = ("cross_attention_mask",)  # Mllama: rebuilt from the whole stream at collation
_PER_TOKEN_KEYS = ("mm_token_type_ids", "token_type_ids")  # one value per token (0 on text tokens)


@dataclass
class VisionGroup:
    """Image tensors from one processor call (a prompt or an increment), and where its text starts."""

    position: int
    tensors: dict[str, torch.Tensor]


@dataclass
class Segment:
    """One append-only token stream: ``prompt_ids`` then ``response_ids`` (policy and env tokens).

    ``response_mask[i]`` is 1 for tokens the policy sampled and 0 for tokens the env/template inserted;
    ``response_logprobs[i]`` is the sampling log-prob of a policy token (0.0 for env tokens);
    ``response_turns[i]`` is the trajectory turn a policy token belongs to (-1 for env tokens).
    ``token_fields`` holds per-token processor outputs over the whole stream (Qwen's
    ``mm_token_type_ids``); ``vision`` the image tensors in stream order.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    response_turns: list[int] = field(default_factory=list)
    token_fields: dict[str, list[int]] = field(default_factory=dict)
    vision: list[VisionGroup] = field(default_factory=list)
    messages: Conversation = field(default_factory=list)  # the conversation rendered so far (no answer yet)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def fork(self) -> Segment:
        """An independent copy to append to (lists copied; image tensors, immutable here, shared) — how
        G samples of one prompt start from the same tokens."""
        return Segment(list(self.prompt_ids), list(self.response_ids), list(self.response_mask),
                       list(self.response_logprobs), list(self.response_turns),
                       {k: list(v) for k, v in self.token_fields.items()}, list(self.vision), list(self.messages))

    def turn_span(self, turn: int) -> tuple[int, int]:
        """``[start, end)`` positions (in :attr:`ids`) of the policy tokens of ``turn``."""
        pos = [i for i, t in enumerate(self.response_turns) if t == turn]
        if not pos:
            raise KeyError(f"turn {turn} has no policy tokens in this segment")
        off = len(self.prompt_ids)
        return off + pos[0], off + pos[-1] + 1


@dataclass
class Trajectory:
    """One episode as token segments plus the env's per-turn outputs (names kept end to end)."""

    episode_id: str
    group: str  # trajectories of the same task share a group (GRPO advantages are relative within it)
    category: str = ""
    segments: list[Segment] = field(default_factory=list)
    turn_segment: list[int] = field(default_factory=list)  # segment index of each turn
    turn_rewards: list[float] = field(default_factory=list)
    turn_records: list[dict[str, Any]] = field(default_factory=list)  # info["record"] of each step
    responses: list[str] = field(default_factory=list)
    episode: dict[str, Any] | None = None  # info["episode"] of the final step
    done: bool = False  # the env ended the episode (terminated or truncated)
    cut: str | None = None  # why the trainer stopped it early (token budget, turn cap), if it did

    @property
    def num_turns(self) -> int:
        return len(self.turn_rewards)

    @property
    def total_reward(self) -> float:
        return float(sum(self.turn_rewards))

    @property
    def success(self) -> bool:
        return bool((self.episode or {}).get("success", False))


# ----------------------------------------------------------------------------- message helpers
def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("role") != b.get("role"):
        return False
    pa, pb = _parts(a), _parts(b)
    if len(pa) != len(pb):
        return False
    for x, y in zip(pa, pb, strict=True):
        if x.get("type") != y.get("type"):
            return False
        if x.get("type") == "image":
            if x["image"] is not y["image"] and not np.array_equal(np.asarray(x["image"]), np.asarray(y["image"])):
                return False
        elif x.get("text") != y.get("text"):
            return False
    return True


def extends(previous: Conversation, new: Conversation) -> bool:
    """Whether ``new`` = ``previous`` + one assistant message + at least one non-assistant message."""
    n = len(previous)
    if len(new) < n + 2 or new[n].get("role") != "assistant":
        return False
    if any(m.get("role") == "assistant" for m in new[n + 1 :]):
        return False
    return all(_same_message(a, b) for a, b in zip(previous, new[:n], strict=False))


def _assistant_text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in _parts(message) if p.get("type") == "text")


# ----------------------------------------------------------------------------- tokenizer
class TurnTokenizer:
    """Builds and extends :class:`Segment` records with one processor (any supported family).

    Rendering and encoding are the model-I/O layer's (``models/encode.py``: the same image conversion,
    system folding and processor call as ``HFPolicy``), ``add_special_tokens=False`` everywhere.
    """

    def __init__(self, processor: Any, model_type: str, fold_system: bool | None = None):
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.model_type = model_type
        self.family = family_of(model_type, processor)
        self.nested_images = self.family.nested_images
        self.fold_system = self.family.fold_system if fold_system is None else fold_system
        self.pad_id = pad_token_id(self.tokenizer, [getattr(self.tokenizer, "eos_token_id", None)])
        self.image_token_id = getattr(processor, "image_token_id", None)

    # -- rendering
    def render(self, conversation: Conversation, add_generation_prompt: bool) -> tuple[str, list[Any]]:
        """Chat-template text (image placeholders unexpanded) and the conversation's PIL images."""
        messages, images = prepare_messages(conversation, self.fold_system)
        return render_messages(self.processor, messages, add_generation_prompt), images

    def encode(self, text: str, images: list[Any], continuation: bool = True) -> dict[str, torch.Tensor]:
        """Processor output for one text piece (batch of 1), images expanded, no added specials; a BOS
        the processor inserted into a ``continuation`` is dropped (``models.encode.encode_text``)."""
        return encode_text(self.processor, self.family, text, images, continuation=continuation)

    def _append(self, seg: Segment, enc: dict[str, torch.Tensor], prompt: bool) -> None:
        ids = enc["input_ids"][0].tolist()
        seq = len(ids)
        start = len(seg)
        vision = {}
        for key, value in enc.items():
            if key in _TOKEN_KEYS or key in _RECOMPUTED_KEYS:
                continue
            if key in _PER_TOKEN_KEYS:
                seg.token_fields.setdefault(key, [0] * start).extend(value[0].tolist())
            else:
                vision[key] = value
        for values in seg.token_fields.values():  # fields this piece lacks: text tokens are 0
            values.extend([0] * (start + seq - len(values)))
        if vision:
            seg.vision.append(VisionGroup(position=start, tensors=vision))
        if prompt:
            seg.prompt_ids.extend(ids)
        else:
            seg.response_ids.extend(ids)
            seg.response_mask.extend([0] * seq)
            seg.response_logprobs.extend([0.0] * seq)
            seg.response_turns.extend([-1] * seq)

    # -- building
    def start(self, conversation: Conversation) -> Segment:
        """A new segment: the tokenised prompt of ``conversation`` with the generation prompt."""
        text, images = self.render(conversation, add_generation_prompt=True)
        seg = Segment(prompt_ids=[], messages=list(conversation))
        self._append(seg, self.encode(text, images, continuation=False), prompt=True)
        return seg

    def add_policy(self, seg: Segment, token_ids: list[int], logprobs: list[float], turn: int) -> None:
        """Append one turn's sampled tokens (mask 1) with their sampling log-probs."""
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} sampled tokens but {len(logprobs)} log-probs")
        seg.response_ids.extend(token_ids)
        seg.response_mask.extend([1] * len(token_ids))
        seg.response_logprobs.extend(float(x) for x in logprobs)
        seg.response_turns.extend([turn] * len(token_ids))
        for values in seg.token_fields.values():
            values.extend([0] * len(token_ids))

    def extend(self, seg: Segment, generated_ids: list[int], conversation: Conversation) -> bool:
        """Append the env's answer as the template increment; False when ``conversation`` does not
        extend the segment's conversation (the caller then starts a new segment)."""
        if not extends(seg.messages, conversation):
            return False
        n = len(seg.messages)
        before, _ = self.render(seg.messages, add_generation_prompt=True)
        through, _ = self.render(conversation[: n + 1], add_generation_prompt=False)
        after, _ = self.render(conversation, add_generation_prompt=True)
        answer = _assistant_text(conversation[n])
        if not (through.startswith(before) and after.startswith(through)):
            raise DataError("chat template does not render conversations incrementally (earlier turns change "
                            "when later ones are added); token-in-token-out rollouts need one that does")
        rendered_answer = through[len(before):]
        if not rendered_answer.startswith(answer):
            raise DataError("chat template rewrites the assistant's text in the history; token-in-token-out "
                            f"rollouts need it verbatim (rendered {rendered_answer[:60]!r})")
        suffix = rendered_answer[len(answer):]
        suffix_ids = self.tokenizer(suffix, add_special_tokens=False)["input_ids"] if suffix else []
        # The model may have emitted the start of the suffix itself (its end-of-turn token).
        overlap = 0
        for k in range(min(len(suffix_ids), len(generated_ids)), 0, -1):
            if generated_ids[-k:] == suffix_ids[:k]:
                overlap = k
                break
        closing = suffix[len(self.tokenizer.decode(suffix_ids[:overlap], skip_special_tokens=False)):] if overlap else suffix
        _, new_images = prepare_messages(conversation[n + 1 :], False)
        self._append(seg, self.encode(closing + after[len(through):], new_images), prompt=False)
        seg.messages = list(conversation)
        return True

    # -- collation
    def collate(
        self,
        views: list[tuple[Segment, int]],
        padding_side: str = "right",
        device: torch.device | str | None = None,
        width: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Model inputs for a batch of segment prefixes ``(segment, length)``, padded on ``padding_side``
        to the longest prefix, or to ``width`` when that is larger (fixed shapes for a compiled decoder).

        Image tensors of groups that start inside the prefix are batched in the family's layout:
        flattened patches concatenated (Qwen: ``pixel_values`` + ``image_grid_thw``) or one image slot
        per sample padded with zero images (Idefics3/SmolVLM/Mllama, whose models skip all-zero slots).
        Mllama's ``cross_attention_mask`` is rebuilt from each stream with the processor's own rule.
        """
        lengths = [n for _, n in views]
        width = max(max(lengths), width or 0)
        batch_ids = torch.full((len(views), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(views), width), dtype=torch.long)
        fields = sorted({k for seg, _ in views for k in seg.token_fields})
        token_fields = {k: torch.zeros((len(views), width), dtype=torch.long) for k in fields}
        offsets = []
        for b, (seg, n) in enumerate(views):
            if n > len(seg) or n < 1:
                raise ValueError(f"prefix length {n} outside a segment of {len(seg)} tokens")
            off = width - n if padding_side == "left" else 0
            offsets.append(off)
            batch_ids[b, off : off + n] = torch.tensor(seg.ids[:n])
            attention[b, off : off + n] = 1
            for k in fields:
                values = seg.token_fields.get(k)
                if values is not None:
                    token_fields[k][b, off : off + n] = torch.tensor(values[:n])
        out: dict[str, torch.Tensor] = {"input_ids": batch_ids, "attention_mask": attention, **token_fields}
        groups = [[g for g in seg.vision if g.position < n] for seg, n in views]
        if any(groups):
            out.update(self._collate_vision(views, groups, offsets, width))
        if device is not None:
            out = {k: v.to(device) for k, v in out.items()}
        return out

    def _collate_vision(self, views, groups, offsets, width) -> dict[str, torch.Tensor]:
        keys = sorted({k for gs in groups for g in gs for k in g.tensors})
        if "image_grid_thw" in keys:  # flattened patches: concatenate in stream order
            return {k: torch.cat([g.tensors[k] for gs in groups for g in gs if k in g.tensors], dim=0) for k in keys}
        per_sample = {k: [torch.cat([g.tensors[k] for g in gs], dim=1) if gs else None for gs in groups] for k in keys}
        slots = max(int(t.shape[1]) for t in per_sample[keys[0]] if t is not None)
        out = {}
        for k in keys:
            ref = next(t for t in per_sample[k] if t is not None)
            batch = torch.zeros((len(views), slots, *ref.shape[2:]), dtype=ref.dtype)
            for b, t in enumerate(per_sample[k]):
                if t is not None:
                    batch[b, : t.shape[1]] = t[0]
            out[k] = batch
        if "aspect_ratio_ids" in keys:
            out["cross_attention_mask"] = mllama_cross_attention_mask(
                [seg.ids[:n] for seg, n in views], per_sample["aspect_ratio_mask"], per_sample["pixel_values"],
                self.image_token_id, offsets, width, slots)
        return out
