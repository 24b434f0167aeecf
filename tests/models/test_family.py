"""One model-I/O layer (``models/family.py``, ``models/encode.py``, ``models/sampling.py``), per family
adapter: the token stream eval sends (``HFPolicy``) is the one RL records (``TurnTokenizer``) and SFT
trains on (``encode_conversations``), and eval and RL decode the same tokens from it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.agents.vision_cache import VisionCache
from spatialrl.models.encode import IGNORE_INDEX, encode_conversations, encode_prompt
from spatialrl.models.family import (
    FAMILIES,
    VISION_MODULE_NAMES,
    banned_token_ids,
    eos_token_ids,
    family_of,
    model_family,
)
from spatialrl.models.tiny import BUILDERS, build_tiny
from spatialrl.rollout.trajectory import TurnTokenizer
from spatialrl.train.policy_ops import sample_segments
from tests.conversations import assistant, user
from tests.transformers_release import QWEN_TAKES_ENCODED_IMAGES

FAMILY_NAMES = sorted(BUILDERS)


def conversation(rng):
    """System prompt, two image turns answered, a third asked: exercises folding, nesting, increments."""
    return [{"role": "system", "content": [{"type": "text", "text": "You are an agent."}]},
            user(rng, "Where now?"), assistant("Action: MoveAhead"),
            user(rng, "And now?"), assistant("Action: Stop"), user(rng, "Done?")]


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def tiny(request):
    model, proc = build_tiny(request.param)
    policy = HFPolicy(model, proc, device="cpu", dtype=torch.float32, vision_cache_mb=0)
    return request.param, policy, TurnTokenizer(proc, request.param)


def test_every_path_uses_the_one_adapter(tiny):
    name, policy, turns = tiny
    family = FAMILIES[name]
    assert policy.adapter is family and turns.family is family and model_family(policy.model) is family
    assert family_of(None, policy.processor) is family  # SFT without a model_type: from the processor class
    assert policy.fold_system == turns.fold_system == (name == "mllama")
    assert policy.pad_token_id == turns.pad_id
    eos = eos_token_ids(policy.model, policy.tokenizer)
    assert sorted(policy.eos_token_ids) == eos
    assert policy.banned_token_ids == banned_token_ids(policy.model, eos)
    assert policy.processor.tokenizer.convert_tokens_to_ids(policy.processor.image_token) in policy.banned_token_ids
    towers = {n.rsplit(".", 1)[-1] for n, _ in policy.model.named_modules()}
    assert set(family.vision_modules) <= towers and set(family.vision_modules) <= set(VISION_MODULE_NAMES)
    assert VisionCache.supports(policy.model) == (family.vision_features is not None
                                                  and (family.vision_features != "qwen" or QWEN_TAKES_ENCODED_IMAGES))


def test_eval_tokens_equal_rl_and_sft_tokens(tiny):
    """At every turn: HFPolicy's prompt == the RL segment built turn by turn == the SFT encoding's
    prefix before that answer (ids, and every image tensor between eval and RL)."""
    name, policy, turns = tiny
    conv = conversation(np.random.default_rng(0))
    sft = encode_conversations(policy.processor, [conv[:5]], model_type=name)
    sft_ids = sft["input_ids"][0].tolist()
    seg = turns.start(conv[:2])
    for k in (2, 4, 6):  # the prompts before the two answers and before the next one
        prompt = conv[:k]
        eval_inputs = policy.prompt_inputs(prompt)
        direct = encode_prompt(policy.processor, policy.adapter, prompt)
        rl_inputs = turns.collate([(seg, len(seg))])
        assert seg.ids == eval_inputs["input_ids"][0].tolist()
        assert direct.keys() == eval_inputs.keys()
        for key, value in eval_inputs.items():
            assert torch.equal(rl_inputs[key], value), key
            assert torch.equal(direct[key], value), key
        if k < 6:
            n = len(seg.ids)
            assert sft_ids[:n] == seg.ids
            assert sft["labels"][0, n - 1].item() == IGNORE_INDEX and sft["labels"][0, n].item() == sft_ids[n]
            answer = policy.tokenizer(conv[k]["content"][0]["text"] + policy.tokenizer.eos_token,
                                      add_special_tokens=False)["input_ids"]
            turns.add_policy(seg, answer, [0.0] * len(answer), turn=k)
            assert turns.extend(seg, answer, conv[: k + 2])


def test_eval_and_rl_decode_the_same_tokens(tiny):
    """HFPolicy.generate and the trainers' sample_segments share the sampler and the decode loop: the
    same prompts give the same answers and log-probs, greedy (a batch of two) and seeded sampling."""
    _, policy, turns = tiny
    rng = np.random.default_rng(1)
    convs = [[user(rng, "Go")], [user(rng, "Go on, go on")]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    gens = policy.generate(convs, greedy)
    rl = sample_segments(policy.model, turns, [turns.start(c) for c in convs], greedy, None)
    for gen, (ids, lps) in zip(gens, rl, strict=True):
        assert gen.token_ids == ids and len(ids) >= 1
        np.testing.assert_allclose(gen.logprobs, lps, atol=1e-4)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    gen = policy.generate(convs[:1], sampled)[0]
    (ids, lps), = sample_segments(policy.model, turns, [turns.start(convs[0])], sampled,
                                  torch.Generator().manual_seed(3))
    assert gen.token_ids == ids
    np.testing.assert_allclose(gen.logprobs, lps, atol=1e-4)


def test_unknown_family_gets_the_generic_adapter():
    generic = family_of("llava")
    assert generic.name == "llava" and not generic.fold_system and not generic.nested_images
    assert generic.vision_features is None and generic.vision_modules == VISION_MODULE_NAMES
    assert generic.processor_images([["a", "b"], ["c"]]) == ["a", "b", "c"]
    assert FAMILIES["mllama"].processor_images([["a", "b"], ["c"]]) == [["a", "b"], ["c"]]
    assert family_of("qwen3_vl_moe").vision_features == "qwen"
