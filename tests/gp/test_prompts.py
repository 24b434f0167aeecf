"""Prompts: the reference's text byte for byte, image placement, and the retry turns."""

from __future__ import annotations

import numpy as np

from spatialrl.envs.gp.env import GeneralPointsEnv
from spatialrl.envs.gp.prompts import RETRY_PREFIX, GPPrompter, task_prompt, tokenizer_corpus

# Q_GeneralPoint_EQN_VL filled as the reference's evaluator fills it (face cards as 10, target 24).
REFERENCE_VL = (
    "\n[Task Description]\n"
    "You are an expert 24 points card game player. You are observing these four cards in the image.\n"
    "Note that 'J', 'Q', and 'K' count as '10'., and each card must be used once.\n"
    "Your goal is to output a formula that evaluates to 24 using numbers from the cards and operators such as "
    "'+', '-', '*', '/', '(', ')', and '='.\n"
    "\n[Output]\n"
    "Your response should be a valid json file in the following format:\n"
    "{\n"
    "  \"cards\": [x, y, z, w], where 'J', 'Q', and 'K' count as '10'.,\n"
    "  \"number\": [a, b, c, d], where a, b, c, and d are the numbers on the cards,\n"
    "  \"formula\": 'an equation that equals 24',\n"
    "}\n\n"
)


def test_vl_prompt_is_the_reference_text():
    info = {"target": 24, "face_cards_as_10": True, "plain_cards": ["A", "3", "K", "6"]}
    assert task_prompt(info, "vl") == REFERENCE_VL


def test_l_prompt_with_example_under_the_ood_rule():
    info = {"target": 24, "face_cards_as_10": False, "plain_cards": ["2", "Q", "7", "Q"]}
    text = task_prompt(info, "l", example=True)
    assert "You will receive a set of 4 cards.\n" in text
    assert "Note that 'J', 'Q', and 'K' count as '11', '12', and '13' respectively., and each card" in text
    assert "\n[Input]\nCards: ['2', 'Q', '7', 'Q']\n\n[Output]\n{\n" in text
    assert text.endswith(
        "}\n\n[Output Example]\n{\n  \"cards\": [4, 3, 2, K],\n  \"number\": [4, 3, 2, 10],\n"
        "  \"formula\": \"4*3+2+10=24\",\n}\n\nPlease only output the json.\n"
    )
    assert task_prompt({**info, "target": 10}, "l").count("10 points card game") == 1


def test_conversation_grows_with_retry_turns():
    env = GeneralPointsEnv(mode="vl", resolution=96)
    obs, info = env.reset(seed=2)
    prompter = GPPrompter(mode="vl")
    prompter.reset(obs, info)
    first = prompter.messages()
    assert len(first) == 1 and first[0]["role"] == "user"
    image, text = first[0]["content"]
    assert image["type"] == "image" and isinstance(image["image"], np.ndarray) and image["image"].shape == (96, 96, 3)
    assert text["text"] == task_prompt(info, "vl")

    answer = '{"cards": ["A", "A", "A", "A"], "formula": "1"}'
    obs, _, _, _, info = env.step(answer)
    prompter.update(answer, obs, info)
    chat = prompter.messages()
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert chat[1]["content"] == [{"type": "text", "text": answer}]
    assert chat[2]["content"][0]["text"] == "You failed this trial because you recognized wrong cards"
    assert chat[:1] == first  # earlier turns are kept as they were

    obs, _, terminated, _, info = env.step(info["expert_response"])
    prompter.update(info["expert_response"], obs, info)
    assert terminated and len(prompter.messages()) == 4  # a success gets no retry turn


def test_l_mode_has_no_image_and_corpus_is_deterministic():
    env = GeneralPointsEnv(mode="l")
    obs, info = env.reset(seed=4)
    prompter = GPPrompter(mode="l")
    prompter.reset(obs, info)
    (message,) = prompter.messages()
    assert [p["type"] for p in message["content"]] == ["text"]
    assert f"Cards: {info['plain_cards']!r}" in message["content"][0]["text"]

    corpus = tokenizer_corpus()
    assert corpus == tokenizer_corpus()
    assert any(t.startswith(RETRY_PREFIX) for t in corpus)
    assert any('"formula": "' in t for t in corpus)
    assert sum("respectively" in t for t in corpus) > 0
