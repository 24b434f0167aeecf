"""The PPO critic: an MLP on the policy model's final hidden state at the last prompt token.

SFTvsRL / RL4VLM (``rl/trainer/model_tz_llama.py``, ``VLMValue``) put
``Linear(4096, 1024) → ReLU → Linear(1024, 512) → ReLU → Linear(512, 1)`` on
``hidden_states[-1][:, prompt_len - 1]``: the last token the model reads before it answers, so the
head estimates V(s) of the prompt, not of the answer. We keep the layout and derive the input width
from the model instead of hard-coding Llama-3.2-11B's 4096.

The head is saved beside the model as ``value_head.safetensors`` (the reference saved neither head nor
optimizer, so its runs could not resume).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueHead(nn.Module):
    """hidden → 1024 → 512 → 1 with ReLU, kept in float32 whatever the policy's dtype (value targets
    are small differences of returns; bf16 would round them away)."""

    def __init__(self, hidden_size: int, widths: tuple[int, int] = (1024, 512)):
        super().__init__()
        self.hidden_size = hidden_size
        self.net = nn.Sequential(
            nn.Linear(hidden_size, widths[0]),
            nn.ReLU(),
            nn.Linear(widths[0], widths[1]),
            nn.ReLU(),
            nn.Linear(widths[1], 1),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(B, hidden)`` final hidden states → ``(B,)`` values."""
        return self.net(hidden.to(self.net[0].weight.dtype)).squeeze(-1)

    def save(self, folder: str | Path) -> Path:
        """Write ``value_head.safetensors`` into ``folder`` atomically."""
        from safetensors.torch import save

        from spatialrl.io import atomic_write_bytes

        path = Path(folder) / VALUE_HEAD_FILE
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        atomic_write_bytes(path, save(state, metadata={"hidden_size": str(self.hidden_size)}))
        return path

    @classmethod
    def load(cls, folder: str | Path) -> ValueHead:
        from safetensors import safe_open

        from spatialrl.errors import DataError

        path = Path(folder) / VALUE_HEAD_FILE
        if not path.is_file():
            raise DataError(f"{path}: missing; this checkpoint has no value head")
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        if "hidden_size" not in meta:
            raise DataError(f"{path}: metadata field 'hidden_size' is missing")
        widths = (state["net.0.weight"].shape[0], state["net.2.weight"].shape[0])
        head = cls(int(meta["hidden_size"]), widths)
        head.load_state_dict(state)
        return head


def hidden_size_of(model: nn.Module) -> int:
    """Width of the language model's final hidden state, for any HF image-text-to-text config."""
    cfg = model.config
    for c in (getattr(cfg, "text_config", None), cfg):
        if c is not None and getattr(c, "hidden_size", None):
            return int(c.hidden_size)
    raise ValueError(f"cannot find the text hidden size in {type(cfg).__name__}")
