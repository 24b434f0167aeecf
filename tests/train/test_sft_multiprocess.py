"""Two CPU processes (gloo DDP through `accelerate launch`) train in lock-step, and their update equals
one process's update over the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from spatialrl.train.config import SFTConfig, load_config
from spatialrl.train.sft import train

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_stay_in_sync_and_match_one_process(tmp_path, virl_data, tiny_builtin):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"data: {{train: {virl_data}, eval: {virl_data}, eval_samples: 7}}\neval_loss_every: 1\n"
        f"model: {{path: {tiny_builtin}}}\nmax_steps: 2\nper_device_batch_size: 2\n"
        "grad_accum: 2\ncheck_sync_every: 1\noptim: {lr: 3e-3, warmup_ratio: 0.0}\n"
        "logging: {report_to: none, every: 1}\ncheckpoint: {resume: never}\n")
    two = tmp_path / "two"
    launcher = Path(sys.executable).with_name("accelerate")
    cmd = [str(launcher), "launch", "--config_file", str(ROOT / "configs/accelerate/cpu_2proc.yaml"),
           "--main_process_port", str(free_port()), "-m", "spatialrl.cli", "train", "sft", str(recipe),
           f"--output_dir={two}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    summary = json.loads((two / "summary.json").read_text())
    digests = summary["parameter_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]  # both replicas bit-identical after every update
    setup = json.loads((two / "metrics.jsonl").read_text().splitlines()[0])
    assert setup["setup/processes"] == 2
    # the held-out passes (true and images swapped) are collective: both processes ran them in step
    heldout = [json.loads(r) for r in (two / "metrics.jsonl").read_text().splitlines() if "heldout/loss" in r]
    assert len(heldout) >= 2 and all("heldout/image_swap_gap" in r for r in heldout)

    # the same global batch (2 processes x 2 samples x 2 micro-batches) in one process
    one = tmp_path / "one"
    train(load_config(SFTConfig, recipe, [f"--output_dir={one}", "--per_device_batch_size=4",
                                          "--check_sync_every=0"]))
    a, b = load_file(str(two / "final" / "model.safetensors")), load_file(str(one / "final" / "model.safetensors"))
    init = load_file(str(tiny_builtin / "model.safetensors"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert any(not torch.equal(a[k], init[k]) for k in a)
