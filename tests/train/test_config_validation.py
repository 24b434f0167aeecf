"""Issue 23 fault 8: out-of-range and non-finite config values are one error naming the key and what it
accepts, raised before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialrl.train.config import ConfigError, SFTConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("override", "message"), [
    ("--max_steps=-3", r"max_steps: must be an integer >= 0, got -3"),
    ("--checkpoint.every=-1", r"checkpoint.every: must be an integer >= 0, got -1"),
    ("--logging.every=0", r"logging.every: must be an integer >= 1, got 0"),
    ("--optim.lr=-1e-5", r"optim.lr: must be a number >= 0.0, got -1e-05"),
    ("--optim.lr=nan", r"optim.lr: expected a finite number \(not NaN or infinity\), got 'nan'"),
    ("--optim.lr=.nan", r"optim.lr: expected a finite number"),
    ("--epochs=.inf", r"epochs: expected a finite number \(not NaN or infinity\), got inf"),
    ("--epochs=-.inf", r"epochs: expected a finite number"),
    ("--epochs=-1", r"epochs: must be a number >= 0.0, got -1.0"),
    ("--eval.task=bogus", r"eval.task: unknown task 'bogus'; expected one of gp, tvr, virl"),
    ("--eval.batch_size=0", r"eval.batch_size: must be an integer >= 1, got 0"),
])
def test_sft_values_out_of_range(tmp_path, override, message):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data: {train: d}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(SFTConfig, recipe, [override])


def test_rl_task_name_must_be_a_task():
    from spatialrl.train.rl_config import GRPOConfig, PPOConfig

    for cls, recipe in ((PPOConfig, "configs/ppo/tiny_cpu.yaml"), (GRPOConfig, "configs/grpo/tiny_cpu.yaml")):
        with pytest.raises(ConfigError, match=r"task.name: unknown task 'tvrr'; expected one of gp, tvr, virl"):
            load_config(cls, ROOT / recipe, ["--task.name=tvrr"])
        with pytest.raises(ConfigError, match=r"checkpoint.every: must be an integer >= 0, got -5"):
            load_config(cls, ROOT / recipe, ["--checkpoint.every=-5"])


def test_train_cli_rejects_before_writing(tmp_path):
    from spatialrl.cli import app

    out = tmp_path / "run"
    for override in ("--optim.lr=nan", "--max_steps=-1", "--epochs=.inf"):
        res = CliRunner().invoke(app, ["train", "sft", str(ROOT / "configs/sft/tiny_cpu.yaml"),
                                       f"--output_dir={out}", "--data.train=somewhere", override])
        assert res.exit_code == 2, res.output
        assert res.output.startswith("error:") and "Traceback" not in res.output, res.output
        assert not out.exists()
