"""The scaling benchmark end to end on the CPU: the same SFT global batch in one process and in two gloo
processes (``accelerate launch`` with configs/accelerate/cpu_2proc.yaml) gives the same loss curve."""

from __future__ import annotations

import dataclasses
import json

import pytest

from .test_rank_split import load_scaling


@pytest.mark.slow
def test_two_processes_follow_the_one_process_loss_curve(tmp_path, capsys):
    scaling = load_scaling()
    w = dataclasses.replace(scaling.PRESETS["cpu"], updates=3, sft_batch=8, sft_micro=2, sft_episodes=4,
                            routes=4, grid_size=112)
    rows = scaling.run_scaling(["sft"], ["tiny"], [1, 2], "cpu", w, tmp_path, warmup=1, progress=False)
    one, two = rows
    assert one["ok"] and two["ok"], (one.get("error"), two.get("error"))
    assert two["config"].endswith("cpu_2proc.yaml") and len(two["ranks"]) == 2
    assert two["per_rank"] == {"per_device_batch_size": 2, "grad_accum": 2}
    assert one["per_rank"] == {"per_device_batch_size": 2, "grad_accum": 4}

    curve = [u["train/loss"] for u in one["updates"]]
    assert len(curve) == 3 and curve[-1] < curve[0]  # it trains
    for a, b in zip(curve, [u["train/loss"] for u in two["updates"]], strict=True):
        assert b == pytest.approx(a, rel=1e-5)  # fp32: only the order of the reductions differs
    assert two["curve_max_abs_diff"] < 1e-4 * two["curve_scale"]
    assert one["throughput"]["samples_per_s"] > 0 and two["efficiency"] > 0
    assert two["throughput"]["measured_updates"] == 2  # the warm-up update is left out

    scaling.print_table(rows, "test")
    assert "sft   tiny" in capsys.readouterr().out
    scaling.plot(rows, tmp_path / "curves.png", "test")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    # the per-process sizes really reached the trainer
    cfg = json.loads((tmp_path / "sft-tiny-cpu-n2" / "config.json").read_text())
    assert (cfg["per_device_batch_size"], cfg["grad_accum"]) == (2, 2)
