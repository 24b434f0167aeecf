"""Ground height of a city: flat, or smooth rolling hills (the ``hillside`` style).

Everything that stands on the ground (road strips, sidewalks, building bases, trees, lamps, the
panorama cameras) asks this one function for its height, so the world stays watertight on slopes.
The hills are two crossed sine waves with a seed-dependent phase: smooth enough that a 10 m wide
road keeps a modest cross-slope, steep enough (grades up to about 25 %, like San Francisco's) to read
as hills in the pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Terrain:
    amplitude: float
    wavelength: float
    phase: tuple[float, float]
    direction_deg: float

    @classmethod
    def make(cls, amplitude: float, wavelength: float, rng: np.random.Generator) -> Terrain:
        return cls(float(amplitude), float(wavelength), (float(rng.uniform(0, 2 * math.pi)),
                   float(rng.uniform(0, 2 * math.pi))), float(rng.uniform(0, 180)))

    @property
    def flat(self) -> bool:
        return self.amplitude == 0.0

    def height(self, xz: np.ndarray) -> np.ndarray:
        """Ground height (metres) at local points ``xz`` (..., 2)."""
        p = np.asarray(xz, dtype=np.float64)
        if self.flat:
            return np.zeros(p.shape[:-1])
        a = math.radians(self.direction_deg)
        u = p[..., 0] * math.cos(a) + p[..., 1] * math.sin(a)
        v = -p[..., 0] * math.sin(a) + p[..., 1] * math.cos(a)
        k = 2 * math.pi / self.wavelength
        return self.amplitude * (0.6 * np.sin(k * u + self.phase[0]) + 0.4 * np.sin(1.37 * k * v + self.phase[1]))
