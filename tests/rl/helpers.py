"""Assertions the PPO and GRPO tests share."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from .letters import read_updates


def assert_same_run(straight_dir: Path | str, resumed_dir: Path | str, update: int, prefixes: tuple[str, ...]) -> None:
    """A killed-and-resumed run logged the same ``prefixes`` metrics at ``update`` as the straight run,
    and exported bit-identical final weights."""
    a, b = read_updates(straight_dir)[update], read_updates(resumed_dir)[update]
    for key in a:
        if key.startswith(prefixes):
            assert a[key] == b[key], key
    wa = load_file(str(Path(straight_dir) / "final/model.safetensors"))
    wb = load_file(str(Path(resumed_dir) / "final/model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
