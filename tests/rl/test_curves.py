"""Curves and comparison tables for the reproduction docs, from real run-folder layouts."""

from __future__ import annotations

import json

import pytest

from spatialrl.errors import DataError
from spatialrl.train.curves import comparison_table, load_curves, main


def _run(path, rewards):
    path.mkdir(parents=True)
    lines = [{"step": 0, "setup/processes": 1}] + [{"step": i + 1, "rollout/reward_mean": r} for i, r in enumerate(rewards)]
    lines.append({"step": 2, "rollout/reward_mean": 9.0})  # a resumed run re-logs update 2
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_curves_png_and_values(tmp_path):
    a = _run(tmp_path / "a", [0.1, 0.2, 0.3])
    b = _run(tmp_path / "b", [0.5])
    assert load_curves(a, ["rollout/reward_mean"])["rollout/reward_mean"] == ([1, 2, 3], [0.1, 9.0, 0.3])
    out = tmp_path / "fig.png"
    main(["curves", "--run", f"A={a}", "--run", f"B={b}", "--key", "rollout/reward_mean", "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(DataError, match="metrics.jsonl"):
        load_curves(tmp_path / "nope", ["x"])
    with pytest.raises(DataError, match="line 1 has no 'time'"):
        load_curves(a, ["rollout/reward_mean"], x="time")


def test_curves_against_wall_clock_minutes(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    lines = [{"step": 0, "time": 0.0}, {"step": 300, "time": 90.0, "eval/x": 0.5}, {"step": 600, "time": 180.0, "eval/x": 0.7}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert load_curves(run, ["eval/x"], x="time")["eval/x"] == ([1.5, 3.0], [0.5, 0.7])
    out = tmp_path / "t.png"
    main(["curves", "--run", f"R={run}", "--key", "eval/x", "--x", "time", "--out", str(out)])
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_comparison_table(tmp_path):
    for name, value in (("sft", 0.25), ("ppo", 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(
            {"in-dist": {"success_rate": value}, "rule-ood": {"success_rate": value / 2}, "overall": {"success_rate": value}}))
    table = comparison_table({"SFT init": tmp_path / "sft", "PPO": tmp_path / "ppo"})
    assert table.splitlines()[0] == "| run | in-dist | rule-ood | overall |"
    assert "| PPO | 50.0 | 25.0 | 50.0 |" in table
