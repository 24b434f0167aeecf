"""The built-in models' GPU job, rehearsed on CPU (SMOKE=1): training paused across commands and resumed.

scripts/gpu/train_builtin.sh is what retrains the shipped models on the GPU machine, where a command is
cut at 10 minutes: the first command's training is stopped by SIGTERM at TRAIN_END_S (a checkpoint, and
its model packed as weights), the next resumes it; when that one also runs out of time, the run is ended
at its checkpoint so a final model exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stage(tmp_path: Path, name: str, **env: str) -> str:
    out = tmp_path / f"out-{name}"
    out.mkdir()
    full = {**os.environ, "SMOKE": "1", "WORK": str(tmp_path / "work"), "OUT": str(out), "NO_EVAL_DATA": "1",
            "TOTAL_MIN": "3", "PY": sys.executable, **env}
    full["PATH"] = f"{Path(sys.executable).parent}:{full['PATH']}"
    proc = subprocess.run(["bash", str(ROOT / "scripts/gpu/train_builtin.sh")], env=full, capture_output=True,
                          text=True, timeout=600)
    timeline = (out / "timeline.txt").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return timeline


@pytest.mark.slow
def test_training_pauses_with_weights_and_resumes_to_a_final_model(tmp_path):
    # data ~10-30 s, then training until SIGTERM at 90 s: far from the 3-minute budget, so it pauses
    first = stage(tmp_path, "train", STAGE="train", TRAIN_END_S="90")
    assert "render check:" in first and "batch == single" in first
    for name in ("virl-sft", "tvr-ao-sft", "tvr-va-sft"):
        assert f"paused {name}" in first, first
        # compiled in the data stage (scripts/gpu/compile_data.py), so the trainer found the folder ready
        assert f"data/{name} -> tensors-" in first, first
        assert "compiling" not in (tmp_path / "work" / "logs" / f"train-{name}.log").read_text()
        with tarfile.open(tmp_path / "out-train" / f"{name}.tar.gz") as tar:
            names = tar.getnames()
        assert f"{name}/model.safetensors" in names and f"{name}/spatialrl_model.json" in names
        # the image-use curve on the held-out data (validation bench seed 1, validation city seed 9)
        metrics = (tmp_path / "work" / "runs" / name / "metrics.jsonl").read_text()
        assert '"heldout/image_swap_gap"' in metrics, (name, metrics[-2000:])
    # resumed and stopped again before the budget: the run is ended at its checkpoint (a final model)
    second = stage(tmp_path, "resume", STAGE="resume", TRAIN_END_S="40")
    for name in ("virl-sft", "tvr-ao-sft", "tvr-va-sft"):
        assert "resume=auto" in second and (f"ended {name} at its checkpoint" in second
                                             or f"trained {name}" in second), second
        assert (tmp_path / "work" / "runs" / name / "final" / "model.safetensors").is_file()
        assert (tmp_path / "out-resume" / f"{name}.tar.gz").is_file()
    # the next session: the returned weights kept (keep_weights.sh) and continued on fresh data (DATA_ROUND),
    # with gradient accumulation (ACCUM: what a GPU with less memory per arm gets)
    kept = tmp_path / "kept"
    subprocess.run(["bash", str(ROOT / "scripts/gpu/keep_weights.sh"), str(tmp_path / "out-resume"), str(kept)],
                   check=True, capture_output=True, text=True)
    assert (kept / "virl-sft" / "model.safetensors").is_file()
    (tmp_path / "work").rename(tmp_path / "work-session-1")
    third = stage(tmp_path, "next", STAGE="train", TRAIN_END_S="60", ARMS="virl-sft", INIT=str(kept),
                  DATA_ROUND="1", ACCUM="2")
    assert f"init={kept}/virl-sft, accum=2, frames on device" in third, third
    assert (tmp_path / "work" / "data" / "city-201").is_dir() and not (tmp_path / "work" / "data" / "city-101").exists()
    assert "grad_accum=2" in (tmp_path / "work" / "runs" / "virl-sft" / "config.json").read_text().replace('": ', "=")
