"""Token-in-token-out records, per supported model family: the stream the trainer scores is the one
the rollout produced — token for token, image tensor for image tensor, log-prob for log-prob."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer, extends
from spatialrl.train.policy_ops import sample_segments, score_tokens, token_char_ends
from tests.conversations import assistant, user

FAMILIES = sorted(BUILDERS)


@pytest.mark.parametrize("family", FAMILIES)
def test_segment_equals_whole_conversation_tokenisation(family):
    """Building a segment turn by turn (prompt, answers, template increments) gives exactly the ids and
    image tensors the processor gives the whole conversation — and, at every turn, exactly the prompt
    ``HFPolicy`` (the eval policy) would send. One answer stops without its end-of-turn token (the
    token budget ran out): the template's end-of-turn is then added as an env token."""
    rng = np.random.default_rng(0)
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    policy = HFPolicy(model, proc, device="cpu")
    conv = [{"role": "system", "content": [{"type": "text", "text": "You are an agent."}]}, user(rng, "Where now?")]
    seg = turns.start(conv)
    eos = proc.tokenizer.eos_token
    for k, answer in enumerate(["Action: MoveAhead", "Action: RotateLeft", "Action: Stop"]):
        assert seg.ids == policy.prompt_inputs(conv)["input_ids"][0].tolist()  # what the rollout sent
        ids = proc.tokenizer(answer + (eos if k != 1 else ""), add_special_tokens=False)["input_ids"]
        turns.add_policy(seg, ids, [0.0] * len(ids), turn=k)
        conv = conv + [assistant(answer), user(rng, f"Step {k}.")]
        assert turns.extend(seg, ids, conv)
    text, images = turns.render(conv, add_generation_prompt=True)
    whole = turns.encode(text, images)
    batch = turns.collate([(seg, len(seg))])
    assert batch["input_ids"][0].tolist() == whole["input_ids"][0].tolist()
    for key, value in whole.items():
        assert torch.equal(batch[key], value), key
    # the mask marks exactly the three answers; env tokens carry log-prob 0
    policy_text = proc.tokenizer.decode([t for t, m in zip(seg.response_ids, seg.response_mask, strict=True) if m])
    assert policy_text.replace(eos, "") == "Action: MoveAheadAction: RotateLeftAction: Stop"
    assert all(lp == 0.0 for lp, m in zip(seg.response_logprobs, seg.response_mask, strict=True) if not m)
    assert [seg.turn_span(k)[0] > len(seg.prompt_ids) - 1 for k in range(3)] == [True] * 3


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_logprobs_equal_training_forward(family):
    """Sample two turns for a batch of two conversations, then score the collated segments in one
    training forward: every policy token's log-prob matches the one recorded while sampling."""
    rng = np.random.default_rng(1)
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    convs = [[user(rng, "Go" * (i + 1))] for i in range(2)]
    segs = [turns.start(c) for c in convs]
    gen = torch.Generator().manual_seed(0)
    for k in range(2):
        for i, (ids, lps) in enumerate(sample_segments(model, turns, segs, SamplingParams(1.0, 1.0, 4), gen)):
            turns.add_policy(segs[i], ids, lps, k)
            convs[i] = convs[i] + [assistant(proc.tokenizer.decode(ids, skip_special_tokens=True)), user(rng, f"t{k}")]
            assert turns.extend(segs[i], ids, convs[i])
    inputs = turns.collate([(s, len(s)) for s in segs])
    start = min(len(s.prompt_ids) for s in segs)
    with torch.no_grad():
        logp = score_tokens(model, inputs, start, temperature=1.0).logp
    for b, s in enumerate(segs):
        mask = torch.tensor(s.response_mask, dtype=torch.bool)
        got = logp[b, len(s.prompt_ids):len(s)][mask]
        assert mask.sum() >= 2
        assert torch.allclose(got, torch.tensor(s.response_logprobs)[mask], atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_static_kv_cache_samples_what_the_dynamic_one_does(family):
    """``kv_cache="static"`` fills the batch (3 conversations → 4 rows) and left-pads prompts to a
    multiple of 256 tokens; greedy answers and their log-probs equal the dynamic cache's (CPU, fp32: no
    compile here, so this checks the padding, the fill and the cache itself)."""
    from spatialrl.train.policy_ops import STATIC_WIDTH_STEP

    rng = np.random.default_rng(2)
    model, proc = build_tiny(family)
    turns = TurnTokenizer(proc, model.config.model_type)
    segs = [turns.start([user(rng, "Go" * (i + 1))]) for i in range(3)]
    assert max(len(s) for s in segs) % STATIC_WIDTH_STEP  # padding really happens
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    dynamic = sample_segments(model, turns, segs, greedy, None)
    static = sample_segments(model, turns, segs, greedy, None, kv_cache="static")
    assert len(static) == 3
    for (ids_d, lp_d), (ids_s, lp_s) in zip(dynamic, static, strict=True):
        assert ids_s == ids_d and len(ids_d) >= 1
        assert np.allclose(lp_s, lp_d, atol=1e-4)
    with pytest.raises(ValueError, match="kv_cache"):
        sample_segments(model, turns, segs, greedy, None, kv_cache="paged")


def test_scoring_and_training_passes_agree_in_pure_bf16():
    """PPO's ratio compares the scoring pass (``model.eval()``, ``no_grad``: the old log-probs) with the
    training pass (``model.train()``, gradients on) over the same tokens. With the weights unchanged the
    two are one function of one batch, so in pure bf16 on the CPU they agree bit for bit: train mode
    changes nothing without dropout, and autograd does not change which kernels run here (on a GPU it
    may: ``benchmarks/logprob_drift.py`` measures that). A different temperature in either pass, a
    dropout, or any other change of the function is caught (the last assertion shows the check's reach)."""
    rng = np.random.default_rng(3)
    model, proc = build_tiny("qwen2_5_vl")
    model.to(torch.bfloat16)
    turns = TurnTokenizer(proc, model.config.model_type)
    segs = [turns.start([user(rng, "Go" * (i + 1))]) for i in range(3)]  # three lengths: right padding in play
    sampling = SamplingParams(temperature=0.2, top_p=1.0, max_new_tokens=6)
    for seg, (ids, lps) in zip(segs, sample_segments(model, turns, segs, sampling, torch.Generator().manual_seed(0)),
                               strict=True):
        turns.add_policy(seg, ids, lps, turn=0)
    inputs = turns.collate([(s, len(s)) for s in segs])
    start = min(len(s.prompt_ids) for s in segs)
    answer = torch.zeros(inputs["input_ids"].shape, dtype=torch.bool)
    for b, s in enumerate(segs):
        answer[b, len(s.prompt_ids):len(s)] = True
    with torch.no_grad():
        old = score_tokens(model, inputs, start, temperature=0.2).logp[answer]
    model.train()
    try:
        new = score_tokens(model, inputs, start, temperature=0.2).logp[answer]
    finally:
        model.eval()
    assert new.requires_grad and next(model.parameters()).dtype == torch.bfloat16
    assert answer.sum() >= 9 and bool((old < -1e-3).all())  # real, unsaturated log-probs
    assert torch.equal(new.detach(), old)
    with torch.no_grad():
        other = score_tokens(model, inputs, start, temperature=0.25).logp[answer]
    assert not torch.allclose(other, old, atol=1e-3)


def test_a_fresh_prompt_starts_a_new_segment():
    rng = np.random.default_rng(2)
    first = [user(rng, "a")]
    assert extends(first, first + [assistant("x"), user(rng, "b")])
    assert not extends(first, [user(rng, "fresh")])  # not a continuation
    assert not extends(first, first + [assistant("x")])  # no env answer yet
    model, proc = build_tiny("qwen2_5_vl")
    turns = TurnTokenizer(proc, "qwen2_5_vl")
    seg = turns.start(first)
    assert not turns.extend(seg, [1, 2], [user(rng, "fresh")])
    assert seg.response_ids == []  # untouched


def test_token_offsets_locate_the_action_field():
    """The SFTvsRL split of an answer into thought and action tokens, found from character offsets."""
    from spatialrl.train.losses import action_token_weights

    _, proc = build_tiny("qwen2_5_vl")
    tok = proc.tokenizer
    answer = '{"current observation": "No landmark nearby", "action": "forward()"}<|im_end|>'
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    text, ends = token_char_ends(tok, ids)
    assert text == answer and ends[-1] == len(answer)
    anchor = text.rfind('"action"')
    weights = action_token_weights(ends, anchor, 0.5)
    first_action = weights.index(1.0)
    # thought tokens end at or before the field's opening quote; the first action token covers it
    assert ends[first_action - 1] <= anchor < ends[first_action]
    assert '"action": "forward()"' in tok.decode(ids[first_action:])
    assert all(w == 0.5 for w in weights[:first_action]) and all(w == 1.0 for w in weights[first_action:])
    # a non-canonical sample (the same text split differently) still gets exact offsets
    odd = [t for piece in ("ac", "tion") for t in tok(piece, add_special_tokens=False)["input_ids"]]
    text2, ends2 = token_char_ends(tok, odd)
    assert text2 == "action" and ends2[-1] == 6
