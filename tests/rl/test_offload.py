"""The CPU-offloaded AdamW matches torch's AdamW step for step and round-trips its state."""

from __future__ import annotations

import copy

import torch

from spatialrl.train.offload import CPUOffloadAdamW


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _steps(model, opt, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(4, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_matches_torch_adamw():
    a, b = _model(), _model()
    kw = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-7, weight_decay=0.1)
    _steps(a, torch.optim.AdamW(a.parameters(), **kw), 5)
    _steps(b, CPUOffloadAdamW(b.parameters(), **kw), 5)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-6)


def test_state_round_trip_keeps_fp32_cpu_state():
    a = _model()
    opt = CPUOffloadAdamW(a.parameters(), lr=1e-2)
    _steps(a, opt, 3)
    saved = copy.deepcopy(opt.state_dict())  # state_dict() shares the live tensors
    weights = {k: v.clone() for k, v in a.state_dict().items()}
    b = _model()
    b.load_state_dict(a.state_dict())
    b = b.to(torch.bfloat16)  # a bf16 model: the loaded moments must stay fp32 on the CPU
    opt_b = CPUOffloadAdamW(b.parameters(), lr=1e-2)
    opt_b.load_state_dict(saved)
    for p in b.parameters():
        st = opt_b.state[p]
        assert st["exp_avg"].dtype == torch.float32 and st["master"].dtype == torch.float32
        assert float(st["step"]) == 3.0
    # continuing from the restored state equals continuing the original
    _steps(a, opt, 2, seed=5)
    a2 = _model()
    a2.load_state_dict(weights)
    opt_c = CPUOffloadAdamW(a2.parameters(), lr=1e-2)
    opt_c.load_state_dict(saved)
    _steps(a2, opt_c, 2, seed=5)
    for pa, pc in zip(a.parameters(), a2.parameters(), strict=True):
        assert torch.allclose(pa, pc, atol=1e-6)


def test_without_master_keeps_no_host_copy_and_still_matches_in_fp32():
    # fp32 weights: with no master copy the update is applied to the weights themselves, so the
    # result equals torch's AdamW; only the moments live on the host
    a, b = _model(), _model()
    kw = dict(lr=1e-2, eps=1e-7, weight_decay=0.1)
    _steps(a, torch.optim.AdamW(a.parameters(), **kw), 4)
    opt = CPUOffloadAdamW(b.parameters(), master_weights=False, **kw)
    _steps(b, opt, 4)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-6)
        assert "master" not in opt.state[pb] and opt.state[pb]["exp_avg"].device.type == "cpu"


def test_rl_configs_pass_the_master_switch_to_the_optimizer():
    from accelerate import Accelerator

    from spatialrl.train.rl_config import GRPOConfig, PPOConfig
    from spatialrl.train.run import make_optimizer

    model = _model()
    for cls in (PPOConfig, GRPOConfig):
        cfg = cls(optimizer_offload=True, offload_master_weights=False)
        opt = make_optimizer(Accelerator(cpu=True), list(model.parameters()), cfg)
        assert isinstance(opt, CPUOffloadAdamW) and opt.master_weights is False
