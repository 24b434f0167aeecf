"""The built-in model: presets, determinism, save/load round trip, tokenizer, image token counts, CLI."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.errors import DataError
from spatialrl.models.builtin import PRESETS, build_model, image_token_counts, init_model, resolve_builtin
from spatialrl.models.tokenizer import QWEN_SPECIAL_TOKENS


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("builtin") / "tiny"
    init_model("tiny", out, seed=0)
    return out


def test_tiny_round_trip_with_standard_from_pretrained(tiny_dir):
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import NoVideoQwen2_5_VLProcessor

    model, processor, meta = build_model("tiny", seed=0)
    assert meta["parameters"] < 1_000_000
    loaded = AutoModelForImageTextToText.from_pretrained(tiny_dir, local_files_only=True)
    loaded_proc = NoVideoQwen2_5_VLProcessor.from_pretrained(tiny_dir, local_files_only=True)
    assert type(loaded).__name__ == "Qwen2_5_VLForConditionalGeneration"
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    conv = [{"role": "user", "content": [{"type": "image", "image": np.full((64, 96, 3), 90, np.uint8)},
                                         {"type": "text", "text": "Turn left at the next intersection."}]}]
    sampling = SamplingParams(max_new_tokens=8)
    built = HFPolicy(model, processor, device="cpu").generate([conv], sampling)[0]
    reloaded = HFPolicy(loaded, loaded_proc, device="cpu").generate([conv], sampling)[0]
    assert built.token_ids == reloaded.token_ids
    np.testing.assert_allclose(built.logprobs, reloaded.logprobs, atol=1e-5)  # eager vs sdpa attention


@pytest.mark.slow
def test_same_seed_same_files_across_processes(tiny_dir, tmp_path):
    """Weights and tokenizer files are byte-identical when rebuilt in a fresh process; a new seed differs."""
    code = ("from spatialrl.models.builtin import init_model; import sys; "
            "init_model('tiny', sys.argv[1], seed=int(sys.argv[2]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "again"), "0"], check=True, capture_output=True)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "processor_config.json", "chat_template.jinja"):
        assert _md5(tiny_dir / name) == _md5(tmp_path / "again" / name), name
    init_model("tiny", tmp_path / "seed1", seed=1)
    assert _md5(tiny_dir / "model.safetensors") != _md5(tmp_path / "seed1" / "model.safetensors")
    assert _md5(tiny_dir / "tokenizer.json") == _md5(tmp_path / "seed1" / "tokenizer.json")


def test_small_preset_size():
    model, _, meta = build_model("small", seed=0)
    assert 20_000_000 <= meta["parameters"] <= 60_000_000
    assert meta["parameters"] == sum(p.numel() for p in model.parameters())


def test_tokenizer_and_chat_template(tiny_dir):
    from spatialrl.models.processor import load_processor

    proc = load_processor(tiny_dir)
    tok = proc.tokenizer
    assert [tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS] == list(range(len(QWEN_SPECIAL_TOKENS)))
    text = 'Ünïcode → 北 {"action": "turn_direction(left)"} 24'
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: nothing is unknown
    conv = [
        {"role": "system", "content": [{"type": "text", "text": "S"}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "A"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Action: MoveAhead"}]},
        {"role": "user", "content": [{"type": "text", "text": "B"}, {"type": "image"}]},
    ]
    rendered = proc.apply_chat_template(conv, add_generation_prompt=True)
    img = "<|vision_start|><|image_pad|><|vision_end|>"
    assert rendered == (f"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n{img}A<|im_end|>\n"
                        f"<|im_start|>assistant\nAction: MoveAhead<|im_end|>\n<|im_start|>user\nB{img}<|im_end|>\n"
                        "<|im_start|>assistant\n")
    out = tok.apply_chat_template(conv[2:3], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(masked) == "Action: MoveAhead<|im_end|>"


def test_image_token_counts_match_docs():
    for preset, expected in {"tiny": [16, 15, 16], "small": [64, 60, 64]}.items():
        _, proc, _ = build_model(preset)
        counts = image_token_counts(proc, [(448, 448), (640, 360), (2405, 2405)])
        assert list(counts.values()) == expected
        assert max(counts.values()) <= PRESETS[preset].max_pixels // (28 * 28)


def test_registry_errors():
    assert resolve_builtin("small-random") == "small"
    from spatialrl.models.builtin import builtin_names

    with pytest.raises(DataError, match="available: " + ", ".join(builtin_names())):
        resolve_builtin("best-model")


def test_cli_init_info_list(tmp_path):
    from spatialrl.models.cli import app

    runner = CliRunner()
    out = tmp_path / "m"
    res = runner.invoke(app, ["init", "--preset", "tiny", "--out", str(out), "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "parameters" in res.output and (out / "spatialrl_model.json").is_file()
    res = runner.invoke(app, ["init", "--preset", "tiny", "--out", str(out)])
    assert res.exit_code == 1 and "not empty" in res.output
    res = runner.invoke(app, ["info", str(out)])
    assert res.exit_code == 0 and "qwen2_5_vl" in res.output and "image tokens 640x360" in res.output
    res = runner.invoke(app, ["list"])
    assert "tiny-random" in res.output and "small-random" in res.output
    res = runner.invoke(app, ["info", "builtin:nope"])
    assert res.exit_code == 1 and "available" in res.output
    res = runner.invoke(app, ["init", "--preset", "huge", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "unknown preset" in res.output


def test_cli_module_does_not_import_torch():
    code = "import sys, spatialrl.models.cli; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False False"
