"""The Qwen2.5-VL-7B-sized benchmark rows (issue 24): ``qwen25vl7b-random``'s config is the published one,
and ``qwen25vl-small-random`` (the same code path at toy width) runs one row of each benchmark end to end
on CPU: ``benchmarks/rl_speed.py`` (PPO and multi-turn GRPO on V-IRL VL) and
``benchmarks/rollout_throughput.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def rollout_module():
    """benchmarks/rollout_throughput.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("rollout_throughput_bench", ROOT / "benchmarks" / "rollout_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_7b_config_is_qwen25vl_7b_instruct():
    import torch
    import transformers as T

    rt = rollout_module()
    ids = {t: i for i, t in enumerate(["<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>",
                                       "<|vision_start|>", "<|vision_end|>"])}
    cfg = rt.qwen25vl_7b_config(ids)
    text, vision = cfg.text_config, cfg.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads,
            text.intermediate_size, text.vocab_size) == (3584, 28, 28, 4, 18944, 152064)
    assert text.rope_parameters["mrope_section"] == [16, 24, 24] and text.rope_parameters["rope_theta"] == 1e6
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size, vision.patch_size, vision.window_size,
            vision.fullatt_block_indexes, vision.intermediate_size) == (32, 1280, 3584, 14, 112, [7, 15, 23, 31], 3420)
    assert cfg.image_token_id == 2 and not cfg.tie_word_embeddings
    with torch.device("meta"):  # shapes only: no memory
        model = T.AutoModelForImageTextToText.from_config(cfg)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    # Qwen2.5-VL-7B-Instruct: 8.29B parameters, 0.68B of them in the vision tower
    assert round(sum(p.numel() for p in model.parameters()) / 1e9, 2) == 8.29
    assert round(sum(p.numel() for p in model.model.visual.parameters()) / 1e9, 2) == 0.68


def run(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_small_variant_runs_both_benchmarks(tmp_path):
    out = tmp_path / "rl_speed.json"
    run(["benchmarks/rl_speed.py", "--model", "qwen25vl-small-random", "--device", "cpu", "--updates", "1",
         "--num-envs", "2", "--num-steps", "2", "--new-tokens", "4", "--grid-size", "224", "--tasks", "1",
         "--group-size", "2", "--ppo-epochs", "1", "--minibatch-size", "2", "--grad-accum", "1", "--offload", "none",
         "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["model"] == "qwen25vl-small-random"
    ppo, grpo = result["rows"]
    assert "error" not in ppo and "error" not in grpo
    assert ppo["algo"] == "ppo" and ppo["samples_per_min"] > 0 and ppo["samples_per_update"] == 2
    assert ppo["samples_per_conversation"] == 1.0  # 2 envs x 1 turn: two one-sample conversations
    # the decoder's input tokens: one epoch over the same two rows as the scoring pass
    assert ppo["score_tokens"] > 0 and ppo["epoch_tokens"] == ppo["score_tokens"]
    assert ppo["score_padded_tokens"] >= ppo["score_tokens"] and ppo["score_train_tflops_est"] > 0
    # multi-turn GRPO: 1 task x G 2 trajectories, each of at least one turn
    assert grpo["algo"] == "grpo" and grpo["trajectories"] == 2 and grpo["env_steps_per_update"] >= 2
    assert grpo["policy_tokens"] > 0

    out = tmp_path / "rollout.json"
    run(["benchmarks/rollout_throughput.py", "--model", "qwen25vl-small-random", "--device", "cpu", "--threads", "1",
         "--batch-sizes", "2", "--grid-size", "224", "--new-tokens", "4", "--row-seconds", "2", "--routes", "2",
         "--pano-width", "512", "--env-threads", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert result["model"] == "qwen25vl-small-random" and row["batch_size"] == 2
    assert row["env_steps"] > 0 and row["steps_per_min"] > 0 and row["mean_prompt_tokens"] > 0
    assert "partial" not in result and result["git_commit"] and "load_average_1m" in result
