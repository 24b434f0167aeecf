"""Result files of several commands on one machine combine into one table: later rows replace earlier
ones, efficiency is recomputed against the N = 1 row of the same trainer/model/backend/workload."""

from __future__ import annotations

import json

import pytest

from spatialrl.errors import DataError

from .test_rank_split import load_scaling


def result(machine: str, rows: list[dict]) -> dict:
    return {"benchmark": "scaling", "machine": machine, "date": "d", "git_commit": "c", "workload": {"updates": 3},
            "rows": rows}


def row(n: int, samples_per_s: float, losses: list[float]) -> dict:
    updates = [{"update": u + 1, "samples": 8.0, "env_steps": 8.0, "seconds": 8.0 / samples_per_s,
                "losses/value_loss": v} for u, v in enumerate(losses)]
    return {"trainer": "ppo", "model": "small", "backend": "ddp", "n": n, "ok": True, "updates": updates,
            "ranks": [{"rank": r, "peak_gpu_allocated_gib": 1.5} for r in range(n)],
            "throughput": {"samples_per_s": samples_per_s, "env_steps_per_s": samples_per_s, "seconds_per_update": 1.0}}


def test_merge_recomputes_efficiency_and_keeps_the_latest_rows(tmp_path, capsys):
    scaling = load_scaling()
    first = tmp_path / "a.json"
    second = tmp_path / "b.json"
    first.write_text(json.dumps(result("h200-x8", [row(1, 10.0, [1.0, 0.5]), row(2, 5.0, [1.0, 0.4])])))
    second.write_text(json.dumps(result("h200-x8", [row(2, 18.0, [1.1, 0.6]), row(8, 68.0, [1.0, 0.5])])))
    out = scaling.merge([first, second], tmp_path / "results")
    merged = {r["n"]: r for r in json.loads(out.read_text())["rows"]}
    assert sorted(merged) == [1, 2, 8]
    assert merged[2]["source"]["file"] == "b.json"  # the later command's N=2 replaced the first one's
    assert merged[2]["efficiency"] == pytest.approx(18.0 / (2 * 10.0))
    assert merged[8]["speedup"] == pytest.approx(6.8)
    assert merged[2]["curve_max_abs_diff"] == pytest.approx(0.1)
    assert (tmp_path / "results" / "scaling-h200-x8.png").is_file()
    assert "ppo   small" in capsys.readouterr().out

    other = tmp_path / "c.json"
    other.write_text(json.dumps(result("h200-x2", [row(1, 10.0, [1.0])])))
    with pytest.raises(DataError, match="different machines"):
        scaling.merge([first, other], tmp_path / "results")
