"""Eval progress moves with env steps and shows the live success count; a CPU model run that may be
long says so up front (issue 23, newcomer 5)."""

from __future__ import annotations

from typer.testing import CliRunner

from spatialrl.rollout.runner import cpu_time_warning, progress_fields


def test_progress_moves_before_any_episode_ends():
    completed, eps, status = progress_fields([], [(3, 30), (15, 30)], total=2, env_steps=18)
    assert completed == 0.6 and eps == "0/2 episodes"
    assert "18 env steps" in status and "2 running" in status and "success 0/0" in status
    done = [{"success": True}, {"success": False}, {"success": False, "error": "boom"}]
    completed, eps, status = progress_fields(done, [(40, 40)], total=4, env_steps=99)
    assert completed == 3.95 and eps == "3/4 episodes"  # a running episode never counts as finished
    assert "success 1/2 (50.0%)" in status and "1 errored" in status


def test_cpu_warning_only_for_long_cpu_model_runs():
    from spatialrl.agents.loader import load_policy

    model = load_policy("builtin:tvr-ao-sft", seed=0)
    assert model.device.type == "cpu"
    msg = cpu_time_warning(model, seconds_per_turn=2.0, episodes_left=40, batch_size=8, turn_budget=40)
    assert msg is not None and "CPU" in msg and "7 min" in msg and "--limit" in msg  # 2 s × 40 turns × 5 batches
    assert cpu_time_warning(model, 0.05, 20, 8, 40) is None  # 6 s at most: no warning
    random = load_policy("random", seed=0)
    assert cpu_time_warning(random, 2.0, 20, 8, 40) is None  # no model on a device


def test_eval_console_shows_env_steps_and_success(tmp_path):
    from spatialrl.cli import app

    res = CliRunner().invoke(app, ["eval", "--task", "gp", "--agent", "expert", "--limit", "2", "--no-report",
                                   "--set", "mode=l", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "env steps · " in res.output and "success 2/2" in res.output and "2/2 episodes" in res.output
