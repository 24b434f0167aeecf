"""Renamed config keys: the old spelling still loads for one release, with a FutureWarning that names the
file (or flag) and the new key; both spellings at once are an error."""

from __future__ import annotations

import warnings

import pytest

from spatialrl.train.config import ConfigError, load_config
from spatialrl.train.rl_config import GRPOConfig, PPOConfig


def test_old_ppo_keys_in_a_recipe_load_with_a_deprecation_message(tmp_path):
    recipe = tmp_path / "old.yaml"
    recipe.write_text("task: {name: tvr}\nppo_epochs: 3\nminibatch_size: 2\ntime_limit_minutes: 5\n")
    with pytest.warns(FutureWarning) as caught:
        cfg = load_config(PPOConfig, recipe)
    assert (cfg.epochs, cfg.micro_batch_size, cfg.time_budget_minutes) == (3, 2, 5.0)
    messages = sorted(str(w.message) for w in caught)
    assert messages == [
        f"{recipe}: minibatch_size: renamed to micro_batch_size; the old key is accepted until the next release, "
        "then it is an error",
        f"{recipe}: ppo_epochs: renamed to epochs; the old key is accepted until the next release, then it is an error",
        f"{recipe}: time_limit_minutes: renamed to time_budget_minutes; the old key is accepted until the next "
        "release, then it is an error",
    ]


def test_old_keys_as_overrides_name_the_flag():
    with pytest.warns(FutureWarning, match=r"^--time_limit_minutes: renamed to time_budget_minutes"):
        cfg = load_config(GRPOConfig, None, ["--time_limit_minutes=2"])
    assert cfg.time_budget_minutes == 2.0
    with pytest.warns(FutureWarning, match=r"^--ppo_epochs: renamed to epochs"):
        assert load_config(PPOConfig, None, {"ppo_epochs": 7}).epochs == 7


def test_a_new_key_overrides_an_old_one_in_the_recipe(tmp_path):
    recipe = tmp_path / "old.yaml"
    recipe.write_text("ppo_epochs: 3\n")
    with pytest.warns(FutureWarning, match="ppo_epochs: renamed to epochs"):
        assert load_config(PPOConfig, recipe, ["--epochs=1"]).epochs == 1


def test_both_spellings_in_one_recipe_are_an_error(tmp_path):
    recipe = tmp_path / "both.yaml"
    recipe.write_text("ppo_epochs: 3\nepochs: 2\n")
    with pytest.raises(ConfigError, match="ppo_epochs: renamed to epochs, which is also given"):
        load_config(PPOConfig, recipe)


def test_current_keys_load_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config(PPOConfig, None, {"epochs": 2, "micro_batch_size": 3, "time_budget_minutes": 1})
    assert (cfg.epochs, cfg.micro_batch_size, cfg.time_budget_minutes) == (2, 3, 1.0)
