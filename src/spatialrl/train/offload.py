"""AdamW with its state in CPU memory — the optimizer-offload memory knob of the RL trainers.

Why: full fine-tuning of an 11B model in bf16 needs 2 (weights) + 2 (gradients) + 8 (fp32 moments)
bytes per parameter on the GPU, about 130 GB for Llama-3.2-11B-Vision before activations; moving the
moments (and an fp32 master copy of the weights) to the host leaves 4 bytes per parameter on the GPU.
DeepSpeed's ZeRO-Offload does the same with a compiled CPU Adam; this is the plain-torch version for
single-process runs without DeepSpeed (``optimizer_offload: true`` in a PPO/GRPO recipe).

Each step copies the gradients to the CPU in fp32, updates the master weights and moments there with
the AdamW rule (decoupled weight decay, bias correction — exactly ``torch.optim.AdamW``), and copies
the new weights back in the parameters' dtype. ``master_weights=False`` drops the fp32 master copy
(8 instead of 12 host bytes per parameter; updates smaller than bf16's resolution are then lost).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

_CPU_KEYS = ("exp_avg", "exp_avg_sq", "master")


class CPUOffloadAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW`` semantics, state on the CPU (fp32), weights wherever they live."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, master_weights: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.master_weights = master_weights

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros(p.shape, dtype=torch.float32, device="cpu")
                    state["exp_avg_sq"] = torch.zeros(p.shape, dtype=torch.float32, device="cpu")
                    if self.master_weights:
                        state["master"] = p.detach().to("cpu", torch.float32, copy=True)
                state["step"] += 1
                t = float(state["step"])
                grad = p.grad.detach().to("cpu", torch.float32)
                weight = state["master"] if self.master_weights else p.detach().to("cpu", torch.float32, copy=True)
                weight.mul_(1.0 - lr * wd)
                state["exp_avg"].lerp_(grad, 1.0 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1.0 - b2**t)).add_(eps)
                weight.addcdiv_(state["exp_avg"], denom, value=-lr / (1.0 - b1**t))
                p.copy_(weight.to(p.device, p.dtype))
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore, keeping the moments and master weights fp32 on the CPU (torch's loader would cast
        them to each parameter's device and dtype)."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, values in saved.items():
            state = self.state[params[int(index)]]
            for key in (*_CPU_KEYS, "step"):
                if key in values:
                    state[key] = values[key].detach().to("cpu", torch.float32).clone()
