"""PPO with a value head end to end on the tiny model and the letters task."""

from __future__ import annotations

import numpy as np
import torch
from safetensors.torch import load_file

from spatialrl.models.value_head import VALUE_HEAD_FILE, ValueHead
from spatialrl.train.config import load_config
from spatialrl.train.ppo import train
from spatialrl.train.rl_config import PPOConfig

from .helpers import assert_same_run
from .letters import REPO, read_updates

DETERMINISTIC = ("rollout/", "losses/", "rewards/", "charts/", "episodes/")


def ppo_config(tmp_path, model_dir, **over) -> PPOConfig:
    values = {"model.path": str(model_dir), "task.name": "letters", "output_dir": str(tmp_path / "run"),
              "checkpoint.every": 0, "optim.lr": 1e-2, "optim.schedule": "constant", "sampling.max_new_tokens": 6,
              "task.options": {"letters": "e"}}
    values.update(over)
    return load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", values)


def test_ppo_raises_reward(tmp_path, tiny_model_dir, letter_suite, capsys):
    cfg = ppo_config(tmp_path, tiny_model_dir, updates=12)
    summary = train(cfg)
    # progress inside an update: the first update shows each phase (a slow 11B update is not silent)
    console = capsys.readouterr().out
    for phase in ("step 1 · collected", "step 1 · scored", f"step 1 · epoch {cfg.epochs}/{cfg.epochs} done"):
        assert phase in console, phase
    rewards = [r["rollout/step_reward_mean"] for _, r in sorted(read_updates(cfg.output_dir).items())]
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.1  # observed ≈ 0.04 → 0.3
    last = summary["last"]
    for key in ("losses/value_loss", "losses/action_loss", "rollout/value_mean", "rollout/return_std",
                "episodes/return_mean", "episodes/success", "charts/env_steps"):
        assert key in last, key
    assert last["charts/env_steps"] == 12 * cfg.num_steps
    head = ValueHead.load(tmp_path / "run/final")  # the critic ships beside the exported model
    assert head.hidden_size == 64
    assert not any(k.startswith("value_head.") for k in load_file(str(tmp_path / "run/final/model.safetensors")))


def test_ppo_resume_continues_exactly(tmp_path, tiny_model_dir, letter_suite):
    """Episodes of 3 turns over updates of 2 turns per slot: a checkpoint always cuts through episodes,
    which the resumed run must continue from the same token streams."""
    over = {"updates": 3, "num_envs": 2, "num_steps": 4, "micro_batch_size": 2, "grad_accum": 2,
            "checkpoint.every": 1, "task.options": {"letters": "e", "turns": 3}}
    straight = ppo_config(tmp_path / "a", tiny_model_dir, **over)
    train(straight)
    killed = ppo_config(tmp_path / "b", tiny_model_dir, **over)
    train(killed, stop_after=2)
    checkpoint = tmp_path / "b/run/checkpoints/step-000002"
    assert (checkpoint / "hf" / VALUE_HEAD_FILE).is_file()
    assert (tmp_path / "b/run/rollout_state/update-000002-rank-0.pt").is_file()
    assert train(killed)["finished"]
    assert_same_run(straight.output_dir, killed.output_dir, 3, DETERMINISTIC)
    ha, hb = ValueHead.load(tmp_path / "a/run/final"), ValueHead.load(tmp_path / "b/run/final")
    assert all(torch.equal(x, y) for x, y in zip(ha.state_dict().values(), hb.state_dict().values(), strict=True))


def test_micro_batch_size_and_accumulation_are_interchangeable(tmp_path, tiny_model_dir, letter_suite):
    """4 samples as one forward == 4 forwards of 1 accumulated: the same optimiser step."""
    weights = []
    for micro, accum in ((4, 1), (1, 4)):
        cfg = ppo_config(tmp_path / f"m{micro}", tiny_model_dir, updates=1, num_envs=2, num_steps=4, epochs=1,
                         micro_batch_size=micro, grad_accum=accum, **{"optim.lr": 1e-3, "optim.eps": 1.0, "optim.max_grad_norm": 0.0})
        train(cfg)
        weights.append(load_file(str(tmp_path / f"m{micro}/run/final/model.safetensors")))
    assert all(torch.allclose(weights[0][k], weights[1][k], atol=1e-6) for k in weights[0])


def test_batch_shuffle_keeps_the_scoring_batches():
    """``shuffle: batches`` trains on exactly the scoring pass's micro-batches (shapes and padding
    included), in a new order each epoch; ``samples`` regroups the steps."""
    import pytest

    from spatialrl.train.config import ConfigError
    from spatialrl.train.ppo import epoch_micro_batches

    scoring = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    rng = np.random.default_rng(0)
    epochs = [epoch_micro_batches(10, 3, "batches", rng) for _ in range(3)]
    for micro in epochs:
        assert sorted(micro) == scoring
    assert len({tuple(map(tuple, m)) for m in epochs}) > 1  # the order changes between epochs
    regrouped = epoch_micro_batches(10, 3, "samples", np.random.default_rng(0))
    assert sorted(i for b in regrouped for i in b) == list(range(10)) and sorted(regrouped) != scoring
    with pytest.raises(ConfigError, match="shuffle"):
        PPOConfig(shuffle="steps")
