"""``save_hf_model`` writes a model that loads back to the same weights, tied weights once."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from safetensors import safe_open
from transformers import AutoModelForImageTextToText

from spatialrl.models.builtin import build_model
from spatialrl.train.common import save_hf_model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tied_weights_are_written_once_and_load_back(tmp_path, dtype):
    model, processor, _ = build_model("tiny", seed=1)
    assert model.config.get_text_config().tie_word_embeddings
    save_hf_model(Accelerator(cpu=True), model, processor, tmp_path, dtype=dtype)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert all(f.get_slice(k).get_dtype() == {"float32": "F32", "bfloat16": "BF16"}[dtype] for k in keys)
    assert "lm_head.weight" not in keys  # the bf16 cast once gave the tied head a copy of its own
    loaded = AutoModelForImageTextToText.from_pretrained(tmp_path, dtype=getattr(torch, dtype))
    want = {k: v.to(getattr(torch, dtype)) for k, v in model.state_dict().items()}
    got = loaded.state_dict()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert loaded.lm_head.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
