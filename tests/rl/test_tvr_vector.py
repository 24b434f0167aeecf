"""RL on TVR's batch path: GRPO and PPO step their env slots through the rollout core, which batches all
slots into one ``TVRVectorEnv`` when the suite offers it. One update with the vector env on and off
(``task.options.vector_env``) is the same update, number for number (tiny model, CPU, llvmpipe)."""

from __future__ import annotations

import pytest

from spatialrl.train.config import load_config
from spatialrl.train.rl_config import GRPOConfig, PPOConfig

from .letters import REPO


@pytest.fixture(scope="module")
def rl_bench(tmp_path_factory):
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    bench = tmp_path_factory.mktemp("tvr-rl") / "bench"
    make_bench(bench, BenchConfig.preset(seed=7, sizes={"eval": 0, "sft": 0, "rl": 3, "diag_rotate": 0, "diag_move": 0},
                                         scenes={"sft": 0, "eval": 0, "rl": 2}), progress=False)
    return bench


@pytest.fixture
def batched_calls(monkeypatch):
    from spatialrl.envs import vector

    sizes: list[int] = []
    step = vector.VectorSlots.step

    def counting(self, jobs):
        sizes.append(len(jobs))
        return step(self, jobs)

    monkeypatch.setattr(vector.VectorSlots, "step", counting)
    return sizes


def same_numbers(rows: dict[bool, list[dict]], marker: str) -> dict:
    (off,), (on,) = rows[False], rows[True]
    assert marker in off
    for key, value in off.items():
        if key.startswith(("losses/", "rollout/", "rewards/", "episodes/")):
            assert on[key] == pytest.approx(value, abs=1e-6), key
    return on


def test_grpo_multi_turn_on_the_vector_env(tmp_path, tiny_model_dir, rl_bench, batched_calls):
    from spatialrl.io import read_jsonl
    from spatialrl.train.grpo import train as grpo

    rows = {}
    for on in (False, True):
        before = len(batched_calls)
        cfg = load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"grpo-{on}"), "updates": 1,
            "mode": "multi", "checkpoint.every": 0, "task.data": str(rl_bench), "task.split": "rl",
            "tasks_per_update": 2, "group_size": 2, "sampling.max_new_tokens": 8,
            "task.options": {"width": 64, "height": 64, "max_steps_single": 3, "max_steps_multi": 4, "vector_env": on}})
        grpo(cfg)
        rows[on] = [r for r in read_jsonl(tmp_path / f"grpo-{on}" / "metrics.jsonl") if "losses/policy_loss" in r]
        assert (len(batched_calls) > before) == on
    on = same_numbers(rows, "rewards/step/mean")
    assert on["rollout/trajectories"] == 4 and max(batched_calls) == 4  # all 4 slots in one call


def test_ppo_on_the_vector_env(tmp_path, tiny_model_dir, rl_bench, batched_calls):
    """PPO refills a slot as soon as its episode ends (resets of single slots between batched steps)."""
    from spatialrl.io import read_jsonl
    from spatialrl.train.ppo import train as ppo

    rows = {}
    for on in (False, True):
        cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"ppo-{on}"), "updates": 1,
            "num_envs": 3, "num_steps": 12, "epochs": 1, "checkpoint.every": 0, "task.name": "tvr",
            "task.data": str(rl_bench), "task.split": "rl", "task.max_turns": 30, "sampling.max_new_tokens": 8,
            "task.options": {"width": 64, "height": 64, "max_steps_single": 2, "max_steps_multi": 3, "vector_env": on}})
        ppo(cfg)
        rows[on] = [r for r in read_jsonl(tmp_path / f"ppo-{on}" / "metrics.jsonl") if "losses/approx_kl" in r]
    on = same_numbers(rows, "losses/approx_kl")
    assert on["charts/env_steps"] == 12 and on["charts/episodes"] >= 3 and max(batched_calls) == 3
