"""One update of each trainer on the real tasks (V-IRL VL with verification retries and JSON answers;
TVR with rendered frames and its shaped reward; TVR per-step expert prompts), with the tiny model."""

from __future__ import annotations

import pytest

from spatialrl.train.config import load_config
from spatialrl.train.rl_config import GRPOConfig, PPOConfig
from tests.transformers_release import QWEN_TAKES_ENCODED_IMAGES, needs_qwen_encoded_images

from .letters import REPO


@pytest.mark.slow
def test_one_update_on_each_real_task(tmp_path, tiny_model_dir):
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset
    from spatialrl.io import read_jsonl
    from spatialrl.train.grpo import train as grpo
    from spatialrl.train.ppo import train as ppo

    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    ppo_cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
        "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / "ppo"), "updates": 1, "num_envs": 4,
        "num_steps": 8, "epochs": 1, "checkpoint.every": 0, "task.data": str(virl), "sampling.max_new_tokens": 16,
        "task.options": {"grid_size": 448, "episodes": 8, "seed": 42}})
    last = ppo(ppo_cfg)["last"]
    assert last["charts/env_steps"] == 8 and last["rollout/step_reward_max"] <= 1.0
    assert last["rollout/step_reward_min"] >= -1.5  # V-IRL's rewards: +1, -1, -1.5

    bench = tmp_path / "bench"
    make_bench(bench, BenchConfig.preset(seed=7, sizes={"eval": 0, "sft": 2, "rl": 2, "diag_rotate": 0, "diag_move": 0},
                                         scenes={"sft": 1, "eval": 0, "rl": 1}), progress=False)
    for mode, split in (("multi", "rl"), ("single", "sft")):
        cfg = load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"grpo-{mode}"), "updates": 1, "mode": mode,
            "checkpoint.every": 0, "task.data": str(bench), "task.split": split, "tasks_per_update": 2, "group_size": 2,
            "sampling.max_new_tokens": 8, "pose_anchored": mode == "multi", "single.prompts_per_update": 2,
            "task.options": {"width": 112, "height": 112, "max_steps_single": 3, "max_steps_multi": 3},
            # an in-training eval of exactly N episodes (TVR lists `limit: None` among its defaults)
            "eval.every": 1, "eval.task": "tvr", "eval.data": str(bench), "eval.split": "rl", "eval.episodes": 1,
            "eval.options": {"width": 112, "height": 112, "max_steps_multi": 2, "max_steps_single": 2}})
        last = grpo(cfg)["last"]
        evals = [r for r in read_jsonl(tmp_path / f"grpo-{mode}" / "metrics.jsonl") if "eval/overall/n" in r]
        assert evals and all(r["eval/overall/n"] == 1 for r in evals)
        if mode == "multi":  # TVR's four shaped components, each logged
            assert {f"rewards/{c}/mean" for c in ("step", "format", "progress", "terminal")} <= set(last)
            assert 1 <= last["episodes/length_mean"] <= 3
            # G=2 copies of a task share their frames: the rollout cache encodes each distinct one once
            # (where the installed transformers can take encoded images: not 5.17, the GPU machine's)
            if QWEN_TAKES_ENCODED_IMAGES:
                assert last["charts/images_cached"] > 0 and last["charts/images_encoded"] > 0
        else:
            assert "rewards/match/mean" in last and last["episodes/length_mean"] == 1


def assert_same_numbers(off: list[dict], on: list[dict]) -> None:
    """Two updates each; the cached run took images from its cache and logged what the uncached one did."""
    assert len(off) == len(on) == 2
    for a, b in zip(off, on, strict=True):
        assert b["charts/images_cached"] > 0 and "charts/images_cached" not in a
        for key, value in a.items():
            if key.startswith(("losses/", "rollout/", "rewards/", "episodes/")):
                assert b[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.slow
@needs_qwen_encoded_images
def test_vision_cache_changes_no_number(tmp_path, tiny_model_dir):
    """Two multi-turn GRPO updates on TVR with VA memory and a frozen vision tower (rollouts, old
    log-probs and the training forward all take cached features), with the cache off and on: the same
    run, number for number."""
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.io import read_jsonl
    from spatialrl.train.grpo import train as grpo

    bench = tmp_path / "bench"
    make_bench(bench, BenchConfig.preset(seed=7, sizes={"eval": 0, "sft": 0, "rl": 2, "diag_rotate": 0, "diag_move": 0},
                                         scenes={"sft": 0, "eval": 0, "rl": 1}), progress=False)
    rows = {}
    for mb in (0, 256):
        cfg = load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "model.freeze_vision": True, "output_dir": str(tmp_path / f"c{mb}"),
            "updates": 2, "mode": "multi", "checkpoint.every": 0, "task.data": str(bench), "task.split": "rl",
            "tasks_per_update": 2, "group_size": 2, "sampling.max_new_tokens": 8, "sampling.vision_cache_mb": mb,
            "task.options": {"memory": "va", "width": 112, "height": 112, "max_steps_multi": 4}})
        grpo(cfg)
        rows[mb] = [r for r in read_jsonl(tmp_path / f"c{mb}" / "metrics.jsonl") if "losses/policy_loss" in r]
    assert_same_numbers(rows[0], rows[256])


@pytest.mark.slow
def test_vision_cache_changes_no_number_in_mllama_ppo(tmp_path):
    """PPO on V-IRL with a tiny Llama-3.2-Vision (frozen tower: the scoring pass and every epoch take the
    cached cross-attention states), cache off and on: the same two updates, number for number."""
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset
    from spatialrl.io import read_jsonl
    from spatialrl.models.tiny import save_tiny
    from spatialrl.train.ppo import train as ppo

    model_dir = save_tiny("mllama", tmp_path / "mllama", seed=0)
    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    rows = {}
    for mb in (0, 256):
        cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
            "model.path": str(model_dir), "model.freeze_vision": True, "output_dir": str(tmp_path / f"c{mb}"),
            "updates": 2, "num_envs": 2, "num_steps": 4, "epochs": 2, "micro_batch_size": 2, "grad_accum": 1,
            "checkpoint.every": 0, "task.data": str(virl), "sampling.max_new_tokens": 12,
            "sampling.vision_cache_mb": mb, "task.options": {"grid_size": 112, "episodes": 8, "seed": 42}})
        ppo(cfg)
        rows[mb] = [r for r in read_jsonl(tmp_path / f"c{mb}" / "metrics.jsonl") if "losses/approx_kl" in r]
    assert_same_numbers(rows[0], rows[256])


def test_env_threads_change_no_number(tmp_path, tiny_model_dir):
    """V-IRL envs step in threads (``task.env_threads``); each env steps on its own answer, so one PPO
    update is the same number for number with 1 and 3 threads. The rollout's time split is logged."""
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset
    from spatialrl.io import read_jsonl
    from spatialrl.train.ppo import train as ppo

    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    rows = {}
    for threads in (1, 3):
        cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"t{threads}"), "updates": 1,
            "num_envs": 3, "num_steps": 6, "epochs": 1, "checkpoint.every": 0, "task.data": str(virl),
            "task.env_threads": threads, "sampling.max_new_tokens": 8,
            "task.options": {"grid_size": 112, "episodes": 6, "seed": 42}})
        ppo(cfg)
        rows[threads] = [r for r in read_jsonl(tmp_path / f"t{threads}" / "metrics.jsonl") if "losses/approx_kl" in r]
    (one,), (three,) = rows[1], rows[3]
    assert {"train/generate_seconds", "train/env_seconds", "train/tokenize_seconds"} <= set(three)
    assert three["train/env_seconds"] > 0 and three["train/tokenize_seconds"] > 0
    for key, value in one.items():
        if key.startswith(("losses/", "rollout/", "episodes/")):
            assert three[key] == pytest.approx(value, abs=1e-6), key


def test_env_threads_change_no_number_in_grpo(tmp_path, tiny_model_dir):
    """Multi-turn GRPO on V-IRL starts a task's G copies at once (``EnvPool.start_many``: resets and first
    prompts in the env threads): one update is the same number for number with 1 and 3 threads."""
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset
    from spatialrl.io import read_jsonl
    from spatialrl.train.grpo import train as grpo

    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    rows = {}
    for threads in (1, 3):
        cfg = load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"t{threads}"), "updates": 1,
            "mode": "multi", "checkpoint.every": 0, "task.name": "virl", "task.data": str(virl),
            "tasks_per_update": 2, "group_size": 3, "task.env_threads": threads, "sampling.max_new_tokens": 8,
            "task.max_turns": 3, "task.options": {"grid_size": 112, "episodes": 4, "seed": 42}})
        grpo(cfg)
        rows[threads] = [r for r in read_jsonl(tmp_path / f"t{threads}" / "metrics.jsonl") if "losses/policy_loss" in r]
    (one,), (three,) = rows[1], rows[3]
    assert three["train/env_seconds"] > 0 and three["rollout/trajectories"] == 6
    assert sum(three[f"rollout/answer_{k}_share"] for k in ("relative", "absolute", "shared", "invalid")) \
        == pytest.approx(1.0)  # V-IRL's answer vocabulary shares (TaskSuite.answer_stats), in GRPO too
    for key, value in one.items():
        if key.startswith(("losses/", "rollout/", "rewards/", "episodes/")):
            assert three[key] == pytest.approx(value, abs=1e-6), key
