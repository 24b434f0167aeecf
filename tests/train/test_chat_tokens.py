"""The label mask covers exactly the assistant tokens — on real samples of every task and memory mode,
for every supported model family — and training prompts equal the eval policy's prompts token for token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.agents.base import text_of
from spatialrl.agents.hf import HFPolicy
from spatialrl.errors import DataError
from spatialrl.models.encode import (
    IGNORE_INDEX,
    ChatTemplateError,
    assistant_texts,
    assistant_token_mask,
    encode_conversations,
    render_conversation,
)
from spatialrl.models.processor import load_processor
from spatialrl.train.data import SFTDataset

END_OF_TURN = {"qwen2_vl": "<|im_end|>", "qwen2_5_vl": "<|im_end|>", "qwen3_vl": "<|im_end|>",
               "idefics3": "<end_of_utterance>", "smolvlm": "<end_of_utterance>", "mllama": "<|eot_id|>"}
DATASETS = ["tvr_va_data", "tvr_ao_data", "tvr_va_cot_data", "virl_data", "gp_data", "gp_vl_data"]


@pytest.fixture(scope="module")
def processor(tiny_builtin):
    return load_processor(tiny_builtin)


def expected_answers(sample: dict, eot: str) -> list[str]:
    return [text_of(m) + eot for m in sample["messages"] if m["role"] == "assistant"]


@pytest.mark.parametrize("dataset", DATASETS)
def test_mask_is_exactly_the_assistant_turns_on_real_samples(dataset, processor, request):
    data = SFTDataset(request.getfixturevalue(dataset))
    samples = [data[i] for i in range(min(len(data), 4))]
    batch = encode_conversations(processor, [s["messages"] for s in samples], model_type="qwen2_5_vl")
    decoded = assistant_texts(processor, batch)
    for sample, runs in zip(samples, decoded, strict=True):
        assert runs == expected_answers(sample, "<|im_end|>")
        assert len(runs) == len(sample["turns"])
    # everything off the mask is prompt, images or padding: the unmasked tokens hold every user text
    for row, sample in zip(range(len(samples)), samples, strict=True):
        keep = batch["attention_mask"][row].bool() & (batch["labels"][row] == IGNORE_INDEX)
        prompt_text = processor.tokenizer.decode(batch["input_ids"][row][keep])
        for m in sample["messages"]:
            if m["role"] != "assistant":
                for part in m["content"]:
                    if part["type"] == "text":
                        assert part["text"] in prompt_text


def test_visual_action_samples_supervise_every_turn(tvr_va_data, tvr_ao_data):
    va, ao = SFTDataset(tvr_va_data), SFTDataset(tvr_ao_data)
    assert all(len(va[i]["turns"]) > 1 for i in range(len(va)))  # whole trajectories
    assert all(len(ao[i]["turns"]) == 1 for i in range(len(ao)))  # one sample per step
    assert sum(len(va[i]["turns"]) for i in range(len(va))) == len(ao)  # same expert steps, two shapes


@pytest.mark.parametrize("family", sorted(END_OF_TURN))
def test_every_family_masks_its_own_end_of_turn_token(family, tvr_va_data):
    from spatialrl.models.tiny import build_tiny

    model, proc = build_tiny(family)
    sample = SFTDataset(tvr_va_data)[0]
    short = sample["messages"][:5]  # system, user, assistant, user, assistant: two supervised turns, 4 images
    batch = encode_conversations(proc, [short], model_type=model.config.model_type)
    assert assistant_texts(proc, batch) == [expected_answers({"messages": short}, END_OF_TURN[family])]
    with torch.no_grad():  # the encoded batch is a valid model input
        out = model(**{k: v for k, v in batch.items() if k != "labels"})
    assert out.logits.shape[:2] == batch["input_ids"].shape


@pytest.mark.parametrize("family", ["qwen2_5_vl", "idefics3"])
def test_training_prompts_equal_the_eval_policy_prompts(family, tvr_va_data):
    """The tokens before each assistant turn are what HFPolicy sends to generate that turn."""
    from spatialrl.models.tiny import build_tiny

    model, proc = build_tiny(family)
    policy = HFPolicy(model, proc, device="cpu", dtype=torch.float32)
    messages = SFTDataset(tvr_va_data)[0]["messages"][:5]
    full = encode_conversations(proc, [messages], model_type=family)
    ids = full["input_ids"][0].tolist()
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = policy.prompt_inputs(messages[:k])["input_ids"][0].tolist()
        assert ids[: len(prompt)] == prompt
        assert full["labels"][0, len(prompt)].item() == ids[len(prompt)]  # the answer starts right there
        assert full["labels"][0, len(prompt) - 1].item() == IGNORE_INDEX


def test_mask_agrees_with_the_templates_generation_blocks(processor, tvr_va_data):
    """The built-in template marks assistant text with {% generation %}; HF's own mask must agree."""
    messages = SFTDataset(tvr_va_data)[0]["messages"]
    rendered = render_conversation(processor, messages)
    ids, mask = assistant_token_mask(processor.tokenizer, rendered)
    text_only = [{"role": m["role"], "content": [p if p["type"] == "text" else {"type": "image"} for p in m["content"]]}
                 for m in messages]
    hf = processor.tokenizer.apply_chat_template(text_only, tokenize=True, return_dict=True,
                                                 return_assistant_tokens_mask=True)
    assert hf["input_ids"] == ids
    assert hf["assistant_masks"] == mask


def test_template_that_rewrites_earlier_turns_is_rejected(processor):
    """Like Qwen3's template (old reasoning stripped once a later turn exists): masks cannot be exact."""
    import copy

    proc = copy.deepcopy(processor)
    proc.chat_template = (
        "{% for m in messages %}{% set i = loop.index0 %}<|im_start|>{{ m['role'] }}\n"
        "{% for c in m['content'] %}{% if c['type'] == 'text' %}"
        "{% if m['role'] == 'assistant' and i < messages|length - 1 and '</think>' in c['text'] %}"
        "{{ c['text'].split('</think>')[-1] }}{% else %}{{ c['text'] }}{% endif %}{% endif %}{% endfor %}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    conv = [{"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "<think>hm</think>\nAction: Stop"}]},
            {"role": "user", "content": [{"type": "text", "text": "again"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "<think>so</think>\nAction: Stop"}]}]
    with pytest.raises(ChatTemplateError, match="incrementally"):
        encode_conversations(proc, [conv])


def test_bad_conversations_fail_with_clear_errors(processor):
    image = np.zeros((28, 28, 3), np.uint8)
    long_conv = [{"role": "user", "content": [{"type": "text", "text": "word " * 300}]},
                 {"role": "assistant", "content": [{"type": "text", "text": "Action: Stop"}]}]
    with pytest.raises(DataError, match="sample-7: .* exceed data.max_length=50"):
        encode_conversations(processor, [long_conv], max_length=50, names=["sample-7"])
    bad_role = [{"role": "robot", "content": [{"type": "text", "text": "x"}]}]
    with pytest.raises(DataError, match="unknown role 'robot'"):
        encode_conversations(processor, [bad_role])
    image_answer = [{"role": "user", "content": [{"type": "text", "text": "x"}]},
                    {"role": "assistant", "content": [{"type": "image", "image": image}]}]
    with pytest.raises(DataError, match="assistant turns cannot hold images"):
        encode_conversations(processor, [image_answer])


@pytest.mark.parametrize("family", ["qwen2_5_vl", "mllama"])
def test_context_answers_are_not_targets(family, tvr_va_data):
    """An assistant message marked ``"train": false`` (an earlier answer a retry prompt repeats) is prompt:
    off the mask, its text still in the input; the other answers stay targets. Mllama folds the system
    message away, which must not shift the flags."""
    from spatialrl.models.tiny import build_tiny

    _, proc = build_tiny(family)
    short = SFTDataset(tvr_va_data)[0]["messages"][:5]  # system, user, assistant, user, assistant
    marked = [*short[:2], {**short[2], "train": False}, *short[3:]]
    batch = encode_conversations(proc, [marked, short], model_type=family)
    texts = assistant_texts(proc, batch)
    assert texts[0] == expected_answers({"messages": short[3:]}, END_OF_TURN[family])
    assert texts[1] == expected_answers({"messages": short}, END_OF_TURN[family])
    assert torch.equal(batch["input_ids"][0], batch["input_ids"][1])  # the same tokens, a smaller mask
    assert int((batch["labels"][0] != IGNORE_INDEX).sum()) < int((batch["labels"][1] != IGNORE_INDEX).sum())


def test_a_bad_train_flag_is_a_clear_error(processor):
    user = {"role": "user", "content": [{"type": "text", "text": "x"}]}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "Action: Stop"}]}
    with pytest.raises(DataError, match="field 'train' must be true or false"):
        encode_conversations(processor, [[user, {**answer, "train": "no"}]])
    with pytest.raises(DataError, match="only applies to assistant messages"):
        encode_conversations(processor, [[{**user, "train": False}, answer]])
