"""``sampling.prefix_cache`` in the RL trainers: a multi-turn GRPO update on TVR visual-action memory (a
growing chat) with each slot's KV cache kept across turns is the same update, number for number, as one
that re-prefills every turn (the sampler's own equality is tests/models/test_prefix_cache.py)."""

from __future__ import annotations

import pytest

from spatialrl.train.config import ConfigError, load_config
from spatialrl.train.rl_config import GRPOConfig

from .letters import REPO
from .test_tvr_vector import rl_bench, same_numbers  # noqa: F401  (the fixture is used by name)


def test_grpo_multi_turn_with_the_prefix_cache(tmp_path, tiny_model_dir, rl_bench, monkeypatch):  # noqa: F811
    from spatialrl.io import read_jsonl
    from spatialrl.train import policy_ops
    from spatialrl.train.grpo import train as grpo

    reused: list[int] = []
    generate = policy_ops.generate_from_prefixes

    def counting(*args, **kwargs):
        reused.append(1)
        return generate(*args, **kwargs)

    monkeypatch.setattr(policy_ops, "generate_from_prefixes", counting)
    rows = {}
    for on in (False, True):
        cfg = load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / f"grpo-{on}"), "updates": 1,
            "mode": "multi", "checkpoint.every": 0, "task.data": str(rl_bench), "task.split": "rl",
            "tasks_per_update": 2, "group_size": 2, "sampling.max_new_tokens": 8, "sampling.prefix_cache": on,
            "task.options": {"width": 64, "height": 64, "memory": "va", "max_steps_single": 3, "max_steps_multi": 4}})
        grpo(cfg)
        rows[on] = [r for r in read_jsonl(tmp_path / f"grpo-{on}" / "metrics.jsonl") if "losses/policy_loss" in r]
        assert bool(reused) == on
    same_numbers(rows, "rewards/step/mean")


def test_prefix_cache_needs_the_dynamic_kv_cache(tmp_path):
    with pytest.raises(ConfigError, match="sampling.prefix_cache"):
        load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml",
                    {"output_dir": str(tmp_path), "sampling.prefix_cache": True, "sampling.kv_cache": "static"})
