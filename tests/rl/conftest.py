"""Fixtures of the RL tests: the "letters" task (``letters.py``), a saved tiny model, recipe builders."""

from __future__ import annotations

import pytest
import torch

from .letters import LETTER_SUITE


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the CPU is shared, and single-threaded kernels keep runs reproducible and fast."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def letter_suite(monkeypatch):
    """The letters suite, registered for the duration of a test."""
    from spatialrl.envs import registry

    monkeypatch.setitem(registry._SUITES, "letters", LETTER_SUITE)
    return LETTER_SUITE


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny Qwen2.5-VL (vocabulary 400) that the trainers load like any model folder."""
    from spatialrl.models.tiny import save_tiny

    return save_tiny("qwen2_5_vl", tmp_path_factory.mktemp("tiny-qwen2_5_vl"), seed=0)

