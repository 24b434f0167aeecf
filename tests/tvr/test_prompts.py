"""Golden tests of the TVR prompt texts and memory modes."""

import numpy as np
import pytest

from spatialrl.agents.base import images_of, text_of
from spatialrl.envs.tvr.prompts import (
    JOINED_LINE,
    SYSTEM_PROMPT,
    SYSTEM_PROMPT_COT,
    TVRPrompter,
    to_content,
    tokenizer_corpus,
    user_text,
)

VALID = ["MoveAhead", "RotateRight", "RotateLeft", "LookDown", "Stop"]


def img(v):
    return np.full((4, 6, 3), v, np.uint8)


def info(valid=VALID, record=None):
    d = {"target_image": img(255), "valid_actions": valid}
    if record is not None:
        d["record"] = record
    return d


def test_system_prompt_is_tvrbench_verbatim():
    assert len(SYSTEM_PROMPT) == 942  # TVRBench asserts exactly 942 characters
    assert SYSTEM_PROMPT.startswith("You are a navigation agent in an indoor environment. Your task is to navigate")
    assert "- RotateRight: Rotate clockwise 45°\n" in SYSTEM_PROMPT
    assert SYSTEM_PROMPT.endswith("You MUST respond in exactly this format:\nAction: <action name>")
    assert "<think>" in SYSTEM_PROMPT_COT and SYSTEM_PROMPT_COT.endswith("Action: <action name>")


def test_user_text_matches_tvrbench_concat_text():
    assert user_text(VALID) == (
        "Your CURRENT observation:\n<image>\nTARGET viewpoint you must match:\n<image>\n"
        "Valid actions at this step: MoveAhead, RotateRight, RotateLeft, LookDown, Stop"
    )


def test_to_content_round_trips_text_and_images():
    a, b = img(1), img(2)
    parts = to_content(user_text(VALID), [a, b])
    assert [p["type"] for p in parts] == ["text", "image", "text", "image", "text"]
    rebuilt = "".join(p["text"] if p["type"] == "text" else "<image>" for p in parts)
    assert rebuilt == user_text(VALID)
    assert parts[1]["image"] is a and parts[3]["image"] is b
    with pytest.raises(ValueError, match="placeholders"):
        to_content(user_text(VALID), [a])


def run_turns(p, n):
    p.reset(img(0), info())
    for i in range(1, n + 1):
        p.update("Action: MoveAhead", img(i), info(record={"action": "MoveAhead", "failure": None}))


def test_va_keeps_the_full_chat_with_both_images_every_turn():
    p = TVRPrompter("va")
    run_turns(p, 2)
    conv = p.messages()
    assert [m["role"] for m in conv] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert text_of(conv[0]) == SYSTEM_PROMPT
    assert len(images_of(conv)) == 6
    assert [int(im[0, 0, 0]) for im in images_of(conv)] == [0, 255, 1, 255, 2, 255]
    assert text_of(conv[2]) == "Action: MoveAhead"


def test_target_once_sends_the_target_only_in_the_first_turn():
    p = TVRPrompter("va", target_once=True)
    run_turns(p, 2)
    conv = p.messages()
    assert [int(im[0, 0, 0]) for im in images_of(conv)] == [0, 255, 1, 2]
    assert text_of(conv[3]) == "Your CURRENT observation:\n\nValid actions at this step: " + ", ".join(VALID)


def test_window_keeps_the_last_k_observations_and_the_answers():
    p = TVRPrompter("window", window=2)
    run_turns(p, 3)
    conv = p.messages()
    assert [m["role"] for m in conv].count("assistant") == 3
    assert [int(im[0, 0, 0]) for im in images_of(conv)] == [2, 255, 3, 255]
    assert text_of(conv[1]).startswith("Your CURRENT observation:\n[image omitted]\nTARGET viewpoint")
    q = TVRPrompter("window", window=1, target_once=True)
    run_turns(q, 2)
    assert [int(im[0, 0, 0]) for im in images_of(q.messages())] == [255, 2]


def test_ao_sends_one_turn_with_a_text_history_of_recent_actions():
    p = TVRPrompter("ao", history_len=2)
    p.reset(img(0), info())
    assert text_of(p.messages()[1]) == user_text(VALID).replace("<image>", "")  # no history yet
    p.update("Action: MoveAhead", img(1), info(record={"action": "MoveAhead", "failure": "blocked"}))
    p.update("garbage", img(2), info(record={"action": None, "failure": "unparsable"}))
    p.update("Action: LookUp", img(3), info(record={"action": "LookUp", "failure": None}))
    conv = p.messages()
    assert [m["role"] for m in conv] == ["system", "user"]
    assert [int(im[0, 0, 0]) for im in images_of(conv)] == [3, 255]
    text = text_of(conv[1])
    assert "Your recent actions:\nStep 2: (no valid action) [WARNING]" in text
    assert "\nStep 3: LookUp\nValid actions at this step:" in text
    assert "Step 1" not in text  # only the last history_len=2 entries


def test_joined_frames_send_one_side_by_side_image_with_one_text_line():
    assert user_text(VALID, joined=True) == (
        "Your CURRENT observation (left) and the TARGET viewpoint you must match (right):\n<image>\n"
        "Valid actions at this step: MoveAhead, RotateRight, RotateLeft, LookDown, Stop"
    )
    p = TVRPrompter("ao", history_len=2, frames="joined")
    p.reset(img(7), info())
    p.update("Action: MoveAhead", img(1), info(record={"action": "MoveAhead", "failure": None}))
    conv = p.messages()
    (image,) = images_of(conv)
    assert image.shape == (4, 12, 3)  # (H, 2W): the current frame left, the target right, unscaled
    assert (image[:, :6] == 1).all() and (image[:, 6:] == 255).all()
    assert text_of(conv[1]) == (JOINED_LINE + "\n\nYour recent actions:\nStep 1: MoveAhead\n"
                                "Valid actions at this step: MoveAhead, RotateRight, RotateLeft, LookDown, Stop")
    separate = TVRPrompter("ao", history_len=2)  # the same turn in TVRBench's two images differs only there
    separate.reset(img(7), info())
    separate.update("Action: MoveAhead", img(1), info(record={"action": "MoveAhead", "failure": None}))
    assert text_of(separate.messages()[1]).split("Your recent actions:")[1] == text_of(conv[1]).split(
        "Your recent actions:")[1]


def test_joined_frames_in_a_va_and_a_window_chat_one_image_per_turn():
    """VA keeps every turn's joined image; window omits an old turn's whole image. The text of each user
    turn is the AO joined line without the history block (the chat holds the history)."""
    turn_text = (JOINED_LINE + "\n<image>\nValid actions at this step: MoveAhead, RotateRight, RotateLeft, "
                 "LookDown, Stop")
    for memory, kept in (("va", [True, True, True]), ("window", [False, True, True])):
        p = TVRPrompter(memory, window=2, frames="joined")
        p.reset(img(7), info())
        p.update("Action: MoveAhead", img(1), info())
        p.update("Action: RotateRight", img(2), info())
        conv = p.messages()
        assert [m["role"] for m in conv] == ["system", "user", "assistant", "user", "assistant", "user"]
        users = [m for m in conv if m["role"] == "user"]
        images = images_of(conv)
        assert len(images) == sum(kept)
        for image, current in zip(images, [c for c, k in zip((7, 1, 2), kept, strict=True) if k], strict=True):
            assert image.shape == (4, 12, 3)
            assert (image[:, :6] == current).all() and (image[:, 6:] == 255).all()
        for user, k in zip(users, kept, strict=True):
            assert text_of(user) == turn_text.replace("<image>", "" if k else "[image omitted]")  # images: ""


def test_bad_options_and_order_of_calls():
    with pytest.raises(ValueError, match="memory mode"):
        TVRPrompter("full")
    with pytest.raises(ValueError, match="frames layout"):
        TVRPrompter("ao", frames="stacked")
    with pytest.raises(ValueError, match="frames=joined needs target_once=false"):
        TVRPrompter("va", frames="joined", target_once=True)
    with pytest.raises(ValueError, match="include_target"):
        user_text(VALID, include_target=False, joined=True)
    with pytest.raises(RuntimeError):
        TVRPrompter().messages()


def test_tokenizer_corpus_covers_prompts_and_answers():
    corpus = tokenizer_corpus()
    assert SYSTEM_PROMPT in corpus and "Action: Stop" in corpus
    assert any("Your recent actions:" in t for t in corpus)
    assert all(isinstance(t, str) and t for t in corpus)
