"""``EnvPool(prefix_cache=True)``: the RL rollout loop with each slot's KV cache kept between turns plays
the same episodes (answers, token streams, sampling log-probs) as without, while slots end, refill with
new episodes and (``fresh_prompt``) start new segments; the store holds one entry per live segment and
none for ended episodes or abandoned segments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.models.tiny import build_tiny
from spatialrl.rollout.agent_loop import EnvPool
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import sample_segments

from ..rl.letters import LETTER_SUITE


@pytest.fixture(scope="module")
def tiny():
    model, proc = build_tiny("qwen2_5_vl", seed=0)
    return model.eval(), TurnTokenizer(proc, "qwen2_5_vl")


def play(model, turns, options, prefix: bool):
    """6 episodes of 3 turns on 2 slots (refilled as episodes end), seeded sampling; the finished
    trajectories by episode and the store's size after every turn."""
    specs = LETTER_SUITE.episodes(options)
    pool = EnvPool(LETTER_SUITE, options, turns, n_slots=2, max_turns=10, max_tokens=4096, sample=sample_segments,
                   prefix_cache=prefix)
    generator = torch.Generator().manual_seed(11)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5)
    finished, sizes, queue = {}, [], list(specs)
    try:
        pool.start_many([(i, queue.pop(0), None) for i in range(2)])
        while pool.active():
            _, done = pool.turn(model, sampling, generator)
            for traj in done:
                finished[traj.episode_id] = traj
            idle = [i for i, s in enumerate(pool.slots) if s.spec is None]
            pool.start_many([(i, queue.pop(0), None) for i in idle[: len(queue)]])
            live = {id(s.segment) for s in pool.slots if s.spec is not None}
            sizes.append((len(pool.prefix), len(live)) if prefix else None)
    finally:
        pool.close()
    assert len(finished) == len(specs)
    return finished, sizes, (pool.prefix.reused_tokens if prefix else 0)


@pytest.mark.parametrize("fresh", [False, True])
def test_pool_with_prefix_cache_plays_the_same_episodes(tiny, fresh):
    model, turns = tiny
    options = {"n": 6, "turns": 3, "fresh_prompt": fresh}
    plain, _, _ = play(model, turns, options, prefix=False)
    reused, sizes, reused_tokens = play(model, turns, options, prefix=True)
    for episode_id, a in plain.items():
        b = reused[episode_id]
        assert a.responses == b.responses and a.turn_rewards == b.turn_rewards
        assert len(a.segments) == len(b.segments) == (3 if fresh else 1)
        for sa, sb in zip(a.segments, b.segments, strict=True):
            assert sa.ids == sb.ids and sa.response_mask == sb.response_mask
            np.testing.assert_allclose(sa.response_logprobs, sb.response_logprobs, atol=1e-5, rtol=0)
    # entries only for live segments that have been sampled from: none left for ended or replaced ones
    assert all(stored <= live for stored, live in sizes) and sizes[-1] == (0, 0)
    if fresh:  # every turn starts a new conversation: each answer's cache is dropped with its segment
        assert all(stored == 0 for stored, _ in sizes) and reused_tokens == 0
    else:
        assert any(stored > 0 for stored, _ in sizes) and reused_tokens > 0
