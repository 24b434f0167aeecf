"""PPO with a value head end to end on the tiny model and the letters task."""

from __future__ import annotations

import math

import numpy as np
import pytest
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
    from spatialrl.train.rl_common import epoch_micro_batches

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


def test_both_ratios_are_one_with_unchanged_weights(tmp_path, tiny_model_dir, letter_suite):
    """At lr 0 the training passes see the policy that scored the samples: ratio 1 and nothing clipped,
    whether the ratio is the whole answer's or each token's; both clip fractions are logged either way."""
    for ratio in ("sequence", "token"):
        cfg = ppo_config(tmp_path / ratio, tiny_model_dir, updates=1, ratio=ratio, **{"optim.lr": 0.0})
        last = train(cfg)["last"]
        assert last["losses/ratio"] == pytest.approx(1.0, abs=1e-5), ratio
        assert last["losses/approx_kl"] == pytest.approx(0.0, abs=1e-6), ratio
        for key in ("ppo/clip_fraction", "ppo/clip_fraction_sequence", "ppo/clip_fraction_token", "losses/clipfrac"):
            assert last[key] == 0.0, (ratio, key)
        for key in ("ppo/approx_kl_sequence", "ppo/approx_kl_token"):
            assert last[key] == pytest.approx(0.0, abs=1e-6), (ratio, key)
        assert -math.inf < last["value/explained_variance"] <= 1.0


def test_episode_shuffle_packs_turns_and_keeps_ratio_one(tmp_path, tiny_model_dir, letter_suite):
    """``shuffle: episodes`` (a conversation's turns scored in one row): at lr 0 the epochs' packed rows
    give back the scoring pass's log-probs (ratio 1), and with a learning rate it trains, deterministically."""
    over = {"updates": 1, "num_envs": 2, "num_steps": 6, "shuffle": "episodes", "micro_batch_size": 1,
            "grad_accum": 2, "task.options": {"letters": "e", "turns": 3}}
    last = train(ppo_config(tmp_path / "lr0", tiny_model_dir, **over, **{"optim.lr": 0.0}))["last"]
    assert last["losses/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert last["losses/approx_kl"] == pytest.approx(0.0, abs=1e-6)
    # 2 envs x 3 turns from the reset: two whole 3-turn conversations, packed into two rows
    assert last["rollout/samples_per_conversation"] == 3.0
    # the decoder's input tokens: each epoch scores the same two packed rows as the scoring pass, one
    # conversation per micro-batch (no padding)
    cfg = ppo_config(tmp_path / "lr0", tiny_model_dir, **over)
    assert last["train/score_tokens"] > 0 and last["train/score_padded_tokens"] == last["train/score_tokens"]
    assert last["train/epoch_tokens"] == cfg.epochs * last["train/score_tokens"] == last["train/epoch_padded_tokens"]
    runs = [ppo_config(tmp_path / name, tiny_model_dir, **{**over, "updates": 2}) for name in ("a", "b")]
    for cfg in runs:
        train(cfg)
    assert_same_run(runs[0].output_dir, runs[1].output_dir, 2, DETERMINISTIC)


def test_token_and_sequence_ratios_on_the_same_rollout(tmp_path, tiny_model_dir, letter_suite):
    """The same first update (same rollout, same old log-probs) with each ratio: the token variant trains
    on its own clip fraction, and logs the sequence one the other variant would have seen."""
    rows = {}
    for ratio in ("sequence", "token"):
        cfg = ppo_config(tmp_path / ratio, tiny_model_dir, updates=2, ratio=ratio, epochs=3)
        train(cfg)
        rows[ratio] = read_updates(cfg.output_dir)
    seq, tok = rows["sequence"][1], rows["token"][1]
    assert seq["rollout/step_reward_mean"] == tok["rollout/step_reward_mean"]  # the same rollout
    assert seq["ppo/clip_fraction"] == seq["ppo/clip_fraction_sequence"]
    assert tok["ppo/clip_fraction"] == tok["ppo/clip_fraction_token"] == tok["losses/clipfrac"]
    assert 0.0 < tok["ppo/clip_fraction_token"] < 1.0 and 0.0 < seq["ppo/clip_fraction_sequence"] <= 1.0
    # the variant's approx. KL is one of the two logged ones
    assert seq["losses/approx_kl"] == pytest.approx(seq["ppo/approx_kl_sequence"])
    assert tok["ppo/approx_kl_token"] > 0.0 and seq["ppo/approx_kl_sequence"] > 0.0
    assert seq["losses/action_loss"] != tok["losses/action_loss"]  # a different objective was optimised


def test_critic_warmup_trains_the_value_head_only(tmp_path, tiny_model_dir, letter_suite):
    """Three value-only updates: the exported model is the starting model bit for bit, the value head
    moved, and its loss fell while the frozen policy kept playing the same way."""
    cfg = ppo_config(tmp_path, tiny_model_dir, updates=3, critic_warmup=3)
    train(cfg)
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(tmp_path / "run/final/model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    torch.manual_seed(cfg.seed)  # the head train() builds before any update
    start = ValueHead(64, tuple(cfg.value_head_widths))
    trained = ValueHead.load(tmp_path / "run/final")
    assert not all(torch.equal(a, b) for a, b in zip(start.state_dict().values(), trained.state_dict().values(),
                                                     strict=True))
    rows = read_updates(cfg.output_dir)
    assert rows[3]["losses/value_loss"] < rows[1]["losses/value_loss"]
    assert all(rows[u]["losses/ratio"] == pytest.approx(1.0, abs=1e-5) for u in rows)  # the policy never moved


def test_detached_critic_sends_no_value_gradient_into_the_model():
    """``critic_head(head, detach=True)``, as PPO passes it to the scoring forward: the value loss's
    gradient reaches the head and nothing else; without detaching it reaches the shared model."""
    from spatialrl.models.tiny import build_tiny
    from spatialrl.models.value_head import hidden_size_of
    from spatialrl.rollout.trajectory import TurnTokenizer
    from spatialrl.train.policy_ops import score_tokens
    from spatialrl.train.rl_common import critic_head

    model, proc = build_tiny("qwen2_5_vl")
    turns = TurnTokenizer(proc, "qwen2_5_vl")
    seg = turns.start([{"role": "user", "content": [
        {"type": "image", "image": np.full((56, 56, 3), 90, np.uint8)}, {"type": "text", "text": "go"}]}])
    turns.add_policy(seg, [10, 11, 12], [0.0] * 3, 0)
    inputs = turns.collate([(seg, len(seg))])
    pos = torch.tensor([len(seg.prompt_ids) - 1])
    torch.manual_seed(0)
    head = ValueHead(hidden_size_of(model))
    for detach in (True, False):
        model.zero_grad(set_to_none=True)
        sc = score_tokens(model, inputs, int(pos[0]) + 1, hidden_positions=pos, value_head=critic_head(head, detach))
        ((sc.hidden - 1.0) ** 2).sum().backward()  # a value loss alone
        trunk = [p.grad for n, p in model.named_parameters() if not n.startswith("value_head")]
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
        if detach:
            assert all(g is None for g in trunk)
        else:
            assert any(g is not None and g.abs().sum() > 0 for g in trunk)


def test_both_ratios_on_virl(tmp_path, tiny_model_dir):
    """One PPO update on the real V-IRL task (JSON answers, verification retries) with each ratio; the
    share of sampled answers in each action vocabulary is logged (``rollout/answer_*``: V-IRL's
    TaskSuite.answer_stats), and sums to 1."""
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset

    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    for ratio in ("sequence", "token"):
        cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
            "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / ratio), "updates": 1, "num_envs": 4,
            "num_steps": 8, "epochs": 1, "checkpoint.every": 0, "task.data": str(virl), "ratio": ratio,
            "sampling.max_new_tokens": 12, "task.options": {"grid_size": 112, "episodes": 8, "seed": 42}})
        last = train(cfg)["last"]
        assert last["charts/env_steps"] == 8 and 0.0 <= last["ppo/clip_fraction"] <= 1.0
        assert last["ppo/clip_fraction"] == last[f"ppo/clip_fraction_{ratio}"]
        shares = [last[f"rollout/answer_{k}_share"] for k in ("relative", "absolute", "shared", "invalid")]
        assert sum(shares) == pytest.approx(1.0)


def test_ratio_and_warmup_options_are_checked():
    from spatialrl.train.config import ConfigError

    with pytest.raises(ConfigError, match="ratio: expected 'sequence' or 'token'"):
        PPOConfig(ratio="tokens")
    with pytest.raises(ConfigError, match=r"critic_warmup: must be in \[0, updates=15\]"):
        PPOConfig(critic_warmup=16)


def test_dropout_is_off_in_the_training_pass(tmp_path, tiny_model_dir, letter_suite):
    """LoRA with dropout: once the adapters have moved (update 2), a training forward in train mode would
    differ from the scoring pass by the dropout noise. With ``disable_dropout`` (the default) an update whose
    forwards all precede its one optimiser step has ratio exactly 1; with the model's dropout kept it has not."""
    over = {"updates": 2, "epochs": 1, "micro_batch_size": 4, "grad_accum": 4, "optim.lr": 5e-2,
            "model.lora.enabled": True, "model.lora.r": 4, "model.lora.alpha": 8, "model.lora.dropout": 0.5,
            "model.lora.merge_on_save": False}
    kl = {}
    for disable in (True, False):
        cfg = ppo_config(tmp_path / str(disable), tiny_model_dir, **over, disable_dropout=disable)
        train(cfg)
        second = read_updates(cfg.output_dir)[2]
        kl[disable] = (second["losses/approx_kl"], second["losses/ratio"])
    assert kl[True][0] == pytest.approx(0.0, abs=1e-7) and kl[True][1] == pytest.approx(1.0, abs=1e-6)
    assert kl[False][0] > 1e-5, kl
