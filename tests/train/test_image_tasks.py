"""The synthetic image-only tasks and the check that a fresh built-in model learns to see with them."""

import numpy as np
import pytest

from spatialrl.train.image_tasks import ANSWERS, TASKS, answer_accuracy, check_answer_tokens, learn, make_chat


def _images(chat):
    return [p["image"] for p in chat[0]["content"] if p["type"] == "image"]


def _answer(chat):
    return chat[1]["content"][0]["text"]


@pytest.mark.parametrize("task", TASKS)
def test_chats_are_deterministic_and_answer_from_the_pixels(task):
    a = [make_chat(task, np.random.default_rng(3)) for _ in range(2)]
    assert _answer(a[0]) == _answer(a[1]) and all(np.array_equal(x, y) for x, y in zip(_images(a[0]), _images(a[1])))
    chats = [make_chat(task, np.random.default_rng(i), height=40, width=60) for i in range(200)]
    answers = [_answer(c) for c in chats]
    assert set(answers) == set(ANSWERS[task])  # every answer occurs
    shape = (40, 120, 3) if task == "same_pattern_joined" else (40, 60, 3)  # joined: two 60-px halves
    assert all(im.shape == shape and im.dtype == np.uint8 for c in chats for im in _images(c))
    if task == "same_pattern_joined":
        for c, ans in zip(chats, answers):
            (joined,) = _images(c)
            assert np.array_equal(joined[:, :60], joined[:, 60:]) == (ans == "yes")
        # the same draws as same_pattern: the halves are its two pictures
        for i in range(5):
            pair = _images(make_chat("same_pattern", np.random.default_rng(i), height=40, width=60))
            assert np.array_equal(_images(chats[i])[0], np.concatenate(pair, axis=1))
    if task == "same_pattern":
        for c, ans in zip(chats, answers):
            first, second = _images(c)
            assert np.array_equal(first, second) == (ans == "yes")
        assert 0.35 < answers.count("yes") / len(answers) < 0.65
    if task == "second":  # the answer is the second image's colour, not the first's
        means = [_images(c)[1].reshape(-1, 3).mean(0) for c in chats]
        assert all(["red", "green", "blue"][int(np.argmax(m))] == ans for m, ans in zip(means, answers))


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="unknown image task"):
        make_chat("depth", np.random.default_rng(0))


def test_answer_words_start_with_distinct_tokens(tiny_builtin):
    _, processor = tiny_builtin
    for task in TASKS:
        check_answer_tokens(processor, task)


def test_a_fresh_tiny_model_learns_which_image_is_which(tiny_builtin, one_thread):
    """Images reach the model in order: a fresh tiny model learns the second image's colour (chance 1/3).
    Fails if pixels are dropped, shuffled across samples or paired with the wrong placeholder."""
    model, processor = tiny_builtin
    held = [make_chat("second", np.random.default_rng([5, i])) for i in range(48)]
    before = answer_accuracy(model, processor, held)
    r = learn(model, processor, "second", steps=200, eval_every=50, seed=0)
    assert r["steps_to_threshold"] is not None, r["curve"]
    assert answer_accuracy(model, processor, held) >= 0.9 > before + 0.3


@pytest.fixture
def one_thread():
    """One torch thread (as tests/rl/conftest.py): the 200 updates took ~60 s with two threads on a 2-core
    machine, ~15 s with one, and minutes with two when anything else ran."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_builtin():
    from spatialrl.models.builtin import build_model

    model, processor, _ = build_model("tiny", seed=0)
    return model, processor
