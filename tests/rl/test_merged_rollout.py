"""``sampling.merge_lora``: a rollout copy with the LoRA adapters merged into its weights computes what
the peft model computes (fp32, CPU), follows the adapters after :meth:`refresh`, shares the vision tower,
and a PPO run with it is the run without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.models.tiny import build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.common import prepare_trainable
from spatialrl.train.config import ModelConfig
from spatialrl.train.merged_rollout import MergedRollout
from spatialrl.train.policy_ops import collate_inputs, score_tokens


def _lora_model(family: str):
    model, proc = build_tiny(family)
    cfg = ModelConfig(path="unused")
    cfg.lora.enabled, cfg.lora.r, cfg.lora.alpha = True, 4, 8
    model = prepare_trainable(model, cfg)
    with torch.no_grad():  # B starts at zero: give the adapters an effect to merge
        gen = torch.Generator().manual_seed(0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model.eval(), proc


def _batch(proc, model):
    turns = TurnTokenizer(proc, model.config.model_type)
    rng = np.random.default_rng(1)
    user = {"role": "user", "content": [{"type": "image", "image": rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)},
                                        {"type": "text", "text": "Where now?"}]}
    views = [(s, len(s)) for s in (turns.start([user]) for _ in range(2))]
    return collate_inputs(turns, views, "right", "cpu"), min(n for _, n in views) - 4


@pytest.mark.parametrize("family", ["qwen2_5_vl", "mllama"])
def test_merged_copy_computes_what_the_adapters_compute(family):
    from peft.tuners.lora import LoraLayer

    model, proc = _lora_model(family)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = MergedRollout(model)
    merged.refresh()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the trained model is untouched
    assert not any(isinstance(m, LoraLayer) for m in merged.model.modules())
    assert all(not p.requires_grad for n, p in merged.model.named_parameters() if "vision" not in n and "visual" not in n)
    base = model.get_base_model()
    for name in ("visual", "vision_model"):  # the tower is shared, not copied
        if hasattr(base, "model") and hasattr(base.model, name):
            assert getattr(merged.model.model, name) is getattr(base.model, name)
    inputs, start = _batch(proc, model)
    with torch.no_grad():
        want = score_tokens(model, inputs, start).logp
        torch.testing.assert_close(score_tokens(merged.model, inputs, start).logp, want, atol=1e-5, rtol=0)
        for name, p in model.named_parameters():  # an optimiser step on the adapters
            if "lora_A" in name:
                p.mul_(-1.5)
        moved = score_tokens(model, inputs, start).logp
        assert (moved - want).abs().max() > 1e-3
        assert (score_tokens(merged.model, inputs, start).logp - moved).abs().max() > 1e-3  # stale until refreshed
        merged.refresh()
        torch.testing.assert_close(score_tokens(merged.model, inputs, start).logp, moved, atol=1e-5, rtol=0)
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)  # the trained model keeps training


def test_needs_adapters():
    from spatialrl.errors import DataError

    model, _ = build_tiny("qwen2_5_vl")
    with pytest.raises(DataError, match="model.lora.enabled"):
        MergedRollout(model)


@pytest.mark.parametrize("trainer", ["ppo", "grpo"])
def test_a_run_with_the_merged_copy_is_the_same_run(tmp_path, tiny_model_dir, letter_suite, trainer):
    """Three updates with LoRA: rollouts from the refreshed merged copy give the run the peft model gives."""
    from spatialrl.io import read_jsonl
    from spatialrl.train import grpo, ppo

    from .test_grpo import grpo_config
    from .test_ppo import ppo_config

    make, train = (ppo_config, ppo.train) if trainer == "ppo" else (grpo_config, grpo.train)
    rows = {}
    for merge in (False, True):
        cfg = make(tmp_path / str(merge), tiny_model_dir, updates=3, **{
            "model.lora.enabled": True, "model.lora.r": 4, "model.lora.alpha": 8, "model.lora.merge_on_save": False,
            "optim.lr": 5e-2, "sampling.merge_lora": merge})
        train(cfg)
        rows[merge] = [r for r in read_jsonl(tmp_path / str(merge) / "run" / "metrics.jsonl") if "losses/approx_kl" in r]
    assert len(rows[False]) == len(rows[True]) == 3
    # the adapters moved between updates, so later rollouts needed the refreshed weights
    reward = "rollout/step_reward_mean" if trainer == "ppo" else "episodes/return_mean"
    assert rows[False][0][reward] != rows[False][-1][reward]
    for a, b in zip(rows[False], rows[True], strict=True):
        for key, value in a.items():
            if key.startswith(("losses/", "rollout/", "episodes/", "charts/")):  # charts: images encoded once, both ways
                assert b[key] == pytest.approx(value, abs=1e-4), key
