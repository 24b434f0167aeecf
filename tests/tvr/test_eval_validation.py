"""Issue 23 fault 8 for `spatialrl eval`: a bad task, batch size or task option is one `error:` line naming
the key and the allowed values, checked before the run folder is made; a resumed folder that belongs to
another run names every differing option with both values."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spatialrl.cli import app


def _eval(tmp_path, bench_dir, *extra):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "--task", "tvr", "--data", str(bench_dir), "--out", str(out),
                                   "--limit", "1", "--no-report", "--set", "width=64", "--set", "height=36", *extra])
    return res, out, " ".join(res.output.split())  # rich wraps long lines at the console width


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "memory=bogus"], "error: tvr option memory='bogus': expected one of va, ao, window"),
    (["--set", "width=abc"], "error: tvr option width='abc': expected an integer >= 16 (default 640)"),
    (["--set", "distance=manhattan"], "expected one of euclidean, geodesic"),
    (["--set", "max_steps_single=-2"], "tvr option max_steps_single=-2: expected an integer >= 1"),
    (["--set", "badges=maybe"], "tvr option badges='maybe': expected true or false"),
    (["--batch-size", "0"], "error: --batch-size: expected an integer >= 1, got 0"),
    (["--max-new-tokens", "0"], "error: --max-new-tokens: expected an integer >= 1, got 0"),
    (["--temperature", "nan"], "error: --temperature: expected a finite number >= 0"),
    (["--split", "nope"], "error: {bench}: unknown split 'nope'; this bench has eval"),
])
def test_bad_option_is_one_error_line_and_leaves_nothing(tmp_path, bench_dir, extra, message):
    res, out, text = _eval(tmp_path, bench_dir, *extra)
    assert res.exit_code == 2, res.output
    assert message.format(bench=bench_dir) in text and "Traceback" not in res.output
    assert res.output.count("error:") == 1
    assert not out.exists()


def test_unknown_task_is_an_error_line(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "--task", "tvrr", "--out", str(out)])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "error: unknown task 'tvrr'; known tasks: gp, tvr, virl" in text, res.output
    assert not out.exists()


def test_unknown_agent_leaves_nothing(tmp_path, bench_dir):
    res, out, text = _eval(tmp_path, bench_dir, "--agent", "robot")
    assert res.exit_code == 2 and "error: unknown agent spec 'robot'" in text, res.output
    assert not out.exists()


def test_different_run_names_each_option_and_both_values(tmp_path, bench_dir):
    res, out, _ = _eval(tmp_path, bench_dir)
    assert res.exit_code == 0, res.output
    res, _, text = _eval(tmp_path, bench_dir, "--set", "memory=ao", "--temperature", "0.5")
    assert res.exit_code == 2
    assert "belongs to a different run" in text
    assert "options.memory: 'va' in run.json, 'ao' now" in text
    assert "sampling.temperature: 0.0 in run.json, 0.5 now" in text
