"""Small random conversations shared by the model-I/O tests (families, trajectories)."""

from __future__ import annotations

import numpy as np


def image(rng, size=56):
    return rng.integers(0, 255, (size, size, 3), dtype=np.uint8)


def user(rng, text):
    return {"role": "user", "content": [{"type": "image", "image": image(rng)}, {"type": "text", "text": text}]}


def assistant(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}
