"""Run.optimizer_step skips updates whose gradient norm is NaN/inf, and stops a run that keeps making them."""

from __future__ import annotations

import pytest
import torch

from spatialrl.errors import TrainingError
from spatialrl.train.config import ModelConfig, SFTConfig, load_config
from spatialrl.train.run import Run


def _run(tmp_path, **optim) -> tuple[Run, torch.nn.Linear]:
    cfg = load_config(SFTConfig, None, {"output_dir": str(tmp_path), "data.train": str(tmp_path), "logging.report_to": "none",
                                        **{f"optim.{k}": v for k, v in optim.items()}})
    run = Run(cfg, micro_batch_size=1)
    torch.manual_seed(0)
    model, _ = run.prepare(torch.nn.Linear(3, 2))
    return run, model


def _backward(model, poison: float | None = None) -> None:
    loss = model(torch.ones(4, 3)).square().sum()
    if poison is not None:
        loss = loss * poison
    loss.backward()


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_nonfinite_update_is_skipped_and_a_finite_one_is_taken(tmp_path, poison):
    run, model = _run(tmp_path, lr=0.1, max_nonfinite_updates=3)
    before = [p.detach().clone() for p in model.parameters()]
    state = {k: v for k, v in run.optimizer.state_dict()["state"].items()}
    _backward(model, poison)
    norm = run.optimizer_step()
    assert norm is not None and not torch.isfinite(torch.tensor(norm))
    assert run.skipped_updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # weights untouched
    assert run.optimizer.state_dict()["state"] == state  # AdamW moments untouched (no step taken)
    assert all(p.grad is None for p in model.parameters())  # the bad gradients are gone
    _backward(model)
    assert torch.isfinite(torch.tensor(run.optimizer_step()))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_too_many_in_a_row_stop_the_run(tmp_path):
    run, model = _run(tmp_path, max_nonfinite_updates=3)
    for _ in range(2):
        _backward(model, float("nan"))
        run.optimizer_step()
    _backward(model)
    run.optimizer_step()  # a good update resets the streak
    for _ in range(2):
        _backward(model, float("nan"))
        run.optimizer_step()
    _backward(model, float("nan"))
    with pytest.raises(TrainingError, match="3 updates in a row"):
        run.optimizer_step()
    assert run.skipped_updates == 5


def test_zero_turns_the_guard_off(tmp_path):
    run, model = _run(tmp_path, max_nonfinite_updates=0, max_grad_norm=0.0)
    _backward(model, float("nan"))
    assert run.optimizer_step() is None  # no norm is measured, the step is taken
    assert run.skipped_updates == 0
    assert not all(torch.isfinite(p).all() for p in model.parameters())


def test_a_skipped_update_names_the_parameters_with_nonfinite_gradients(tmp_path, capsys):
    run, model = _run(tmp_path, max_nonfinite_updates=3)
    _backward(model)
    model.bias.grad[0] = float("nan")  # only the bias goes bad
    run.optimizer_step()
    assert run.nonfinite_params == {"bias": 1}
    assert "non-finite gradient in 1 of 2 tensors: bias" in capsys.readouterr().out
    _backward(model, float("inf"))  # both tensors
    run.optimizer_step()
    assert run.nonfinite_params == {"bias": 2, "weight": 1}


@pytest.mark.parametrize("allowed", [False, True])
def test_the_run_sets_the_cudnn_attention_switch(tmp_path, allowed):
    """``model.cudnn_attention`` decides PyTorch's process-wide cuDNN SDPA flag (off by default: its bf16
    backward NaN'd the H100 action-only runs' gradients at batch 128)."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        cfg = load_config(SFTConfig, None, {"output_dir": str(tmp_path), "data.train": str(tmp_path),
                                            "logging.report_to": "none", "model.cudnn_attention": allowed})
        torch.backends.cuda.enable_cudnn_sdp(not allowed)
        Run(cfg, micro_batch_size=1)
        assert torch.backends.cuda.cudnn_sdp_enabled() is allowed
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    assert ModelConfig().cudnn_attention is False
