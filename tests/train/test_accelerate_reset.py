"""The one accelerate internal we call (``AcceleratorState._reset_state`` / ``GradientState._reset_state``,
isolated in ``train.common.reset_accelerate_state``, used by tests and benchmarks only). These tests fail
loudly when an accelerate upgrade renames it, stops it from working, or makes it unnecessary."""

from __future__ import annotations

import pytest

from spatialrl.train.common import reset_accelerate_state


def test_a_second_accelerator_keeps_the_first_ones_state_without_a_reset():
    """Why the helper exists: accelerate's state is a process-wide singleton. If this starts passing
    settings through, the private call can go (delete the helper and its callers)."""
    from accelerate import Accelerator

    reset_accelerate_state()
    Accelerator(cpu=True, mixed_precision="no", gradient_accumulation_steps=4)
    with pytest.raises(ValueError, match="already been initialized"):
        Accelerator(cpu=True, mixed_precision="bf16")


def test_reset_lets_the_next_accelerator_start_fresh():
    from accelerate import Accelerator

    reset_accelerate_state()
    first = Accelerator(cpu=True, mixed_precision="no", gradient_accumulation_steps=4)
    assert (first.mixed_precision, first.gradient_accumulation_steps) == ("no", 4)
    reset_accelerate_state()
    second = Accelerator(cpu=True, mixed_precision="bf16")
    assert (second.mixed_precision, second.gradient_accumulation_steps) == ("bf16", 1)


def test_a_missing_private_method_is_a_clear_error(monkeypatch):
    from accelerate.state import GradientState

    monkeypatch.delattr(GradientState, "_reset_state")
    with pytest.raises(RuntimeError, match=r"GradientState._reset_state is gone; update spatialrl.train.common"):
        reset_accelerate_state()
