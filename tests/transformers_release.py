"""What the installed transformers release can do, for tests of features that depend on it.

The GPU machine runs transformers 5.17 (``scripts/check_transformers.sh 5.17.0`` runs the tests against
it): there Qwen-VL's ``forward`` takes no precomputed image features (``mm_encoder_outputs``), so the
Qwen vision cache reports itself unsupported and stays off (``agents/vision_cache.py``). Tests of the
cache's behaviour skip there; tests of it staying off run everywhere.
"""

from __future__ import annotations

import inspect

import pytest
from transformers import Qwen2_5_VLForConditionalGeneration

QWEN_TAKES_ENCODED_IMAGES = "mm_encoder_outputs" in inspect.signature(Qwen2_5_VLForConditionalGeneration.forward).parameters

needs_qwen_encoded_images = pytest.mark.skipif(
    not QWEN_TAKES_ENCODED_IMAGES,
    reason="this transformers' Qwen-VL forward takes no mm_encoder_outputs (5.17): the Qwen vision cache is off",
)
