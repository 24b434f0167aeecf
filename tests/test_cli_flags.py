"""Issue 23, newcomer 4 (and 1): one spelling per flag, old spellings as hidden aliases, no ``<bool>`` on
plain flags, and default run folders named after the split run.json records."""

from __future__ import annotations

import json
import re

import pytest
import typer
from typer.testing import CliRunner

from spatialrl.cli import app

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


def test_help_never_shows_bool_placeholders_or_hidden_aliases():
    root = typer.main.get_command(app)
    paths = [p for p, _ in _commands(root)]
    assert ("tvr", "make-bench") in paths and ("data", "sft") in paths and ("virl", "make-city") in paths
    for path in [(), *paths]:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.output, (path, res.output)
        for old in ("--force", "--bench", "--memory"):
            assert not re.search(rf"{old}\b", res.output), (path, old, res.output)


def test_overwrite_is_the_one_spelling_and_force_still_works(tmp_path):
    out = tmp_path / "toy"
    args = ["virl", "make-toy-data", str(out), "--routes", "2", "--pano-width", "32"]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "exists" in res.output
    for flag in ("--overwrite", "--force"):
        assert runner.invoke(app, [*args, flag]).exit_code == 0, flag
    city = tmp_path / "city"
    assert runner.invoke(app, ["virl", "make-city", "--tiny", "--routes", "2", "--pano-width", "64",
                               "--no-contact-sheet", "--out", str(city)]).exit_code == 0
    res = runner.invoke(app, ["virl", "make-city", "--tiny", "--routes", "2", "--out", str(city)])
    assert res.exit_code == 2 and "--overwrite" in res.output and "--force" not in res.output
    for flag in ("--overwrite", "--force"):
        res = runner.invoke(app, ["virl", "make-city", "--tiny", "--routes", "2", "--pano-width", "64",
                                  "--no-contact-sheet", "--out", str(city), flag])
        assert res.exit_code == 0, (flag, res.output)


def test_tvr_show_takes_data_like_eval_and_bench_as_alias(tmp_path):
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    bench = tmp_path / "bench"
    make_bench(bench, BenchConfig.preset(tiny=True, sizes={"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                            "diag_move": 0}, scenes={"eval": 1, "sft": 0, "rl": 0}),
               progress=False)
    res = runner.invoke(app, ["tvr", "make-bench", "--tiny", "--out", str(bench)])
    assert res.exit_code == 2 and "--overwrite" in res.output
    from spatialrl.envs.registry import get_suite

    tid = get_suite("tvr").episodes({**get_suite("tvr").default_options, "data": str(bench)})[0].episode_id
    for flag in ("--data", "--bench"):
        png = tmp_path / f"{flag[2:]}.png"
        res = runner.invoke(app, ["tvr", "show", tid, flag, str(bench), "--out", str(png), "--width", "64",
                                  "--height", "36"])
        assert res.exit_code == 0, res.output
        assert png.read_bytes()[:4] == b"\x89PNG"
    res = runner.invoke(app, ["tvr", "show", tid, "--out", str(tmp_path / "x.png")])
    assert res.exit_code == 2 and "--data" in res.output


@pytest.mark.parametrize("flags", [["--set", "memory=bogus"], ["--memory", "bogus"]])
def test_data_sft_memory_is_a_task_option_with_the_old_flag_as_alias(tmp_path, flags):
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset

    city = write_dataset(tmp_path / "virl", golden_routes(), pano_size=(64, 32))
    res = runner.invoke(app, ["data", "sft", "--task", "virl", "--data", str(city), *flags,
                              "--out", str(tmp_path / "d")])
    assert res.exit_code == 2 and "memory" in res.output  # V-IRL has no memory option: both spellings say so


def test_default_run_folder_names_the_split_run_json_records(tmp_path, monkeypatch):
    from spatialrl.eval.cli import default_run_dir

    assert str(default_run_dir("tvr", "expert", {})) == "runs/tvr-eval-expert"
    assert str(default_run_dir("tvr", "random", {"split": "eval"})) == "runs/tvr-eval-random"
    assert str(default_run_dir("virl", "hf:/m/x", {})) == "runs/virl-in-dist-hf-_m_x"
    assert str(default_run_dir("gp", "expert", {"split": "in-dist,rule-ood"})) == "runs/gp-in-dist+rule-ood-expert"
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["eval", "--task", "gp", "--agent", "expert", "--limit", "1", "--no-report",
                              "--set", "mode=l"])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "runs" / "gp-in-dist-expert" / "run.json").read_text())
    assert run["options"]["split"] == "in-dist"
