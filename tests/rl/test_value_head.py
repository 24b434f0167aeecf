"""The PPO critic: layout, checkpoint round trip, and that it reads the last prompt token's final state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.errors import DataError
from spatialrl.models.tiny import build_tiny
from spatialrl.models.value_head import ValueHead, hidden_size_of
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import score_tokens


def test_layout_matches_the_reference():
    head = ValueHead(64)
    linears = [m for m in head.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 1024), (1024, 512), (512, 1)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in head.net) == 2
    assert head(torch.randn(3, 64)).shape == (3,)
    assert head(torch.randn(3, 64, dtype=torch.bfloat16)).dtype == torch.float32  # kept in fp32


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(0)
    head = ValueHead(32, (16, 8))
    head.save(tmp_path)
    again = ValueHead.load(tmp_path)
    x = torch.randn(4, 32)
    assert torch.equal(head(x), again(x)) and again.hidden_size == 32
    with pytest.raises(DataError, match="value_head.safetensors"):
        ValueHead.load(tmp_path / "missing")


def test_value_reads_the_last_prompt_token():
    model, proc = build_tiny("qwen2_5_vl")
    turns = TurnTokenizer(proc, "qwen2_5_vl")
    rng = np.random.default_rng(0)
    convs = [[{"role": "user", "content": [{"type": "image", "image": rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)},
                                           {"type": "text", "text": "hi" * (i + 1)}]}] for i in range(2)]
    segs = [turns.start(c) for c in convs]
    for s in segs:
        turns.add_policy(s, [10, 11, 12], [0.0] * 3, 0)
    inputs = turns.collate([(s, len(s)) for s in segs])
    positions = torch.tensor([len(s.prompt_ids) - 1 for s in segs])
    torch.manual_seed(0)
    head = ValueHead(hidden_size_of(model))
    with torch.no_grad():
        values = score_tokens(model, inputs, int(positions.min()) + 1, hidden_positions=positions, value_head=head).hidden
        final = model.model(**inputs).last_hidden_state  # the decoder's normed output, as lm_head reads it
        expected = head(final[torch.arange(2), positions])
    assert values.shape == (2,) and torch.allclose(values, expected, atol=1e-6)
    assert not torch.allclose(values[0], values[1])  # different prompts, different states
