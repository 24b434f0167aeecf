"""The image-size rule of the RL recipes (``rl_common.adopt_model_image_sizes``): a run started from a
model that records its evaluation settings sees the frames the model was trained on, unless the recipe
says otherwise."""

from __future__ import annotations

import json
import shutil

from spatialrl.train.config import load_config
from spatialrl.train.rl_common import adopt_model_image_sizes
from spatialrl.train.rl_config import GRPOConfig, PPOConfig

from .letters import REPO


def recipe(cls, path: str, **values):
    return load_config(cls, REPO / path, {"task.data": "unused", **values})


def test_shipped_recipes_take_the_shipped_models_sizes():
    ppo = recipe(PPOConfig, "configs/ppo/virl_vl_small.yaml", **{"model.path": "builtin:virl-sft"})
    lines = adopt_model_image_sizes(ppo)
    assert ppo.task.options["grid_size"] == 224 and ppo.eval.options["grid_size"] == 224
    assert lines == ["task.options: grid_size=224 from builtin:virl-sft (its recorded image size)",
                     "eval.options: grid_size=224 from builtin:virl-sft (its recorded image size)"]
    # the frame layout is an image option too: the TVR models trained on joined frames are rolled out on them
    for path, model, memory, layout in (("configs/grpo/tvr_multi_small.yaml", "builtin:tvr-va-sft", "va",
                                         {"frames": "joined"}),
                                        ("configs/grpo/tvr_single_small.yaml", "builtin:tvr-ao-sft", "ao",
                                         {"frames": "joined"})):
        grpo = recipe(GRPOConfig, path, **{"model.path": model})
        adopt_model_image_sizes(grpo)
        for options in (grpo.task.options, grpo.eval.options):  # image keys only: memory stays the recipe's
            assert options == {"memory": memory, "width": 280, "height": 168, **layout}, path


def test_a_recipe_value_wins_with_a_notice():
    cfg = recipe(PPOConfig, "configs/ppo/virl_vl_small.yaml",
                 **{"model.path": "builtin:virl-sft", "task.options": {"grid_size": 448}})
    lines = adopt_model_image_sizes(cfg)
    assert cfg.task.options == {"grid_size": 448} and cfg.eval.options == {"grid_size": 224}
    assert lines[0] == ("task.options: grid_size=448 kept as the recipe sets them; builtin:virl-sft was trained "
                        "and is evaluated at grid_size=224")


def test_no_recorded_settings_or_another_task_change_nothing():
    fresh = recipe(PPOConfig, "configs/ppo/tiny_cpu.yaml")  # preset:tiny records nothing
    assert adopt_model_image_sizes(fresh) == [] and fresh.task.options == {}
    other = recipe(PPOConfig, "configs/ppo/virl_vl_small.yaml", **{"model.path": "builtin:tvr-va-sft"})
    before = (dict(other.task.options), dict(other.eval.options))
    assert adopt_model_image_sizes(other) == [] and (other.task.options, other.eval.options) == before


def test_a_model_folder_through_the_trainer(tmp_path, tiny_model_dir, letter_suite, capsys):
    """A model folder (``hf`` path) with recorded settings: PPO adopts them before it writes config.json,
    so the run folder records the sizes it trained at, and says so."""
    from spatialrl.train.ppo import train

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "spatialrl_model.json").write_text(json.dumps(  # what `spatialrl train sft` writes (its data's options)
        {"eval": {"task": "letters", "options": {"width": 28, "height": 20, "memory": "va"}, "max_new_tokens": 6}}))
    cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
        "model.path": str(folder), "task.name": "letters", "output_dir": str(tmp_path / "run"), "updates": 1,
        "checkpoint.every": 0, "sampling.max_new_tokens": 4, "task.options": {"letters": "e", "height": 24}})
    train(cfg)
    saved = json.loads((tmp_path / "run/config.json").read_text())
    assert saved["task"]["options"] == {"letters": "e", "height": 24, "width": 28}
    shown = capsys.readouterr().out
    assert f"task.options: width=28 from {folder}" in shown
    assert f"task.options: height=24 kept as the recipe sets them; {folder} was trained and is evaluated at height=20" \
        in shown
