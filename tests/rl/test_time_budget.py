"""``time_budget_minutes`` in the RL trainers: the run ends like a finished one when the budget is spent
(checkpoint, final model, summary), and a resumed run counts the time already spent."""

from __future__ import annotations

import json

from spatialrl.train.grpo import train

from .test_grpo import grpo_config


def test_a_spent_budget_ends_the_run_with_a_final_model(tmp_path, tiny_model_dir, letter_suite):
    cfg = grpo_config(tmp_path, tiny_model_dir, updates=50, time_budget_minutes=0.2 / 60)  # 0.2 s: one update or a few
    summary = train(cfg)
    run = tmp_path / "run"
    assert 1 <= summary["update"] < 50 and not summary["finished"]
    assert (run / "final/model.safetensors").is_file() and (run / "summary.json").is_file()
    state = json.loads((run / f"checkpoints/step-{summary['update']:06d}/trainer_state.json").read_text())
    assert state["update"] == summary["update"] and state["elapsed_s"] >= 0.2
    # resumed: the budget is already spent, so no update runs
    again = train(grpo_config(tmp_path, tiny_model_dir, updates=50, time_budget_minutes=0.2 / 60))
    assert again["update"] == summary["update"]
