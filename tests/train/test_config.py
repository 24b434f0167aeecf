"""Recipes + dotted overrides, validated with errors that name the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from spatialrl.train.config import (
    ConfigError,
    SFTConfig,
    config_help,
    config_to_dict,
    load_config,
    parse_overrides,
)

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_recipe_plus_overrides(tmp_path):
    path = write(tmp_path, "data: {train: d}\noptim:\n  lr: 1e-5\n  schedule: linear\nmodel: {lora: {r: 4}}\n")
    cfg = load_config(SFTConfig, path, ["--optim.lr=3e-4", "--model.lora.enabled", "true", "--eval.split=null",
                                        "--max_steps=7", "--eval.options={memory: ao}"])
    assert cfg.optim.lr == 3e-4 and isinstance(cfg.optim.lr, float)  # YAML reads 1e-5 as text; we accept it
    assert cfg.optim.schedule == "linear" and cfg.model.lora.r == 4 and cfg.model.lora.enabled is True
    assert cfg.max_steps == 7 and cfg.eval.split is None and cfg.eval.options == {"memory": "ao"}
    assert config_to_dict(cfg)["model"]["lora"]["r"] == 4
    assert load_config(SFTConfig, path).optim.lr == 1e-5


@pytest.mark.parametrize(("text", "overrides", "message"), [
    ("data: {train: d}\noptim: {lrr: 1}\n", [], r"recipe.yaml: optim.lrr: unknown key \(did you mean optim.lr\?\)"),
    ("data: {train: d}\n", ["--optim.lrr=1"], r"--optim.lrr: unknown key 'lrr' \(did you mean 'lr'\?\)"),
    ("data: {train: d}\n", ["--optim.lr.x=1"], r"--optim.lr.x: optim.lr has no sub-keys"),
    ("data: {train: d}\noptim: {schedule: wavy}\n", [], r"optim.schedule: expected one of 'cosine', 'linear'"),
    ("data: {train: d}\nmax_steps: 2.5\n", [], r"max_steps: expected an integer, got 2.5"),
    ("data: {train: d}\nmodel: {freeze_vision: maybe}\n", [], r"model.freeze_vision: expected true/false"),
    ("data: {train: d}\nmodel: 3\n", [], r"model: expected a mapping of ModelConfig fields"),
    ("data: {train: d}\ngrad_accum: 0\n", [], r"recipe.yaml: grad_accum: must be >= 1, got 0"),
    ("max_steps: 3\n", [], r"data.train: required"),
    ("- a\n- b\n", [], r"top level must be a mapping"),
])
def test_errors_name_the_place_and_the_fix(tmp_path, text, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(SFTConfig, write(tmp_path, text), overrides)


def test_override_syntax():
    assert parse_overrides(["--a.b=1", "--c", "x y", "--d="]) == {"a.b": 1, "c": "x y", "d": ""}
    for bad in (["a=1"], ["--a"], ["--"]):
        with pytest.raises(ConfigError):
            parse_overrides(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(SFTConfig, "/nonexistent.yaml")


def test_help_lists_every_leaf_with_its_text():
    rows = {key: (tp, default, text) for key, tp, default, text in config_help(SFTConfig)}
    assert rows["optim.lr"][2].startswith("Peak learning rate") and rows["model.lora.r"][1] == "16"
    assert all(text for _, _, text in rows.values())  # every field documents itself
    assert "data.train" in rows and "eval.options" in rows


def test_shipped_recipes_are_valid():
    recipes = sorted((ROOT / "configs" / "sft").glob("*.yaml"))
    assert len(recipes) >= 4
    for recipe in recipes:
        cfg = load_config(SFTConfig, recipe)
        assert cfg.data.train


def test_accelerate_configs_load():
    from accelerate.commands.config.config_args import load_config_from_file

    files = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))
    kinds = {}
    for path in files:
        cfg = load_config_from_file(str(path))
        kinds[path.name] = (str(cfg.distributed_type), cfg.num_processes)
    for n in (1, 2, 4, 8):
        assert kinds[f"zero2_{n}gpu.yaml"] == ("DistributedType.DEEPSPEED", n)
        assert kinds[f"zero2_offload_{n}gpu.yaml"] == ("DistributedType.DEEPSPEED", n)
        assert kinds[f"fsdp2_{n}gpu.yaml"] == ("DistributedType.FSDP", n)
    assert kinds["cpu_2proc.yaml"][1] == 2
