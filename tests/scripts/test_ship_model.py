"""scripts/ship_model.py: a run's weights folder becomes a built-in model with its lineage, or nothing is
written. The "run" is the shipped joined AO model's own folder with a run record, as the trainer writes one."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "src/spatialrl/models/weights/tvr-ao-sft"


@pytest.fixture
def ship(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("ship_model", ROOT / "scripts/ship_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    weights = tmp_path / "weights"
    shutil.copytree(SHIPPED, weights / "tvr-ao-sft")
    record = json.loads((weights / "tvr-ao-sft/spatialrl_model.json").read_text())
    record["eval"].pop("tried_penalty", None)  # the tests below set it where they need it
    (weights / "tvr-ao-sft/spatialrl_model.json").write_text(json.dumps(record))
    monkeypatch.setattr(module, "WEIGHTS", weights)
    run = tmp_path / "run"
    shutil.copytree(SHIPPED, run)
    config = json.loads((run / "config.json").read_text())
    config["text_config"]["dtype"] = config["vision_config"]["dtype"] = "float32"  # as a training run saves it
    (run / "config.json").write_text(json.dumps(config))
    tok = json.loads((run / "tokenizer_config.json").read_text())
    (run / "tokenizer_config.json").write_text(json.dumps({**tok, "is_local": True, "local_files_only": True}))
    va_eval = {"task": "tvr", "options": {"memory": "va", "frames": "joined"}, "max_new_tokens": 16}
    (run / "spatialrl_model.json").write_text(json.dumps(
        {"source": "builtin:tvr-ao-sft", "updates": 7, "recipe": {"lr": 2e-4}, "dataset": {"kind": "vaj"},
         "eval": va_eval}))

    def call(*argv: str) -> None:
        monkeypatch.setattr(sys, "argv", ["ship_model.py", str(run), *argv,
                                          "--trained-on", "a test", "--command", "pytest"])
        module.main()
    return call, weights, run, va_eval


def test_a_run_ships_with_its_lineage_and_settings(ship):
    call, weights, run, va_eval = ship
    base = json.loads((SHIPPED / "spatialrl_model.json").read_text())
    call("tvr-va-sft")
    out = weights / "tvr-va-sft"
    record = json.loads((out / "spatialrl_model.json").read_text())
    assert record["eval"] == va_eval  # what `spatialrl eval hf:` applies: the run's own settings
    assert record["architecture"] == base["architecture"]
    before = base.get("continued", [])
    before = [before] if isinstance(before, dict) else before
    assert record["continued"][:-1] == before
    assert record["continued"][-1] == {"from": "builtin:tvr-ao-sft", "updates": 7, "trained_on": "a test",
                                       "command": "pytest", "recipe": {"lr": 2e-4}, "dataset": {"kind": "vaj"}}
    config = json.loads((out / "config.json").read_text())
    assert "dtype" not in config["text_config"] and "dtype" not in config["vision_config"]
    assert not {"is_local", "local_files_only"} & set(json.loads((out / "tokenizer_config.json").read_text()))
    assert (out / "model.safetensors").read_bytes() == (run / "model.safetensors").read_bytes()
    assert sorted(p.name for p in weights.iterdir()) == ["tvr-ao-sft", "tvr-va-sft"]  # no staging left behind


def test_the_base_models_tried_penalty_is_kept(ship):
    call, weights, _, va_eval = ship
    path = weights / "tvr-ao-sft/spatialrl_model.json"
    record = json.loads(path.read_text())
    record["eval"]["tried_penalty"] = "inf"
    path.write_text(json.dumps(record))
    call("tvr-va-sft", "--base", "builtin:tvr-ao-sft")
    shipped = json.loads((weights / "tvr-va-sft/spatialrl_model.json").read_text())
    assert shipped["eval"] == {**va_eval, "tried_penalty": "inf"}


def test_a_missing_file_writes_nothing(ship):
    call, weights, run, _ = ship
    (run / "tokenizer.json").unlink()
    before = (weights / "tvr-ao-sft" / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match="tokenizer.json is missing"):
        call("tvr-ao-sft")
    assert (weights / "tvr-ao-sft" / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in weights.iterdir()) == ["tvr-ao-sft"]
