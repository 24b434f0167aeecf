"""One override syntax for every command line (``spatialrl/overrides.py``, issue 22): ``--set KEY=VALUE``
in eval, play, data sft and train (trainers also take the ``--KEY=VALUE`` shorthand); values are YAML;
every error is ``<flag><key>: <problem>``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialrl.errors import ConfigError
from spatialrl.overrides import parse_assignment, parse_sets
from spatialrl.train.config import SFTConfig, load_config, parse_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_values_are_yaml():
    got = parse_sets(["n=3", "lr=0.5", "on=true", "off=null", "sizes=[1, 2]", "opts={memory: ao}", "empty=",
                      " name = x=y", "n=4"])
    assert got == {"n": 4, "lr": 0.5, "on": True, "off": None, "sizes": [1, 2], "opts": {"memory": "ao"},
                   "empty": "", "name": "x=y"}


def test_train_reads_the_same_syntax():
    sets = ["seed=3", "optim.lr=0.5", "eval.options={memory: ao}", "eval.split=null"]
    flags = [arg for item in sets for arg in ("--set", item)]
    assert parse_overrides(flags) == parse_overrides([f"--{item}" for item in sets]) == parse_sets(sets)
    assert parse_overrides(["--set=seed=3", "--model.lora.enabled", "true"]) == {"seed": 3, "model.lora.enabled": True}
    cfg = load_config(SFTConfig, None, ["--set", "data.train=d", "--set", "optim.lr=1e-5", "--max_steps=7"])
    assert (cfg.data.train, cfg.optim.lr, cfg.max_steps) == ("d", 1e-5, 7)


@pytest.mark.parametrize(("text", "message"), [
    ("memory", r"^--set 'memory': expected KEY=VALUE"),
    ("=3", r"^--set '=3': expected KEY=VALUE"),
    ("memory=[ao", r"^--set memory: cannot read value '\[ao' as YAML: expected ',' or '\]'"),
])
def test_errors_name_the_flag_and_the_key(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_assignment(text)
    with pytest.raises(ConfigError, match=message):
        parse_overrides(["--set", text])


def test_trainer_shorthand_errors():
    with pytest.raises(ConfigError, match=r"^--optim.lr: cannot read value '\[1' as YAML"):
        parse_overrides(["--optim.lr=[1"])
    with pytest.raises(ConfigError, match=r"^--set: missing KEY=VALUE"):
        parse_overrides(["--set"])
    with pytest.raises(ConfigError, match=r"^--optim.lr: missing value"):
        parse_overrides(["--optim.lr"])


@pytest.mark.parametrize("command", [
    ["eval", "--task", "gp", "--no-report"],
    ["play", "--task", "gp"],
    ["data", "sft", "--task", "gp", "--out", "never-written"],
    ["train", "sft", str(ROOT / "configs/sft/tiny_cpu.yaml")],
])
def test_every_command_gives_the_same_error(command, tmp_path, monkeypatch):
    """The same bad ``--set`` is the same one-line error (exit 2, no traceback) from every command."""
    from spatialrl.cli import app

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, [*command, "--set", "limit=[1"])
    assert res.exit_code == 2, res.output
    assert "error: --set limit: cannot read value '[1' as YAML" in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output and not (tmp_path / "never-written").exists()
