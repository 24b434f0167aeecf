"""Scoring only each row's own span (``score_tokens`` with per-row starts and ends) gives the log-probs,
entropies and hidden states of scoring every position from the earliest start — while the logits it
materialises are those of the rows' spans, not ``B × (width − min start) × vocab`` (issue 24: the 7B PPO
micro-batch of 4 ran out of memory on turn-1 rows padded beside turn-2 ones)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import _output_layer, score_tokens
from tests.conversations import assistant, user


def _segments(family):
    """A one-turn segment beside a three-turn one: their answers sit at very different depths."""
    rng = np.random.default_rng(3)
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    segs = []
    for n_turns in (1, 3):
        conv = [user(rng, "Where now?")]
        seg = turns.start(conv)
        for k in range(n_turns):
            ids = proc.tokenizer(f"Action: Move{k}", add_special_tokens=False)["input_ids"]
            turns.add_policy(seg, ids, [0.0] * len(ids), turn=k)
            if k < n_turns - 1:
                conv = conv + [assistant(f"Action: Move{k}"), user(rng, f"Step {k}.")]
                assert turns.extend(seg, ids, conv)
        segs.append(seg)
    return model, turns, segs


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_per_row_spans_score_what_the_shared_start_does(family):
    model, turns, segs = _segments(family)
    model.eval()
    inputs = turns.collate([(s, len(s)) for s in segs], padding_side="right")
    width = inputs["input_ids"].shape[1]
    starts = [len(s) - len(s.response_ids[-4:]) for s in segs]  # each row's last answer
    ends = [len(s) for s in segs]
    positions = torch.tensor([st - 1 for st in starts])
    kept = []
    handle = _output_layer(model).register_forward_hook(lambda _m, args, _o: kept.append(args[0].shape[1]))
    try:
        with torch.no_grad():
            shared = score_tokens(model, inputs, min(starts), 0.7, with_entropy=True, hidden_positions=positions)
            own = score_tokens(model, inputs, starts, 0.7, with_entropy=True, hidden_positions=positions, end=ends)
    finally:
        handle.remove()
    assert kept[0] == width - min(starts)  # positions start-1 .. width-2
    union = set()
    for st, e in zip(starts, ends, strict=True):
        union |= set(range(st - 1, e - 1))
    assert kept[1] == len(union) < kept[0]  # only the rows' spans (the hidden positions are among them)
    for b, (st, e) in enumerate(zip(starts, ends, strict=True)):
        torch.testing.assert_close(own.logp[b, st:e], shared.logp[b, st:e], atol=1e-5, rtol=0)
        torch.testing.assert_close(own.entropy[b, st:e], shared.entropy[b, st:e], atol=1e-5, rtol=0)
        assert not own.logp[b, :st].any() and not own.logp[b, e:].any()  # zero outside the row's span
    torch.testing.assert_close(own.hidden, shared.hidden, atol=1e-5, rtol=0)


def test_spans_outside_the_batch_are_refused():
    model, turns, segs = _segments("qwen2_vl")
    inputs = turns.collate([(s, len(s)) for s in segs], padding_side="right")
    width = inputs["input_ids"].shape[1]
    with pytest.raises(ValueError, match="outside a batch"):
        score_tokens(model, inputs, [1, 5], end=[width + 1, 6])
    with pytest.raises(ValueError, match="entries for a batch"):
        score_tokens(model, inputs, [1, 2, 3])
    with pytest.raises(ValueError, match="hidden_positions"):
        score_tokens(model, inputs, 1, hidden_positions=torch.tensor([0, width]))


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_a_conversations_turns_packed_in_one_row_score_as_their_own_prefixes(family):
    """PPO's packing (``ppo.batch_inputs``): the three answers of one conversation scored in a single row
    (several spans, a value per answer) give each answer the log-probs, entropy and value of its own prefix
    scored alone — causal attention (and, for Mllama, the cross-attention mask) sees nothing after it."""
    from spatialrl.train.ppo import Sample, forward_samples

    model, turns, segs = _segments(family)
    model.eval()
    seg = segs[1]  # three turns
    head = torch.nn.Linear(model.get_output_embeddings().in_features, 1)
    value = lambda h: head(h.float()).squeeze(-1)  # noqa: E731
    samples = []
    for k in range(3):
        start, end = seg.turn_span(k)
        samples.append(Sample(seg, start, end, [1.0] * (end - start)))
    with torch.no_grad():
        packed = forward_samples(model, value, turns, samples + [Sample(segs[0], *segs[0].turn_span(0), [1.0] * 4)],
                                 1.0, True, "cpu")
        alone = [forward_samples(model, value, turns, [s], 1.0, True, "cpu") for s in samples]
    assert packed[0].shape[0] == 4  # one row per sample, though the forward had two
    for k, (logp, weights, val, ent) in enumerate(alone):
        s = samples[k]
        torch.testing.assert_close(packed[0][k, s.answer_start:s.end], logp[0, s.answer_start:s.end], atol=1e-5, rtol=0)
        assert torch.equal(packed[1][k, :s.end], weights[0, :s.end]) and not packed[1][k, s.end:].any()
        torch.testing.assert_close(packed[2][k], val[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(packed[3][k], ent[0], atol=1e-5, rtol=0)


def test_episode_shuffle_keeps_conversations_whole():
    import numpy as np

    from spatialrl.train.rl_common import epoch_micro_batches, scoring_micro_batches

    groups = [0, 1, 2, 0, 1, 3, 0]  # sample i belongs to conversation groups[i]
    rng = np.random.default_rng(0)
    epochs = [epoch_micro_batches(len(groups), 2, "episodes", rng, groups) for _ in range(4)]
    for micro in epochs:
        assert sorted(i for b in micro for i in b) == list(range(len(groups)))
        assert [len({groups[i] for i in b}) for b in micro] == [2, 2]  # two whole conversations per batch
        for b in micro:
            for g in {groups[i] for i in b}:
                assert all(i in b for i, h in enumerate(groups) if h == g)
    assert len({tuple(map(tuple, m)) for m in epochs}) > 1  # reshuffled each epoch
    assert scoring_micro_batches(groups, 2, "episodes") == [[0, 3, 6, 1, 4], [2, 5]]
    for micro in epochs:  # the scoring pass's rows exactly (bf16 numerics depend on batch shape), reordered
        assert sorted(micro) == sorted(scoring_micro_batches(groups, 2, "episodes"))
    assert scoring_micro_batches(groups, 3, "samples") == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="conversation"):
        epoch_micro_batches(len(groups), 2, "episodes", rng)
