"""Trained model folders carry their evaluation settings, and `spatialrl eval` applies them."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from spatialrl.errors import DataError
from spatialrl.eval.cli import apply_model_settings
from spatialrl.models.builtin import model_eval_settings
from spatialrl.train.sft import train

from .test_sft_train import make_cfg


def test_shipped_models_record_their_settings():
    va = model_eval_settings("builtin:tvr-va-sft")["options"]
    assert {k: va[k] for k in ("width", "height", "memory", "history_len")} == {
        "width": 280, "height": 168, "memory": "va", "history_len": 5}
    assert model_eval_settings("builtin:tvr-ao-sft")["options"]["memory"] == "ao"
    # intersection_in_text is recorded since the model also trained with the vision-required prompt (false)
    assert model_eval_settings("builtin:virl-sft") == {"task": "virl", "options": {
        "grid_size": 224, "mode": "vl", "intersection_in_text": True}, "max_new_tokens": 96}
    assert model_eval_settings("builtin:small-random") is None and model_eval_settings("expert") is None


def test_eval_applies_them_unless_overridden():
    console = Console(record=True, width=200)
    options: dict = {}
    budget = apply_model_settings(console, "builtin:tvr-va-sft", "tvr", options, {"width": 640}, None)
    recorded = model_eval_settings("builtin:tvr-va-sft")["options"]
    assert options == {k: v for k, v in recorded.items() if k != "width"} and budget == 16  # the user's width wins
    assert options["height"] == 168 and options["memory"] == "va"
    shown = console.export_text()
    assert "height=168" in shown and "max-new-tokens 16" in shown
    options = {}
    assert apply_model_settings(console, "builtin:tvr-va-sft", "tvr", options, {}, 40) == 40
    options = {}
    assert apply_model_settings(console, "builtin:tvr-va-sft", "virl", options, {}, None) == 256  # other task
    assert options == {}


def test_sft_writes_the_settings_of_its_data(tmp_path, tvr_ao_data, tiny_builtin):
    train(make_cfg(tmp_path / "run", tvr_ao_data, tiny_builtin, max_steps=1))
    meta = json.loads((tmp_path / "run" / "final" / "spatialrl_model.json").read_text())
    assert meta["eval"]["task"] == "tvr"
    assert meta["eval"]["options"]["memory"] == "ao" and meta["eval"]["options"]["width"] == 112
    assert model_eval_settings(f"hf:{tmp_path / 'run' / 'final'}") == meta["eval"]


def test_a_malformed_block_is_named(tmp_path, tiny_builtin):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_builtin, folder)
    meta = json.loads((folder / "spatialrl_model.json").read_text())
    (folder / "spatialrl_model.json").write_text(json.dumps({**meta, "eval": "width=280"}))
    with pytest.raises(DataError, match="spatialrl_model.json: field 'eval'"):
        model_eval_settings(f"hf:{folder}")


def test_joined_frames_data_trains_and_its_model_asks_for_them_back(tmp_path, tvr_bench, tiny_builtin):
    """frames=joined (one side-by-side image per action-only turn) is a dataset option like memory: the
    data holds one (H, 2W) image per sample, and the trained model's eval settings bring the layout back."""
    from PIL import Image

    from spatialrl.envs.registry import get_suite
    from spatialrl.train.data import build_sft_dataset

    from .conftest import tvr_options

    data = tmp_path / "joined"
    build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="ao", frames="joined", limit=2), data,
                      progress=False)
    rows = [json.loads(line) for line in (data / "samples.jsonl").read_text().splitlines()]
    images = [p["image"] for r in rows for m in r["messages"] for p in m["content"] if p["type"] == "image"]
    assert rows and len(images) == len(rows)  # one image per sample, not two
    assert {Image.open(data / im).size for im in images} == {(224, 64)}  # (W, H): two 112x64 frames
    train(make_cfg(tmp_path / "run", data, tiny_builtin, max_steps=1, **{"model.max_pixels": 224 * 64}))
    recorded = model_eval_settings(f"hf:{tmp_path / 'run' / 'final'}")["options"]
    assert recorded["frames"] == "joined" and recorded["memory"] == "ao"
    options: dict = {}
    apply_model_settings(Console(record=True, width=200), f"hf:{tmp_path / 'run' / 'final'}", "tvr", options, {}, None)
    assert options["frames"] == "joined"
