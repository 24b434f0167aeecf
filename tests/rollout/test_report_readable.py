"""Reports people can read (issue 23, newcomer 6): a metric glossary, options as a table, one number
format per metric, episodes from every category, console tables within 80 columns, repeated labels
told apart. On the toy counting task (tests/conftest.py) and on real TVR metric names."""

from __future__ import annotations

import re

from rich.console import Console

from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.eval.report import describe_metric, fmt_row, print_metrics, write_report
from spatialrl.eval.runs import load_run, open_run_dir
from spatialrl.rollout.runner import run_episodes


def _run(suite, out, policy, label, n=8):
    open_run_dir(out, {"task": "count", "agent": label, "options": {"n": n, "note": None}, "sampling": {},
                       "label": label})
    run_episodes(suite, {"n": n}, policy, suite.episodes({"n": n}), out_dir=out, progress=False)
    return out


def test_glossary_covers_every_metric_of_every_task():
    from spatialrl.envs.gp.metrics import summarize as gp
    from spatialrl.envs.tvr.metrics import summarize as tvr
    from spatialrl.envs.virl.metrics import summarize as virl

    rec = {"episode_id": "e", "category": "c", "success": True, "stopped": True, "steps": 3, "n_steps": 3,
           "optimal_steps": 3, "response_tokens": 9, "action_counts": {}, "final_pos_error_m": 0.0}
    names = set()
    for summarize in (tvr, virl, gp):
        try:
            m = summarize([rec])
        except (KeyError, TypeError):
            continue
        names |= {k for row in m.values() for k in row}
    names |= {"errors", "share_translation", "share_invalid", "fstop_all", "fstop_given_stop", "spl",
              "recognition_accuracy", "rate/CORRECT_SOLUTION"}
    missing = sorted(n for n in names if not describe_metric(n))
    assert not missing, missing
    assert "wrong pose" in describe_metric("fstop_given_stop")
    assert "translation" in describe_metric("share_look")


def test_one_number_format_per_metric():
    assert fmt_row([11.0, 9.0, 13.0], "mean_steps") == ["11.000", "9.000", "13.000"]
    assert fmt_row([7.5, 7.0, 8.0], "distinct_cells") == ["7.500", "7.000", "8.000"]
    assert fmt_row([2, 1, 1], "n") == ["2", "1", "1"]
    assert fmt_row([1636.0, 12.0], "steps") == ["1,636", "12"]
    assert fmt_row([1.0, 0.5, ""], "success_rate") == ["1.000", "0.500", ""]


def test_report_has_glossary_options_table_categories_and_distinct_labels(tmp_path, count_suite, monkeypatch):
    import dataclasses

    from spatialrl.envs import registry

    viewer = dataclasses.replace(count_suite, render_episode=lambda ep, steps, opts, assets: f"<p>{len(steps)}</p>")
    monkeypatch.setitem(registry._SUITES, "count", viewer)
    a = _run(count_suite, tmp_path / "a" / "run", ExpertPolicy(), "expert")
    b = _run(count_suite, tmp_path / "b" / "run", RandomPolicy(3), "expert")  # same label, same folder name
    md, html = write_report([a, b], tmp_path / "rep", episodes_per_run=1)
    text, page = md.read_text(), html.read_text()
    assert "### What the metrics mean" in text and "| success_rate | successful episodes / episodes |" in text
    assert "| option | value |" in text and "| n | 8 |" in text and "| note |  |" in text
    assert "options {" not in text  # no dict dump
    assert f"expert ({a})" in text and f"expert ({b})" in text
    # the viewer shows every category of each run, even with episodes_per_run=1
    summaries = re.findall(r"<summary>(expert \([^)]*\)) · (\w+) · (ep\d+)", page)
    for run in (a, b):
        assert {c for label, c, _ in summaries if label == f"expert ({run})"} == {"even", "odd"}, summaries


def test_episode_picks_mix_outcomes_within_each_category(tmp_path, count_suite):
    from spatialrl.eval.report import _pick_episodes

    run = load_run(_run(count_suite, tmp_path / "r", RandomPolicy(3), "random", n=16))
    for cat in ("even", "odd"):
        outcomes = {e["success"] for e in run.episodes if e["category"] == cat}
        picked = [e for e in _pick_episodes(run, 4) if e["category"] == cat]
        assert len(picked) == 2 and {e["success"] for e in picked} == outcomes


def test_console_tables_fit_80_columns():
    cats = {f"category-{i}": {"success_rate": 0.5, "per_step_accuracy": 0.25, "first_recognition_accuracy": 1.0,
                              "episodes": 12} for i in range(9)}
    metrics = {"overall": {"success_rate": 0.5, "per_step_accuracy": 0.25, "first_recognition_accuracy": 1.0,
                           "episodes": 108}, **cats}
    console = Console(width=200, record=True)
    print_metrics(console, {"builtin:virl-sft": metrics})
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out
    for c in ["overall", *cats]:
        assert c in out
    assert out.count("first_recognition_accuracy") >= 2  # the metric column repeats in each part
