"""Model families: everything that differs between the VLM families we run, in one adapter each.

Every place that turns a conversation into tokens (``models/encode.py``), samples tokens
(``models/sampling.py``), caches image features (``agents/vision_cache.py``) or freezes the vision tower
(``train/common.py``) asks the :class:`Family` of the model instead of testing ``model_type`` itself:

======================  =======================================================================
``fold_system``         the system text goes into the first user turn (Mllama: its chat template
                        refuses a system message next to images)
``nested_images``       the processor takes one image list per sample (Idefics3, SmolVLM, Mllama);
                        Qwen takes one flat list for the whole batch
``processor_resizes``   the image processor's own ``size`` bounds set the image size (Qwen: it resizes
                        to multiples of patch * merge); other families are downscaled before it
``vision_features``     how ``VisionCache`` hands cached image features back: ``"qwen"``
                        (``mm_encoder_outputs``, forward and generate), ``"mllama"``
                        (``cross_attention_states``, forward only) or None (no cache)
``vision_modules``      module names of the vision tower and its projector (weights that make the
                        image features: frozen with ``freeze_vision``, watched by the vision cache)
======================  =======================================================================

Rules that read the model's config rather than its family (end-of-turn ids, banned placeholder ids)
are the functions :func:`eos_token_ids` and :func:`banned_token_ids`; the Mllama cross-attention fix
(``models/mllama_mask.py``) and the Qwen vision speed-ups (``models/qwen_vision.py``) are
applied through :meth:`Family.prepare_model`.
A model type we do not know gets the generic adapter (no folding, flat images, no vision cache),
which is what every code path did for unknown families before the adapters existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Module names of vision towers and their projectors across families (the union of the adapters'
# ``vision_modules`` plus the names other HF families use): ``train/common.py``'s ``freeze_vision`` and
# the vision cache match parameter/module names against it.
VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model", "vision_encoder", "multi_modal_projector", "connector")

# Config attributes that hold image/video placeholder token ids (per family, whichever exists).
PLACEHOLDER_CONFIG_KEYS = ("image_token_id", "video_token_id", "image_token_index")


@dataclass(frozen=True)
class Family:
    """One model family's rules (see the module docstring for what each field means)."""

    name: str
    fold_system: bool = False
    nested_images: bool = False
    processor_resizes: bool = False
    vision_features: str | None = None
    vision_modules: tuple[str, ...] = VISION_MODULE_NAMES

    def processor_images(self, images_per_sample: list[list[Any]]) -> list[Any]:
        """The ``images`` argument of one processor call over a batch: nested or flat."""
        if self.nested_images:
            return [list(images) for images in images_per_sample]
        return [image for images in images_per_sample for image in images]

    def set_pixel_bounds(self, processor: Any, min_pixels: int | None, max_pixels: int | None) -> bool:
        """Apply ``min_pixels``/``max_pixels`` to a processor that resizes itself (Qwen); True when it
        did, False when images must be downscaled before the processor instead."""
        if not self.processor_resizes:
            return False
        if min_pixels or max_pixels:
            ip = processor.image_processor
            size = dict(ip.size)
            if min_pixels:
                size["shortest_edge"] = min_pixels
            if max_pixels:
                size["longest_edge"] = max_pixels
            ip.size = size
        return True

    def prepare_model(self, model: Any) -> Any:
        """Family fixes a model needs before any forward pass, training or sampling (Mllama: the
        cross-attention row mask; Qwen: the vision tower without per-image loops, ``models/qwen_vision.py``)."""
        if self.name == "mllama":
            from spatialrl.models.mllama_mask import mask_cross_attention_rows

            mask_cross_attention_rows(model)
        elif self.vision_features == "qwen":
            from spatialrl.models.qwen_vision import speed_up_vision

            speed_up_vision(model)
        return model


_QWEN = dict(processor_resizes=True, vision_features="qwen", vision_modules=("visual",))
_IDEFICS = dict(nested_images=True, vision_modules=("vision_model", "connector"))

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen2_vl", **_QWEN),
        Family("qwen2_5_vl", **_QWEN),
        Family("qwen3_vl", **_QWEN),
        Family("qwen3_vl_moe", **_QWEN),
        Family("idefics3", **_IDEFICS),
        Family("smolvlm", **_IDEFICS),
        Family("mllama", fold_system=True, nested_images=True, vision_features="mllama",
               vision_modules=("vision_model", "multi_modal_projector")),
    )
}
QWEN_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.vision_features == "qwen")
NESTED_IMAGE_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.nested_images)


def family_of(model_type: str | None = None, processor: Any = None) -> Family:
    """The adapter of ``model_type`` (``config.model_type``); without one, of the family named by the
    processor's class (``MllamaProcessor``, ``NoVideoQwen2_5_VLProcessor``, ...); else the generic one."""
    if model_type:
        return FAMILIES.get(model_type, Family(model_type))
    if processor is not None:
        cls = type(processor).__name__.lower().replace("_", "")  # Qwen2_5_VLProcessor, NoVideoQwen2VLProcessor
        for name in sorted(FAMILIES, key=len, reverse=True):  # qwen3_vl_moe before qwen3_vl
            if name.replace("_", "") in cls:
                return FAMILIES[name]
    return Family(model_type or "")


def model_family(model: Any) -> Family:
    """The adapter of a (possibly wrapped) model, from its ``config.model_type``."""
    return family_of(getattr(getattr(model, "config", None), "model_type", None))


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """End-of-turn ids: the model's generation config, else the tokenizer's eos (sorted, unique)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return sorted(set(eos if isinstance(eos, list) else [eos]))


def banned_token_ids(model: Any, eos_ids: list[int]) -> list[int]:
    """Image/video placeholder ids (never sampled: one in an answer would make the next prompt's
    placeholder count disagree with its images); an id that is also an eos stays allowed."""
    cfg = model.config
    ids = {getattr(cfg, k, None) for k in PLACEHOLDER_CONFIG_KEYS}
    return sorted(t for t in ids if isinstance(t, int) and t not in eos_ids)


def pad_token_id(tokenizer: Any, eos_ids: list[int | None]) -> int:
    """The padding id: the tokenizer's pad token, else the smallest eos id, else 0 (padding is masked
    out everywhere; the id only has to be a valid token)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    known = [e for e in eos_ids if e is not None]
    return pad if pad is not None else min(known) if known else 0
