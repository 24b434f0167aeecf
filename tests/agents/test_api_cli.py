"""``spatialrl eval``'s --api-timeout / --api-retries / --api-max-wait reach the OpenAI client (issue 23,
fault 2), and bad values or flags for the wrong kind of agent (those and --prefix-cache-mb, a local model's)
are one ``error:`` line before anything is written."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from spatialrl.cli import app
from spatialrl.io import read_jsonl

from .openai_server import FaultyServer


def _eval(server_url: str, out, *flags: str):
    return CliRunner().invoke(app, ["eval", "--task", "count", "--agent", f"openai:m@{server_url}", "--set", "n=2",
                                    "--out", str(out), "--no-report", "--batch-size", "2", *flags])


def test_api_retries_and_timeout_from_the_cli(tmp_path, count_suite):
    with FaultyServer(always="[always500]") as server:
        res = _eval(server.url, tmp_path / "r", "--api-retries", "1")
        assert sum(server.attempts.values()) == 2 * 2  # 1 + 1 retry per episode (default would be 1 + 5)
    assert res.exit_code != 0 and "after 2 attempts" in res.output
    with FaultyServer(slow_seconds=3, always="[slowx99]") as server:
        t0 = time.monotonic()
        res = _eval(server.url, tmp_path / "t", "--api-timeout", "0.3", "--api-retries", "0")
        assert time.monotonic() - t0 < 3
    errors = [r["error"] for r in read_jsonl(tmp_path / "t/episodes.jsonl")]
    assert len(errors) == 2 and all(e.startswith("timeout after 0.3s") for e in errors), errors


def test_api_max_wait_from_the_cli(tmp_path, count_suite):
    with FaultyServer(always="[429x999]") as server:  # Retry-After: 1
        res = _eval(server.url, tmp_path / "w", "--api-max-wait", "0.2")
    assert res.exit_code != 0 and "more than the 0.2s cap (--api-max-wait)" in res.output
    with FaultyServer(always="[ra3600]") as server:  # the default cap gives up at once too
        t0 = time.monotonic()
        res = _eval(server.url, tmp_path / "d")
        assert time.monotonic() - t0 < 10 and "Retry-After" in res.output


@pytest.mark.parametrize("flags, message", [
    (["--api-timeout", "0"], "--api-timeout"),
    (["--api-timeout", "nan"], "--api-timeout"),
    (["--api-retries", "-1"], "--api-retries"),
    (["--api-max-wait", "-5"], "--api-max-wait"),
])
def test_bad_api_values_are_one_error_line(tmp_path, count_suite, flags, message):
    res = _eval("http://127.0.0.1:9/v1", tmp_path / "x", *flags)
    assert res.exit_code == 2 and "error:" in res.output and message in res.output, res.output
    assert "Traceback" not in res.output and not (tmp_path / "x").exists()


def test_api_flags_for_a_local_agent_are_an_error(tmp_path, count_suite):
    res = CliRunner().invoke(app, ["eval", "--task", "count", "--agent", "expert", "--set", "n=2",
                                   "--out", str(tmp_path / "e"), "--api-timeout", "5"])
    assert res.exit_code == 2 and "--api-timeout only apply to openai:MODEL@URL agents" in res.output
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("agent, value, message", [
    ("expert", "64", "--prefix-cache-mb only applies to hf:PATH and builtin:NAME agents"),
    ("builtin:small-random", "-1", "--prefix-cache-mb must be >= 0"),
])
def test_prefix_cache_flag_is_checked_before_anything_runs(tmp_path, count_suite, agent, value, message):
    res = CliRunner().invoke(app, ["eval", "--task", "count", "--agent", agent, "--set", "n=2",
                                   "--out", str(tmp_path / "e"), "--prefix-cache-mb", value])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "e").exists()
