"""GRPO end to end on the tiny model and the letters task, plus its advantage bookkeeping by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from spatialrl.rollout.trajectory import Segment, Trajectory
from spatialrl.train.config import load_config
from spatialrl.train.grpo import build_sequences, gated_reward, train, trajectory_advantages
from spatialrl.train.rl_config import GatedRewardConfig, GRPOConfig

from .helpers import assert_same_run
from .letters import REPO, read_updates

DETERMINISTIC = ("rollout/", "losses/", "rewards/", "charts/", "episodes/")


def grpo_config(tmp_path, model_dir, **over) -> GRPOConfig:
    values = {"model.path": str(model_dir), "task.name": "letters", "output_dir": str(tmp_path / "run"),
              "checkpoint.every": 0, "optim.lr": 2e-2, "optim.schedule": "constant", "sampling.max_new_tokens": 6,
              "tasks_per_update": 4, "group_size": 4, "task.options": {"letters": "e"}, "kl_coef": 0.001}
    values.update(over)
    return load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", values)


def rise(run_dir, n: int) -> float:
    rewards = [r["episodes/return_mean"] for _, r in sorted(read_updates(run_dir).items())]
    return float(np.mean(rewards[-n:]) - np.mean(rewards[:n]))


def test_multi_turn_grpo_raises_reward(tmp_path, tiny_model_dir, letter_suite):
    cfg = grpo_config(tmp_path, tiny_model_dir, updates=10)
    summary = train(cfg)
    assert summary["finished"]
    assert rise(cfg.output_dir, 3) > 0.15  # observed ≈ 0.1 → 0.7 share of the letter
    last = summary["last"]
    assert last["losses/policy_tokens"] > 0 and last["losses/kl"] > 0 and last["episodes/length_mean"] == 2
    assert "rewards/share/mean" in last  # every reward component is logged
    assert (tmp_path / "run/final/model.safetensors").is_file() and (tmp_path / "run/summary.json").is_file()


def test_single_turn_grpo_raises_reward(tmp_path, tiny_model_dir, letter_suite):
    cfg = grpo_config(tmp_path, tiny_model_dir, mode="single", updates=10, **{
        "single.prompts_per_update": 4, "single.reward.action_pattern": "([aeo])",
        "action_match.every": 10, "action_match.episodes": 4})
    summary = train(cfg)
    assert summary["last"]["rewards/match/mean"] >= 0.0 and "rewards/format/mean" in summary["last"]
    assert rise(cfg.output_dir, 3) > 0.15  # gated reward: no vowel 0, wrong vowel 0.1, 'e' 1.0
    diag = read_updates(cfg.output_dir, "diag/action_match")[10]  # greedy answers on held-out expert states
    assert diag["diag/states"] == 8 and 0.0 <= diag["diag/action_match"] <= diag["diag/format"] <= 1.0


def test_grpo_resume_continues_exactly(tmp_path, tiny_model_dir, letter_suite):
    straight = grpo_config(tmp_path / "a", tiny_model_dir, updates=3, **{"checkpoint.every": 1})
    train(straight)
    killed = grpo_config(tmp_path / "b", tiny_model_dir, updates=3, **{"checkpoint.every": 1})
    train(killed, stop_after=2)
    assert not (tmp_path / "b/run/final").exists()
    resumed = train(killed)
    assert resumed["finished"]
    assert_same_run(straight.output_dir, killed.output_dir, 3, DETERMINISTIC)


def test_gated_reward_levels():
    from spatialrl.envs.registry import get_suite

    cfg = GatedRewardConfig(action_pattern=get_suite("tvr").action_pattern)  # the task's own (the default)
    assert gated_reward("I think so. Action: RotateLeft", "Action: RotateLeft", cfg) == (1.0, {"format": 1.0, "match": 1.0})
    assert gated_reward("Action: moveahead", "Action: RotateLeft", cfg) == (0.1, {"format": 1.0, "match": 0.0})
    assert gated_reward("rotate left please", "Action: RotateLeft", cfg) == (0.0, {"format": 0.0, "match": 0.0})
    virl = GatedRewardConfig(action_pattern=r'"action": "(.*?)"')
    assert gated_reward('{"action": "forward()"}', '{"action": "forward()"}', virl)[0] == 1.0
    with pytest.raises(ValueError, match="action_pattern"):
        gated_reward("x", "no action here", cfg)
    with pytest.raises(ValueError, match="action_pattern"):
        gated_reward("x", "Action: Stop", GatedRewardConfig())  # unresolved: no task was given


def _traj(group: str, rewards: list[float], poses: list[int]) -> Trajectory:
    seg = Segment(prompt_ids=[1, 2])
    for turn in range(len(rewards)):  # one policy token per turn, one env token after it
        seg.response_ids += [10 + turn, 99]
        seg.response_mask += [1, 0]
        seg.response_logprobs += [-1.0, 0.0]
        seg.response_turns += [turn, -1]
    return Trajectory(episode_id=group + str(rewards), group=group, segments=[seg], turn_segment=[0] * len(rewards),
                      turn_rewards=rewards, turn_records=[{"prev_pose": [p]} for p in poses], done=True)


def test_trajectory_and_pose_anchored_advantages_by_hand(tmp_path, tiny_model_dir, letter_suite):
    trajs = [_traj("g", [0.0, 1.0], [0, 1]), _traj("g", [0.0, 0.0], [0, 2]), _traj("h", [1.0], [0]), _traj("h", [1.0], [0])]
    cfg = grpo_config(tmp_path, tiny_model_dir)
    per_turn, zero = trajectory_advantages(trajs, cfg)
    a = 0.5 / (np.std([1.0, 0.0], ddof=1) + 1e-6)  # returns 1 and 0 in group g
    assert np.allclose(per_turn[0], [a, a]) and np.allclose(per_turn[1], [-a, -a])
    assert per_turn[2] == [0.0] and zero.tolist() == [False, False, True, True]
    anchored = grpo_config(tmp_path, tiny_model_dir, pose_anchored=True, step_gamma=0.5, step_weight=1.0,
                           anchor_field="prev_pose")
    per_turn, _ = trajectory_advantages(trajs, anchored)
    s = 0.25 / (np.std([0.5, 0.0], ddof=1) + 1e-6)  # step returns 0.5 and 0 from the shared pose 0
    assert np.allclose(per_turn[0], [a + s, a]) and np.allclose(per_turn[1], [-a - s, -a])
    # advantages land on policy tokens only; a dropped group contributes no sequence
    seqs = build_sequences(trajs, per_turn, keep=[True, True, False, False])
    assert len(seqs) == 2 and np.allclose(seqs[0].advantages, [a + s, 0.0, a, 0.0])


def test_grpo_options_run(tmp_path, tiny_model_dir, letter_suite):
    """Pose-anchored step groups, zero-variance dropping and a sequence-level loss run end to end."""
    cfg = grpo_config(tmp_path, tiny_model_dir, updates=2, pose_anchored=True, drop_zero_variance=True,
                      loss_agg="seq-mean-token-mean", entropy_coef=0.01, **{"task.options": {"letters": "e", "fresh_prompt": True}})
    summary = train(cfg)
    assert summary["finished"] and summary["last"]["rollout/segments_mean"] == 2  # one segment per turn
    assert summary["last"]["losses/entropy"] > 0


def test_micro_batching_does_not_change_the_update(tmp_path, tiny_model_dir, letter_suite):
    """One optimiser step over 16 sequences: 16 forwards of 1 accumulated == 2 forwards of 8 (the loss is
    reduced exactly over the whole mini-batch, not averaged per micro-batch). Adam's eps is set large so
    the step is ~linear in the gradient (at eps 1e-8 the first step is sign(g), which float noise flips)."""
    weights = []
    for micro in (1, 8):
        cfg = grpo_config(tmp_path / f"m{micro}", tiny_model_dir, updates=1, mini_batches=1, micro_batch_size=micro,
                          **{"optim.lr": 1e-3, "optim.eps": 1.0})
        train(cfg)
        weights.append(load_file(str(tmp_path / f"m{micro}/run/final/model.safetensors")))
    assert all(torch.allclose(weights[0][k], weights[1][k], atol=1e-6) for k in weights[0])
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(base[k], weights[0][k]) for k in base)  # it did train


def test_shipped_recipes_validate():
    """Every RL recipe in configs/ parses and validates (paths are filled in at launch)."""
    from spatialrl.train.rl_config import PPOConfig

    for path in sorted((REPO / "configs/grpo").glob("*.yaml")):
        assert load_config(GRPOConfig, path).group_size >= 2, path
    for path in sorted((REPO / "configs/ppo").glob("*.yaml")):
        cfg = load_config(PPOConfig, path)
        assert cfg.num_steps % cfg.num_envs == 0, path
    with pytest.raises(ValueError, match="pose_anchored"):
        load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {"mode": "single", "pose_anchored": True})
    with pytest.raises(ValueError, match="group_size"):
        load_config(GRPOConfig, REPO / "configs/grpo/tiny_cpu.yaml", {"group_size": 1})
