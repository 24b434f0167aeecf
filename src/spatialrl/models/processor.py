"""Processors without the video slot, and one loader for any image-text-to-text checkpoint.

Why subclasses: the stock Qwen2-VL / Qwen2.5-VL / Qwen3-VL / SmolVLM processors take a video
sub-processor, which needs torchvision — and torchvision cannot be imported beside the CPU torch we
use (``reference/feasibility.md`` B: ``operator torchvision::nms does not exist``). ``ProcessorMixin``
reads a processor's parts from its ``__init__`` signature, so a subclass whose ``__init__`` has only
``image_processor`` and ``tokenizer`` drops the video slot; everything image-related is inherited.
We never feed videos, so nothing is lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import transformers as T
from transformers.processing_utils import ProcessorMixin

from spatialrl.errors import DataError
from spatialrl.io import read_json


def _token_id(tokenizer: Any, token: str) -> int:
    return tokenizer.convert_tokens_to_ids(token)


class _QwenNoVideo:
    """Shared ``__init__`` of the Qwen no-video processors (image/video token attributes, then the mixin)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = _token_id(tokenizer, self.image_token)
        self.video_token_id = _token_id(tokenizer, self.video_token)
        self.vision_start_token = "<|vision_start|>"
        self.vision_end_token = "<|vision_end|>"
        self.vision_start_token_id = _token_id(tokenizer, self.vision_start_token)
        self.vision_end_token_id = _token_id(tokenizer, self.vision_end_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)


class NoVideoQwen2VLProcessor(_QwenNoVideo, T.Qwen2VLProcessor):
    """Qwen2-VL processor without the torchvision-only video sub-processor."""


class NoVideoQwen2_5_VLProcessor(_QwenNoVideo, T.Qwen2_5_VLProcessor):
    """Qwen2.5-VL processor without the video sub-processor (the built-in model's processor)."""


class NoVideoQwen3VLProcessor(_QwenNoVideo, T.Qwen3VLProcessor):
    """Qwen3-VL processor without the video sub-processor."""


class NoVideoSmolVLMProcessor(T.SmolVLMProcessor):
    """SmolVLM processor without the video sub-processor; its chat template path skips the video
    defaults the stock class reads from ``self.video_processor``."""

    def __init__(self, image_processor=None, tokenizer=None, image_seq_len: int = 169, chat_template=None, **kwargs):
        self.fake_image_token = getattr(tokenizer, "fake_image_token", "<fake_token_around_image>")
        self.image_token = getattr(tokenizer, "image_token", "<image>")
        self.image_token_id = _token_id(tokenizer, self.image_token)
        self.end_of_utterance_token = getattr(tokenizer, "end_of_utterance_token", "<end_of_utterance>")
        self.global_image_token = getattr(tokenizer, "global_image_token", "<global-img>")
        self.image_seq_len = image_seq_len
        self.video_token = getattr(tokenizer, "video_token", "<video>")
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def apply_chat_template(self, conversation, chat_template=None, **kwargs):
        return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)


# Our classes by name (the name is what ``save_pretrained`` writes as ``processor_class``).
NO_VIDEO_PROCESSORS: dict[str, type[ProcessorMixin]] = {
    cls.__name__: cls
    for cls in (NoVideoQwen2VLProcessor, NoVideoQwen2_5_VLProcessor, NoVideoQwen3VLProcessor, NoVideoSmolVLMProcessor)
}
# model_type -> no-video processor, used when the stock processor of a real checkpoint cannot be built here.
NO_VIDEO_BY_MODEL_TYPE: dict[str, type[ProcessorMixin]] = {
    "qwen2_vl": NoVideoQwen2VLProcessor,
    "qwen2_5_vl": NoVideoQwen2_5_VLProcessor,
    "qwen3_vl": NoVideoQwen3VLProcessor,
    "smolvlm": NoVideoSmolVLMProcessor,
}


def model_type_of(path: str | Path) -> str:
    """The ``model_type`` field of a checkpoint's ``config.json`` (names the architecture family)."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise DataError(f"{cfg}: missing; {path} is not a Hugging Face model folder")
    model_type = read_json(cfg).get("model_type")
    if not model_type:
        raise DataError(f"{cfg}: field 'model_type' is missing")
    return model_type


def load_processor(path: str | Path) -> ProcessorMixin:
    """Load the processor saved beside a model, whatever its family.

    Order: our no-video class when ``processor_config.json`` names one (built-in and tiny models);
    else ``AutoProcessor`` (real checkpoints on machines with torchvision); else, when that fails or
    returns only a tokenizer, the no-video subclass of the family named by ``config.json``.
    """
    path = Path(path)
    proc_cfg = path / "processor_config.json"
    if proc_cfg.is_file():
        name = read_json(proc_cfg).get("processor_class")
        if name in NO_VIDEO_PROCESSORS:
            return NO_VIDEO_PROCESSORS[name].from_pretrained(path, local_files_only=True)
    error: Exception | None = None
    try:
        proc = T.AutoProcessor.from_pretrained(path, local_files_only=True)
        if isinstance(proc, ProcessorMixin) and getattr(proc, "image_processor", None) is not None:
            return proc
    except (ImportError, AttributeError, TypeError, ValueError, OSError) as e:  # torchvision-only video parts
        error = e
    fallback = NO_VIDEO_BY_MODEL_TYPE.get(model_type_of(path))
    if fallback is None:
        raise DataError(f"{path}: cannot build an image processor for this model ({error or 'tokenizer only'})")
    return fallback.from_pretrained(path, local_files_only=True)
