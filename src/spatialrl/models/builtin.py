"""The built-in small VLM: presets, ``init`` and the registry of shipped models.

Architecture: Qwen2.5-VL, scaled down. Why Qwen2.5-VL rather than Qwen3-VL: both build offline and
run here (``models/tiny.py``), but Qwen2.5-VL is what TRL's VLM trainers and vLLM have supported
longest, its 14 px patches with a 2x2 merge give one token per 28x28 pixels (simple image-token
arithmetic), and it has no DeepStack side path, so a small model spends its parameters in the
decoder. The processor is our no-video subclass; the tokenizer a byte-level BPE trained on our
prompt corpora (``models/tokenizer.py``).

Image token counts (one token per 28x28 pixels after resizing into ``[min_pixels, max_pixels]``):

=============  ==========  ===================  =================  ====================
preset         max_pixels  448x448 V-IRL grid   640x360 TVR frame  2405x2405 V-IRL grid
=============  ==========  ===================  =================  ====================
tiny           112x112     16                   15                 16
small          224x224     64                   60                 64
=============  ==========  ===================  =================  ====================

(``spatialrl model info PATH`` prints these for any model; ``tests/models`` checks them.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spatialrl.errors import DataError
from spatialrl.io import atomic_folder, atomic_write_json

WEIGHTS_DIR = Path(__file__).parent / "weights"
META_FILE = "spatialrl_model.json"


@dataclass(frozen=True)
class Preset:
    """Sizes of one built-in model. Text head_dim = hidden / heads; ``mrope_section`` sums to head_dim/2."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    mrope_section: tuple[int, int, int]
    vision_hidden: int
    vision_intermediate: int
    vision_depth: int
    vision_heads: int
    fullatt_blocks: tuple[int, ...]
    min_pixels: int
    max_pixels: int


PRESETS: dict[str, Preset] = {
    # < 1M parameters: every test and CPU smoke run.
    "tiny": Preset(vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                   num_kv_heads=2, mrope_section=(2, 3, 3), vision_hidden=32, vision_intermediate=64,
                   vision_depth=2, vision_heads=2, fullatt_blocks=(1,), min_pixels=56 * 56,
                   max_pixels=112 * 112),
    # 20-60M parameters: trained on the GPU machine, fast enough to evaluate on a CPU.
    "small": Preset(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8,
                    num_kv_heads=4, mrope_section=(8, 12, 12), vision_hidden=256, vision_intermediate=768,
                    vision_depth=6, vision_heads=4, fullatt_blocks=(2, 5), min_pixels=56 * 56,
                    max_pixels=224 * 224),
}
# builtin:NAME for an untrained preset, built on the fly (deterministic, seed 0).
RANDOM_NAMES = {f"{name}-random": name for name in PRESETS}


def build_model(preset: str, seed: int = 0, sizes: Preset | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """A randomly initialised built-in model: ``(model, processor, metadata)``; same seed, same weights.
    ``sizes`` replaces the named preset's sizes (``model.preset_overrides``; the name is then a label)."""
    import torch
    import transformers as T
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from spatialrl.models.processor import NoVideoQwen2_5_VLProcessor
    from spatialrl.models.tokenizer import (
        QWEN_CHAT_TEMPLATE,
        QWEN_SPECIAL_TOKENS,
        corpus_digest,
        prompt_corpus,
        train_bpe_tokenizer,
    )

    if sizes is None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    p = sizes if sizes is not None else PRESETS[preset]
    texts, sources = prompt_corpus()
    tok = train_bpe_tokenizer(texts, QWEN_SPECIAL_TOKENS, p.vocab_size, QWEN_CHAT_TEMPLATE,
                              eos_token="<|im_end|>", pad_token="<|endoftext|>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    ip = Qwen2VLImageProcessorPil(min_pixels=p.min_pixels, max_pixels=p.max_pixels, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)
    processor = NoVideoQwen2_5_VLProcessor(ip, tok, chat_template=QWEN_CHAT_TEMPLATE)
    head_dim = p.hidden_size // p.num_heads
    assert sum(p.mrope_section) * 2 == head_dim, "mrope_section must sum to head_dim / 2"
    config = T.Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok), hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
            num_hidden_layers=p.num_layers, num_attention_heads=p.num_heads, num_key_value_heads=p.num_kv_heads,
            max_position_embeddings=32768, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": list(p.mrope_section)},
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]),
        vision_config=dict(
            depth=p.vision_depth, hidden_size=p.vision_hidden, intermediate_size=p.vision_intermediate,
            num_heads=p.vision_heads, out_hidden_size=p.hidden_size, patch_size=14, spatial_merge_size=2,
            temporal_patch_size=2, window_size=112, fullatt_block_indexes=list(p.fullatt_blocks)),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = T.Qwen2_5_VLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    meta = {
        "preset": preset, "seed": seed, "architecture": "Qwen2_5_VLForConditionalGeneration",
        "parameters": sum(t.numel() for t in model.parameters()), "preset_sizes": asdict(p),
        "tokenizer_vocab": len(tok), "corpus_sources": sources, "corpus_texts": len(texts),
        "corpus_sha256": corpus_digest(texts),
    }
    return model, processor, meta


def init_model(preset: str, out: str | Path, seed: int = 0, force: bool = False) -> dict[str, Any]:
    """Build a preset and save it to ``out`` (written to a temp folder, then renamed: never half-written)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise DataError(f"{out}: folder exists and is not empty (pass --overwrite to replace it)")
    model, processor, meta = build_model(preset, seed)
    with atomic_folder(out) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        atomic_write_json(tmp / META_FILE, meta)
    return meta


def shipped_models() -> list[str]:
    """Names of trained models shipped inside the package (``models/weights/<name>/``)."""
    if not WEIGHTS_DIR.is_dir():
        return []
    return sorted(d.name for d in WEIGHTS_DIR.iterdir() if (d / "config.json").is_file())


def builtin_names() -> list[str]:
    """Every valid ``builtin:NAME``: shipped models, then the untrained presets."""
    return shipped_models() + sorted(RANDOM_NAMES)


def resolve_builtin(name: str) -> Path | str:
    """The folder of a shipped model, or the preset name of a ``*-random`` model; clear error otherwise."""
    if name in shipped_models():
        return WEIGHTS_DIR / name
    if name in RANDOM_NAMES:
        return RANDOM_NAMES[name]
    raise DataError(f"builtin:{name}: no such built-in model; available: {', '.join(builtin_names())}")


def image_token_counts(processor: Any, sizes: list[tuple[int, int]]) -> dict[str, int]:
    """Placeholder tokens one image of each ``(width, height)`` adds to the prompt, measured through the
    processor itself. (Mllama reads images through cross-attention: one token per image there.)"""
    import numpy as np
    from PIL import Image

    from spatialrl.models.encode import render_messages

    token_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    text = render_messages(processor, [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}],
                           add_generation_prompt=False)
    counts = {}
    for w, h in sizes:
        image = Image.fromarray(np.zeros((h, w, 3), np.uint8))
        ids = processor(text=[text], images=[[image]], return_tensors="np")["input_ids"][0].tolist()
        counts[f"{w}x{h}"] = ids.count(token_id)
    return counts


# ------------------------------------------------------------------------------------- eval settings
# Task options that decide what a trained model sees; a model folder records the values it was trained
# with (``spatialrl_model.json`` → ``eval``) and `spatialrl eval` applies them unless the user overrides.
EVAL_OPTION_KEYS = ("width", "height", "memory", "cot", "target_once", "history_len", "window", "badges",
                    "frames", "grid_size", "mode", "resolution", "intersection_in_text")


def eval_settings_from_dataset(task: str, options: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """The ``eval`` block of a model trained on a dataset built with task ``options``."""
    return {"task": task, "options": {k: options[k] for k in EVAL_OPTION_KEYS if k in options},
            "max_new_tokens": int(max_new_tokens)}


def model_eval_settings(agent: str) -> dict[str, Any] | None:
    """The ``eval`` block recorded in the folder of a ``builtin:NAME`` or ``hf:PATH`` agent (None if none)."""
    import json

    if agent.startswith("builtin:"):
        try:
            folder = resolve_builtin(agent.split(":", 1)[1])
        except DataError:
            return None
        if not isinstance(folder, Path):
            return None
    elif agent.startswith("hf:"):
        folder = Path(agent.split(":", 1)[1])
    else:
        return None
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        return None
    try:
        settings = json.loads(meta_path.read_text(encoding="utf-8")).get("eval")
    except json.JSONDecodeError as e:
        raise DataError(f"{meta_path}: malformed JSON: {e}") from e
    if settings is None:
        return None
    if not isinstance(settings, dict) or not isinstance(settings.get("options", {}), dict) or "task" not in settings:
        raise DataError(f"{meta_path}: field 'eval' must be {{task, options, max_new_tokens}}, got {settings!r}")
    return settings
