"""Expert SFT data for GP through the generic builder: eval prompts byte for byte, CoT answers still solve."""

from __future__ import annotations

import json

from spatialrl.envs.gp.prompts import COT_INSTRUCTION, task_prompt
from spatialrl.envs.registry import get_suite
from spatialrl.train.cot import thought_function
from spatialrl.train.data import build_sft_dataset

SUITE = get_suite("gp")


def test_expert_dataset(tmp_path):
    options = {"split": "in-dist,rule-ood", "episodes": 3, "resolution": 96}
    meta = build_sft_dataset(SUITE, options, tmp_path / "sft", progress=False)
    assert meta["episodes"] == 6 and meta["samples"] == 6 and not meta["episodes_dropped"]
    assert meta["images"] == 6 and meta["categories"] == {"in-dist": 3, "rule-ood": 3}
    rows = [json.loads(line) for line in (tmp_path / "sft" / "samples.jsonl").read_text().splitlines()]
    env = SUITE.make_env(options)
    for row, spec in zip(rows, SUITE.episodes(options), strict=True):
        _, info = env.reset(seed=spec.seed, options=spec.reset_options)
        user, answer = row["messages"]
        assert user["content"][0]["type"] == "image" and user["content"][1]["text"] == task_prompt(info, "vl")
        assert answer["content"][0]["text"] == info["expert_response"]


def test_cot_dataset_answers_still_verify(tmp_path):
    options = {"split": "visual-ood", "episodes": 3, "mode": "l", "cot": True}
    meta = build_sft_dataset(SUITE, options, tmp_path / "cot", thought_fn=thought_function("gp"), progress=False)
    assert meta["episodes"] == 3 and not meta["episodes_dropped"]  # every CoT answer was scored correct
    rows = [json.loads(line) for line in (tmp_path / "cot" / "samples.jsonl").read_text().splitlines()]
    for row in rows:
        user, answer = row["messages"]
        assert user["content"][0]["text"].endswith(COT_INSTRUCTION)
        text = answer["content"][0]["text"]
        assert text.startswith("<think>The cards are ") and '"formula": "' in text.split("</think>")[1]
