"""Both trainers under `accelerate launch` with two CPU processes (gloo DDP): each process plays its own
env batch, gradients synchronise, metrics combine, one checkpoint is written."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from .letters import REPO, read_updates


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(algo: str, recipe: str, overrides: dict) -> subprocess.CompletedProcess:
    accelerate = shutil.which("accelerate") or os.path.join(os.path.dirname(sys.executable), "accelerate")
    cmd = [accelerate, "launch", "--config_file", str(REPO / "configs/accelerate/cpu_2proc.yaml"),
           "--main_process_port", str(free_port()), str(REPO / "tests/rl/launch_letters.py"), algo,
           str(REPO / recipe), json.dumps(overrides)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


@pytest.mark.slow
def test_both_trainers_with_two_processes(tmp_path, tiny_model_dir):
    for algo in ("grpo", "ppo"):
        run = tmp_path / algo
        common = {"model.path": str(tiny_model_dir), "task.name": "letters", "output_dir": str(run),
                  "updates": 2, "checkpoint.every": 1, "sampling.max_new_tokens": 4, "task.options": {"letters": "e"}}
        if algo == "grpo":
            common.update({"tasks_per_update": 2, "group_size": 2, "mini_batches": 2, "micro_batch_size": 2})
            per_process_steps = 2 * 2 * 2  # tasks × G × 2 turns
        else:
            common.update({"num_envs": 2, "num_steps": 4, "micro_batch_size": 2, "grad_accum": 2})
            per_process_steps = 4
        result = launch(algo, f"configs/{algo}/tiny_cpu.yaml", common)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        updates = read_updates(run)
        assert sorted(updates) == [1, 2]
        setup = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
        assert setup["setup/processes"] == 2
        assert updates[2]["charts/env_steps"] == 2 * 2 * per_process_steps  # summed over both processes
        assert (run / "final/model.safetensors").is_file()
        assert (run / "checkpoints/step-000002/trainer_state.json").is_file()


@pytest.mark.slow
def test_ppo_critic_warmup_with_two_processes(tmp_path, tiny_model_dir):
    """Critic warm-up under DDP: every parameter still gets a gradient each backward (zeros for the
    model; a parameter without one stalls DDP's reducer), and the model comes out unchanged."""
    import torch
    from safetensors.torch import load_file

    run = tmp_path / "ppo"
    result = launch("ppo", "configs/ppo/tiny_cpu.yaml", {
        "model.path": str(tiny_model_dir), "task.name": "letters", "output_dir": str(run), "updates": 2,
        "critic_warmup": 2, "checkpoint.every": 0, "sampling.max_new_tokens": 4, "task.options": {"letters": "e"},
        "num_envs": 2, "num_steps": 4, "micro_batch_size": 2, "grad_accum": 2})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    before, after = load_file(str(tiny_model_dir / "model.safetensors")), load_file(str(run / "final/model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert read_updates(run)[2]["losses/value_loss"] > 0
