"""Tiny, randomly initialised models of every supported VLM family, built offline for tests.

Each builder returns ``(model, processor)`` with a BPE tokenizer trained on the generic corpus, a
hand-written chat template in the family's style and the family's PIL image processor set small, so
``HFPolicy`` can run every family end to end on CPU in well under a second. Configuration gotchas
(``reference/feasibility.md`` B): Qwen ``mrope_section`` sums to head_dim/2; Qwen3-VL uses 16 px
patches; Mllama needs ``max_num_tiles=4`` and ``vision_output_dim = hidden * (len(intermediate
layers) + 1)``; Idefics3 ``image_seq_len = (image_size/patch)^2 / scale_factor^2``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers as T

from spatialrl.models.processor import (
    NoVideoQwen2_5_VLProcessor,
    NoVideoQwen2VLProcessor,
    NoVideoQwen3VLProcessor,
    NoVideoSmolVLMProcessor,
)
from spatialrl.models.tokenizer import (
    GENERIC_CORPUS,
    QWEN_CHAT_TEMPLATE,
    QWEN_SPECIAL_TOKENS,
    train_bpe_tokenizer,
)

VOCAB = 400
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096)


def _qwen_tokenizer():
    tok = train_bpe_tokenizer(GENERIC_CORPUS, QWEN_SPECIAL_TOKENS, VOCAB, QWEN_CHAT_TEMPLATE,
                              eos_token="<|im_end|>", pad_token="<|endoftext|>")
    return tok, {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}


def _qwen_ids(ids: dict[str, int]) -> dict[str, int]:
    return dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def _qwen_text(tok, ids: dict[str, int], **extra: Any) -> dict[str, Any]:
    return dict(TEXT, vocab_size=len(tok), bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"], **extra)


def _qwen_image_processor(patch: int):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    # 112x112 image -> (112/patch)^2 patches -> /4 after the 2x2 merge: 16 tokens for patch 14
    return Qwen2VLImageProcessorPil(min_pixels=(2 * patch) ** 2, max_pixels=(8 * patch) ** 2, patch_size=patch,
                                    merge_size=2, temporal_patch_size=2)


def build_qwen2_vl():
    tok, ids = _qwen_tokenizer()
    proc = NoVideoQwen2VLProcessor(_qwen_image_processor(14), tok, chat_template=QWEN_CHAT_TEMPLATE)
    cfg = T.Qwen2VLConfig(
        text_config=_qwen_text(tok, ids, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                          "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        **_qwen_ids(ids))
    return T.Qwen2VLForConditionalGeneration(cfg), proc


def build_qwen2_5_vl():
    tok, ids = _qwen_tokenizer()
    proc = NoVideoQwen2_5_VLProcessor(_qwen_image_processor(14), tok, chat_template=QWEN_CHAT_TEMPLATE)
    cfg = T.Qwen2_5_VLConfig(
        text_config=_qwen_text(tok, ids, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                          "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[1]),
        **_qwen_ids(ids))
    return T.Qwen2_5_VLForConditionalGeneration(cfg), proc


def build_qwen3_vl():
    tok, ids = _qwen_tokenizer()
    proc = NoVideoQwen3VLProcessor(_qwen_image_processor(16), tok, chat_template=QWEN_CHAT_TEMPLATE)
    cfg = T.Qwen3VLConfig(
        text_config=_qwen_text(tok, ids, head_dim=16, rope_parameters={
            "rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                           deepstack_visual_indexes=[1]),
        **_qwen_ids(ids))
    return T.Qwen3VLForConditionalGeneration(cfg), proc


IDEFICS_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>",
                   "<global-img>"] + [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
IDEFICS_CHAT = ("<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:"
                "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
                "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
                "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
                "{% if add_generation_prompt %}Assistant:{% endif %}")
IDEFICS_IMAGE, IDEFICS_PATCH, IDEFICS_SCALE = 64, 16, 2  # 64 px image, 16 px patches, shuffle 2 -> 4 tokens


def _idefics_parts():
    tok = train_bpe_tokenizer(GENERIC_CORPUS, IDEFICS_SPECIAL, VOCAB, IDEFICS_CHAT, bos_token="<|im_start|>",
                              eos_token="<end_of_utterance>", pad_token="<|endoftext|>")
    ids = {t: tok.convert_tokens_to_ids(t) for t in IDEFICS_SPECIAL}
    text = dict(TEXT, model_type="llama", vocab_size=len(tok), bos_token_id=ids["<|im_start|>"],
                eos_token_id=ids["<end_of_utterance>"], pad_token_id=ids["<|endoftext|>"])
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IDEFICS_IMAGE, patch_size=IDEFICS_PATCH)
    seq_len = (IDEFICS_IMAGE // IDEFICS_PATCH) ** 2 // IDEFICS_SCALE**2
    return tok, ids, text, vision, seq_len


def build_idefics3():
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok, ids, text, vision, seq_len = _idefics_parts()
    ip = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": IDEFICS_IMAGE},
                                   max_image_size={"longest_edge": IDEFICS_IMAGE})
    proc = T.Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=seq_len, chat_template=IDEFICS_CHAT)
    cfg = T.Idefics3Config(text_config=text, vision_config=vision, scale_factor=IDEFICS_SCALE,
                           image_token_id=ids["<image>"], pad_token_id=ids["<|endoftext|>"])
    return T.Idefics3ForConditionalGeneration(cfg), proc


def build_smolvlm():
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    tok, ids, text, vision, seq_len = _idefics_parts()
    ip = SmolVLMImageProcessorPil(do_image_splitting=False, size={"longest_edge": IDEFICS_IMAGE},
                                  max_image_size={"longest_edge": IDEFICS_IMAGE})
    proc = NoVideoSmolVLMProcessor(ip, tok, image_seq_len=seq_len, chat_template=IDEFICS_CHAT)
    cfg = T.SmolVLMConfig(text_config=text, vision_config=vision, scale_factor=IDEFICS_SCALE,
                          image_token_id=ids["<image>"], pad_token_id=ids["<|endoftext|>"])
    return T.SmolVLMForConditionalGeneration(cfg), proc


MLLAMA_SPECIAL = ["<|finetune_right_pad_id|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|image|>", "<|python_tag|>"]
# Llama-3 style template with <|image|> where image parts sit. The real Llama-3.2-Vision template
# refuses a system message next to images; ours accepts it (HFPolicy folds system text into the first
# user turn for real Mllama checkpoints, see agents/hf.py).
MLLAMA_CHAT = ("<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
               "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
               "{% if c['type'] == 'image' %}<|image|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
               "{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def mllama_processor(image_size: int, vocab_size: int = VOCAB, texts: list[str] | None = None):
    """An Mllama processor with our BPE tokenizer; ``image_size`` is the tile side (560 for Llama-3.2)."""
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    tok = train_bpe_tokenizer(texts or GENERIC_CORPUS, MLLAMA_SPECIAL, vocab_size, MLLAMA_CHAT,
                              bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                              pad_token="<|finetune_right_pad_id|>")
    ip = MllamaImageProcessorPil(size={"height": image_size, "width": image_size}, max_image_tiles=4)
    return T.MllamaProcessor(image_processor=ip, tokenizer=tok, chat_template=MLLAMA_CHAT)


def build_mllama():
    proc = mllama_processor(image_size=28)
    tok = proc.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in MLLAMA_SPECIAL}
    layers = [0, 1]
    cfg = T.MllamaConfig(
        text_config=dict(TEXT, vocab_size=len(tok), num_hidden_layers=3, cross_attention_layers=[1],
                         rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                         bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|eot_id|>"],
                         pad_token_id=ids["<|finetune_right_pad_id|>"]),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1,
                           attention_heads=2, image_size=28, patch_size=14, max_num_tiles=4,
                           intermediate_layers_indices=layers, vision_output_dim=32 * (len(layers) + 1)),
        image_token_index=ids["<|image|>"])
    model = T.MllamaForConditionalGeneration(cfg)
    # Mllama initialises its cross-attention gates at 0, so images would not reach the logits at all and
    # no test could see an image-handling bug; trained checkpoints have them open.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("cross_attn_attn_gate", "cross_attn_mlp_gate")):
                p.fill_(1.0)
    return model, proc


BUILDERS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "qwen2_vl": build_qwen2_vl,
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
    "idefics3": build_idefics3,
    "smolvlm": build_smolvlm,
    "mllama": build_mllama,
}


def build_tiny(family: str, seed: int = 0) -> tuple[Any, Any]:
    """A tiny random ``(model, processor)`` of ``family`` (one of ``BUILDERS``), weights fixed by ``seed``."""
    if family not in BUILDERS:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(BUILDERS)}")
    from spatialrl.models.family import model_family

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, proc = BUILDERS[family]()
    model_family(model).prepare_model(model)  # as HFPolicy and the trainers do
    return model.eval(), proc


def save_tiny(family: str, out: str | Path, seed: int = 0) -> Path:
    """Build a tiny model and save model + processor to ``out`` (loadable by ``HFPolicy.from_pretrained``)."""
    model, proc = build_tiny(family, seed)
    out = Path(out)
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out
