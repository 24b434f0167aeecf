"""The paired comparison of two runs on the same episodes (``eval/paired.py``): exact counts, a bootstrap
interval that is deterministic by seed and narrows with agreement, and its table in ``spatialrl report``."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.eval.paired import paired_comparison, successes
from spatialrl.eval.report import write_report
from spatialrl.eval.runs import load_run

from .test_report_readable import _run


def test_counts_and_interval():
    a = {f"e{i}": i < 30 for i in range(100)}  # 30 solved
    b = {f"e{i}": 20 <= i < 40 for i in range(100)}  # 20 solved, 10 of them also by a
    b["other"] = True  # not run by a: left out
    p = paired_comparison(a, b, seed=0)
    assert (p.episodes, p.a, p.b, p.both, p.only_a, p.only_b) == (100, 30, 20, 10, 20, 10)
    assert p.low < 10 < p.high and p == paired_comparison(a, b, seed=0)
    # the same marginal rates with every B success inside A's: a much narrower interval (the point of pairing)
    nested = paired_comparison(a, {f"e{i}": i < 20 for i in range(100)}, seed=0)
    assert nested.a - nested.b == 10 and nested.high - nested.low < (p.high - p.low) / 1.5
    assert paired_comparison(a, {"x": True}) is None


def test_interval_matches_a_plain_bootstrap():
    """The vectorised draws are the per-resample loop's draws (what the shipped models' notes used)."""
    rng = np.random.default_rng(3)
    a = {str(i): bool(v) for i, v in enumerate(rng.random(50) < 0.4)}
    b = {str(i): bool(v) for i, v in enumerate(rng.random(50) < 0.3)}
    ids = sorted(a)
    x, y = np.array([a[i] for i in ids]), np.array([b[i] for i in ids])
    loop = np.random.default_rng(0)
    diffs = []
    for _ in range(2000):
        k = loop.integers(0, 50, 50)
        diffs.append(x[k].sum() - y[k].sum())
    p = paired_comparison(a, b, resamples=2000, seed=0)
    assert (p.low, p.high) == tuple(np.percentile(diffs, [2.5, 97.5]))


def test_errored_episodes_are_left_out():
    eps = [{"episode_id": "a", "success": True, "error": None}, {"episode_id": "b", "success": False,
                                                                  "error": "boom"}, {"episode_id": "c"}]
    assert successes(eps) == {"a": True}


def test_report_compares_later_runs_with_the_first(tmp_path, count_suite):
    n = 8
    base = _run(count_suite, tmp_path / "random", RandomPolicy(3), "random", n=n)
    expert = _run(count_suite, tmp_path / "expert", ExpertPolicy(), "expert", n=n)
    solved = sum(e["success"] for e in load_run(base).episodes)
    md, html = write_report([base, expert], tmp_path / "rep", episodes_per_run=0)
    text = md.read_text()
    assert "### Paired against the baseline, random (the same episodes)" in text
    section = text.split("### Paired against the baseline")[1]
    row = next(line for line in section.splitlines() if line.startswith("| expert |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:7] == [str(n), str(n), str(solved), str(n - solved), "0", str(solved)]
    assert cells[7].startswith(f"+{n - solved} [")
    assert "Paired against the baseline" in html.read_text()
    console = Console(record=True, width=120)
    write_report([base, expert], tmp_path / "printed", episodes_per_run=0, console=console)
    printed = console.export_text()
    assert "paired against the baseline, random" in printed
    assert printed.count("paired against the baseline") == 1 and printed.count("success") >= 2
    one, _ = write_report([base], tmp_path / "one", episodes_per_run=0)
    assert "Paired" not in one.read_text()


def test_report_from_loaded_runs_matches_report_from_folders(tmp_path, count_suite):
    """``spatialrl report`` loads each run once and hands the loaded runs on: the same report as from folders
    (apart from the time it was written)."""
    base = _run(count_suite, tmp_path / "random", RandomPolicy(3), "random", n=6)
    expert = _run(count_suite, tmp_path / "expert", ExpertPolicy(), "expert", n=6)
    from_dirs, _ = write_report([base, expert], tmp_path / "a", episodes_per_run=0)
    from_runs, _ = write_report([load_run(base), load_run(expert)], tmp_path / "b", episodes_per_run=0)

    def body(path):
        return [line for line in path.read_text().splitlines() if " UTC" not in line]
    assert body(from_dirs) == body(from_runs) and "Paired against the baseline" in from_runs.read_text()
