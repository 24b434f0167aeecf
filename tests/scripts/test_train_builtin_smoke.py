"""The built-in models' GPU job, rehearsed on CPU (SMOKE=1): training paused across commands and resumed.

scripts/gpu/train_builtin.sh is what retrains the shipped models on the GPU machine, where a command is
cut at 10 minutes: the first command's training is stopped by SIGTERM at TRAIN_END_S (a checkpoint, and
its model packed as weights), the next resumes it; when that one also runs out of time, the run is ended
at its checkpoint so a final model exists.

The pauses are wall-clock deadlines, so the test's time is mostly TRAIN_END_S of the training commands.
The first session's data stage runs as a command of its own (STAGE=data, then STAGE=fit: what
STAGE=train does in one), so the first deadline covers only merge, compile and training. Each deadline
leaves its trainers about twice what they took on a 2-core VM under a load average of ~10 to load and
reach their first update (in the first, also a held-out score: VAL_SAMPLES keeps that short in SMOKE, and
SMOKE gives each process one torch thread). The next session's command is one
STAGE=train: only the V-IRL arm, on one city, for a few seconds of budget, finishing without a pause
(what it checks, INIT, DATA_ROUND and ACCUM, is set up before any training).
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from .rehearsal import rehearse

ROOT = Path(__file__).resolve().parents[2]


def stage(tmp_path: Path, name: str, **env: str) -> str:
    return rehearse("train_builtin.sh", tmp_path / f"out-{name}",
                    {"WORK": str(tmp_path / "work"), "NO_EVAL_DATA": "1", "TOTAL_MIN": "3", **env}, timeout=600)


@pytest.mark.slow
def test_training_pauses_with_weights_and_resumes_to_a_final_model(tmp_path):
    # the data stage (~20-45 s) on its own, so the training command's deadline need not cover it
    data = stage(tmp_path, "data", STAGE="data")
    assert "render check:" in data and "batch == single" in data
    # merge and compile (~8-20 s), then training until SIGTERM at 50 s: far from the 3-minute budget, so it
    # pauses (trainers load in ~4-12 s; one thread each: the first held-out score comes ~5 s later)
    first = stage(tmp_path, "train", STAGE="fit", TRAIN_END_S="50")
    for name in ("virl-sft", "tvr-ao-sft", "tvr-va-sft"):
        assert f"paused {name}" in first, first
        # compiled before training (scripts/gpu/compile_data.py), so the trainer found the folder ready
        assert f"data/{name} -> tensors-" in first, first
        assert "compiling" not in (tmp_path / "work" / "logs" / f"train-{name}.log").read_text()
        with tarfile.open(tmp_path / "out-train" / f"{name}.tar.gz") as tar:
            names = tar.getnames()
        assert f"{name}/model.safetensors" in names and f"{name}/spatialrl_model.json" in names
        # the image-use curve on the held-out data (validation bench seed 1, validation city seed 9)
        metrics = (tmp_path / "work" / "runs" / name / "metrics.jsonl").read_text()
        assert '"heldout/image_swap_gap"' in metrics, (name, metrics[-2000:])
    # resumed and stopped again before the budget: the run is ended at its checkpoint (a final model)
    # (the trainers load and resume within ~5-12 s of the 30)
    second = stage(tmp_path, "resume", STAGE="resume", TRAIN_END_S="30")
    for name in ("virl-sft", "tvr-ao-sft", "tvr-va-sft"):
        assert "resume=auto" in second and (f"ended {name} at its checkpoint" in second
                                             or f"trained {name}" in second), second
        assert (tmp_path / "work" / "runs" / name / "final" / "model.safetensors").is_file()
        assert (tmp_path / "out-resume" / f"{name}.tar.gz").is_file()
    # the next session: the returned weights kept (keep_weights.sh) and continued on fresh data (DATA_ROUND),
    # with gradient accumulation (ACCUM: what a GPU with less memory per arm gets) and a continuation's recipe
    # overrides (TRAIN_ARGS). One city and a 3-second budget: the run ends finished, not paused. NBENCH keeps
    # its default: a V-IRL-only run must build no TVR bench (it built eight on the GPU, 2026-12-06)
    kept = tmp_path / "kept"
    subprocess.run(["bash", str(ROOT / "scripts/gpu/keep_weights.sh"), str(tmp_path / "out-resume"), str(kept)],
                   check=True, capture_output=True, text=True)
    assert (kept / "virl-sft" / "model.safetensors").is_file()
    (tmp_path / "work").rename(tmp_path / "work-session-1")
    third = stage(tmp_path, "next", STAGE="train", TOTAL_MIN="0.05", ARMS="virl-sft", INIT=str(kept),
                  DATA_ROUND="1", ACCUM="2", NCITY="1", TRAIN_ARGS="--optim.lr=2e-4 --optim.warmup_ratio=0.02")
    assert f"init={kept}/virl-sft, accum=2, frames on device" in third, third
    assert "trained virl-sft" in third, third
    assert (tmp_path / "work" / "data" / "city-201").is_dir() and not (tmp_path / "work" / "data" / "city-101").exists()
    assert not list((tmp_path / "work" / "data").glob("bench-*")), sorted((tmp_path / "work" / "data").iterdir())
    config = (tmp_path / "work" / "runs" / "virl-sft" / "config.json").read_text().replace('": ', "=")
    assert "grad_accum=2" in config
    assert '"lr=0.0002' in config and '"warmup_ratio=0.02' in config  # TRAIN_ARGS reach every arm's recipe
