"""HFPolicy on a tiny random model of every family: batched, left-padded, multi-image multi-turn.

The reference for every returned token and log-prob is a teacher-forced forward pass written here
from the processor and model directly (not through HFPolicy), one conversation at a time, unpadded.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.models.tiny import BUILDERS, save_tiny

FAMILIES = list(BUILDERS)


def _image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def conversations(seed: int = 0) -> list[list[dict]]:
    """Three conversations of different prompt lengths: one image; a VA-memory style two-turn with two
    images (one in an earlier user turn, one in the last); text only."""
    rng = np.random.default_rng(seed)
    system = {"role": "system", "content": [{"type": "text", "text": "You are an agent in a room."}]}
    return [
        [system, {"role": "user", "content": [{"type": "image", "image": _image(rng, 60, 80)},
                                              {"type": "text", "text": "Go to the red box."}]}],
        [system,
         {"role": "user", "content": [{"type": "text", "text": "Target view:"},
                                      {"type": "image", "image": _image(rng, 90, 120)},
                                      {"type": "text", "text": "Turn left and move forward."}]},
         {"role": "assistant", "content": [{"type": "text", "text": "Action: MoveAhead"}]},
         {"role": "user", "content": [{"type": "image", "image": _image(rng, 50, 50)},
                                      {"type": "text", "text": "Your previous action was invalid. Please try again."}]}],
        [system, {"role": "user", "content": [{"type": "text", "text": "Answer with the action only."}]}],
    ]


@pytest.fixture(scope="module", params=FAMILIES)
def policy(request, tmp_path_factory) -> HFPolicy:
    """Saved to disk and loaded back through ``from_pretrained`` (the path ``hf:PATH`` takes)."""
    path = save_tiny(request.param, tmp_path_factory.mktemp(request.param), seed=0)
    return HFPolicy.from_pretrained(path, device="cpu")


def teacher_forced(policy: HFPolicy, conversation: list[dict], token_ids: list[int], temperature: float) -> torch.Tensor:
    """Full-vocabulary log-probs at each answer position: processor on the prompt, answer appended."""
    images = [part["image"] for m in conversation for part in m["content"] if part["type"] == "image"]
    messages = [{"role": m["role"], "content": [{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                                                 for p in m["content"]]} for m in conversation]
    if policy.family == "mllama":  # the policy folds the system prompt into the first user turn
        sys_text = messages[0]["content"][0]["text"]
        messages = messages[1:]
        messages[0]["content"] = [{"type": "text", "text": sys_text + "\n\n"}, *messages[0]["content"]]
    text = policy.processor.apply_chat_template(messages, add_generation_prompt=True)
    from PIL import Image

    kwargs = {"text": [text], "return_tensors": "pt", "add_special_tokens": False}
    if images:
        kwargs["images"] = [[Image.fromarray(im) for im in images]]
    inputs = dict(policy.processor(**kwargs))
    n, seq = len(token_ids), inputs["input_ids"].shape[1]
    for key, value in list(inputs.items()):
        if key == "input_ids":
            inputs[key] = torch.cat([value, torch.tensor([token_ids])], dim=1)
        elif key == "attention_mask":
            inputs[key] = torch.cat([value, torch.ones(1, n, dtype=value.dtype)], dim=1)
        elif value.dim() >= 2 and value.shape[:2] == (1, seq):  # per-token extras: repeat the last position
            inputs[key] = torch.cat([value, value[:, -1:].expand(1, n, *value.shape[2:])], dim=1)
    with torch.no_grad():
        logits = policy.model(**inputs).logits[0, seq - 1 : seq - 1 + n].float()
    return torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=10),
                                      SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=10, seed=3)],
                         ids=["greedy", "sampled"])
def test_tokens_and_logprobs_match_teacher_forcing(policy: HFPolicy, sampling: SamplingParams):
    convs = conversations()
    gens = policy.generate(convs, sampling)
    assert len(gens) == 3 and all(g.error is None for g in gens)
    prompt_lengths = {g.prompt_tokens for g in gens}
    assert len(prompt_lengths) == 3, "prompts must differ in length to exercise left padding"
    for conv, gen in zip(convs, gens, strict=True):
        assert 1 <= len(gen.token_ids) <= sampling.max_new_tokens
        assert len(gen.logprobs) == len(gen.token_ids) == gen.completion_tokens
        eos = [k for k, t in enumerate(gen.token_ids) if t in policy.eos_token_ids]
        assert eos in ([], [len(gen.token_ids) - 1]), "completion ends at (and includes) the first EOS"
        ref = teacher_forced(policy, conv, gen.token_ids, sampling.temperature)
        ids = torch.tensor(gen.token_ids)
        ref_lp = ref.gather(-1, ids[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(gen.logprobs), ref_lp, atol=2e-4, rtol=0)
        if sampling.greedy:
            allowed = ref.clone()
            allowed[:, policy.banned_token_ids] = float("-inf")
            assert torch.equal(allowed.argmax(-1), ids)
        assert gen.text == policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)


def test_collate_equals_batched_processor(policy: HFPolicy):
    """Per-conversation processing + our collation == one batched processor call, tensor for tensor."""
    prepared = [policy._prepare(c) for c in conversations()]

    def batched(prepared):
        images = [p.images for p in prepared]
        flat = [im for p in prepared for im in p.images]
        return policy.processor(text=[p.text for p in prepared], padding=True, return_tensors="pt",
                                add_special_tokens=False,
                                images=images if policy.family not in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") else flat)

    try:
        theirs = batched(prepared)
    except ValueError as e:  # Mllama's processor in transformers 5.17 refuses a batch mixing text-only rows
        assert "at least one image per sample" in str(e)  # (ours encodes them); compare the rows with images
        prepared = [p for p in prepared if p.images]
        assert len(prepared) >= 2
        theirs = batched(prepared)
    ours = policy._encode(prepared)
    assert set(ours.keys()) == set(theirs.keys())
    for key in theirs:
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key


def test_batch_equals_one_by_one(policy: HFPolicy):
    """Left padding must not change what a conversation gets: batched == alone."""
    convs = conversations(seed=1)
    sampling = SamplingParams(max_new_tokens=8)
    batched = policy.generate(convs, sampling)
    for conv, gen in zip(convs, batched, strict=True):
        alone = policy.generate([conv], sampling)[0]
        assert alone.token_ids == gen.token_ids
        np.testing.assert_allclose(alone.logprobs, gen.logprobs, atol=2e-4)


def test_completion_logprobs_helper(policy: HFPolicy):
    conv = conversations()[1]
    gen = policy.generate([conv], SamplingParams(temperature=1.0, max_new_tokens=6, seed=0))[0]
    lp = policy.completion_logprobs(conv, gen.token_ids, temperature=1.0)
    np.testing.assert_allclose(lp.numpy(), gen.logprobs, atol=2e-4)


def test_sampling_seeded(policy: HFPolicy):
    convs = conversations()
    a = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=12, seed=7))
    b = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=12, seed=7))
    c = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=12, seed=8))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    state = torch.random.get_rng_state()
    policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=4, seed=1))
    assert torch.equal(state, torch.random.get_rng_state()), "sampling must not touch the global RNG"


def test_one_bad_conversation_does_not_sink_the_batch(policy: HFPolicy):
    convs = conversations()
    bad = [{"role": "user", "content": [{"type": "image", "image": np.zeros((4, 4), np.float32)},
                                        {"type": "text", "text": "x"}]}]
    gens = policy.generate([convs[0], bad, convs[2]], SamplingParams(max_new_tokens=4))
    assert gens[1].error and "uint8" in gens[1].error and gens[1].text == ""
    assert gens[0].error is None and gens[2].error is None
    assert gens[0].token_ids == policy.generate([convs[0]], SamplingParams(max_new_tokens=4))[0].token_ids


def test_min_new_tokens_and_chunking(tmp_path):
    """``min_new_tokens`` forces fixed-length answers (benchmarks); ``max_batch_size`` splits a call."""
    path = save_tiny("qwen2_5_vl", tmp_path / "m")
    policy = HFPolicy.from_pretrained(path, device="cpu", min_new_tokens=9, max_batch_size=2)
    gens = policy.generate(conversations() * 2, SamplingParams(max_new_tokens=9))
    assert [len(g.token_ids) for g in gens] == [9] * 6
    assert [g.token_ids for g in gens[:3]] == [g.token_ids for g in gens[3:]]


def test_out_of_memory_halves_the_batch_after_freeing_the_failed_one(tmp_path, monkeypatch):
    """A batch that runs out of memory is halved until it fits, and each retry starts after the failed
    call's tensors are gone (a retry inside the ``except`` block would keep them alive through the
    traceback: on the 11B every half then failed too, down to batch 1). Batches above 2 "run out of
    memory" here; the answers equal unsplit generation."""
    import weakref

    path = save_tiny("qwen2_5_vl", tmp_path / "m")
    policy = HFPolicy.from_pretrained(path, device="cpu")
    greedy = SamplingParams(max_new_tokens=4)
    want = [g.token_ids for g in policy.generate(conversations() * 2, greedy)]
    real = HFPolicy._generate_batch
    failed: list[weakref.ref] = []

    def tight(self, parts, sampling, row_seeds=None):
        assert all(ref() is None for ref in failed), "a retry started while the failed batch's tensors lived"
        if len(parts) > 2:
            activations = torch.zeros(len(parts), 1024)  # what the failed batch had allocated
            failed.append(weakref.ref(activations))
            raise torch.OutOfMemoryError(f"out of memory at batch {activations.shape[0]}")
        return real(self, parts, sampling, row_seeds)

    monkeypatch.setattr(HFPolicy, "_generate_batch", tight)
    before = policy.usage["oom_splits"]
    gens = policy.generate(conversations() * 2, greedy)  # 6 -> 3 + 3 -> (1 + 2) + (1 + 2)
    assert [g.token_ids for g in gens] == want and all(g.error is None for g in gens)
    assert policy.usage["oom_splits"] - before == 3 and len(failed) == 3


def test_max_pixels_knob_shrinks_image_tokens(tmp_path):
    path = save_tiny("qwen2_5_vl", tmp_path / "m")
    conv = [{"role": "user", "content": [{"type": "image", "image": np.zeros((224, 224, 3), np.uint8)}]}]
    default = HFPolicy.from_pretrained(path, device="cpu")
    small = HFPolicy.from_pretrained(path, device="cpu", max_pixels=56 * 56)
    n_default = int(default.prompt_inputs(conv)["input_ids"].shape[1])
    n_small = int(small.prompt_inputs(conv)["input_ids"].shape[1])
    assert n_default - n_small == 16 - 4  # 112² -> 4x4 merged tokens; 56² -> 2x2


def test_bad_model_folder(tmp_path):
    from spatialrl.errors import DataError

    with pytest.raises(DataError, match="does not exist"):
        HFPolicy.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="config.json"):
        HFPolicy.from_pretrained(tmp_path / "empty")
