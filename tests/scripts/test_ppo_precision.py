"""benchmarks/ppo_precision.py with the fast rows' settings (issue 24's precision check): at lr 0, in fp32
on the CPU, a LoRA run with a frozen tower, the vision cache, merged-copy rollouts and packed conversations
scores and trains the same log-probs — approx. KL 0 per sequence and per token, ratio 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_lora_fast_row_settings_give_ratio_one(tmp_path):
    out = tmp_path / "ppo_precision.json"
    subprocess.run([sys.executable, "benchmarks/ppo_precision.py", "--model", "qwen25vl-small-random",
                    "--dtypes", "float32", "--num-envs", "2", "--num-steps", "4", "--new-tokens", "8",
                    "--grid-size", "224", "--minibatch-size", "1", "--grad-accum", "2", "--shuffle", "episodes",
                    "--freeze-vision", "--lora", "4", "--merge-lora", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["dtype"] == "float32" and row["shuffle"] == "episodes" and row["compile"] is False
    assert row["samples"] == 4
    assert row["ratio"] == pytest.approx(1.0, abs=1e-6) and row["clipfrac"] == 0.0
    assert row["approx_kl_sequence"] == pytest.approx(0.0, abs=1e-7)
    assert row["approx_kl_token"] == pytest.approx(0.0, abs=1e-8) and row["clipfrac_token"] == 0.0
    assert result["args"]["lora"] == 4 and result["args"]["merge_lora"] is True


@pytest.mark.slow
def test_inductor_deterministic_row(tmp_path):
    """``--compile deterministic``: the blocks compiled under inductor's deterministic mode (issue 24's next
    lever on the GPU), labelled as such; in bf16 on the CPU the trainers' scoring gives ratio 1 exactly."""
    out = tmp_path / "ppo_precision.json"
    subprocess.run([sys.executable, "benchmarks/ppo_precision.py", "--model", "qwen25vl-small-random",
                    "--dtypes", "bfloat16", "--num-envs", "2", "--num-steps", "4", "--new-tokens", "8",
                    "--grid-size", "224", "--minibatch-size", "1", "--grad-accum", "2", "--shuffle", "episodes",
                    "--freeze-vision", "--lora", "4", "--merge-lora", "--compile", "deterministic", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=600)
    (row,) = json.loads(out.read_text())["rows"]
    assert row["compile"] is True and row["inductor_deterministic"] is True
    assert row["ratio"] == 1.0 and row["approx_kl_sequence"] == 0.0 and row["clipfrac_token"] == 0.0
