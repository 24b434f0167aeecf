"""Colours and the per-house material library shared by the furniture and item builders.

Each house draws its own set of procedural textures (woods, fabrics, rugs, paintings, ...) from its
seed; builders pick from this library and tint grey patterns with palette colours, so two houses
never look alike while every object is still made from a handful of texture layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spatialrl.render.primitives import MeshBuilder
from spatialrl.worlds import textures as tx

Color = tuple[float, float, float]

FABRIC: tuple[Color, ...] = (
    (0.72, 0.2, 0.2), (0.16, 0.22, 0.46), (0.1, 0.5, 0.52), (0.82, 0.6, 0.16), (0.42, 0.47, 0.22),
    (0.5, 0.5, 0.53), (0.82, 0.74, 0.6), (0.46, 0.26, 0.52), (0.2, 0.52, 0.3), (0.86, 0.46, 0.2),
    (0.86, 0.52, 0.62), (0.26, 0.46, 0.82), (0.3, 0.3, 0.32),
)
PAINT: tuple[Color, ...] = (
    (0.93, 0.93, 0.9), (0.9, 0.86, 0.76), (0.6, 0.7, 0.6), (0.2, 0.26, 0.42), (0.55, 0.57, 0.6),
    (0.68, 0.8, 0.88), (0.16, 0.16, 0.17), (0.66, 0.22, 0.2), (0.85, 0.75, 0.45),
)
CERAMIC: tuple[Color, ...] = (
    (0.95, 0.95, 0.93), (0.92, 0.88, 0.78), (0.25, 0.4, 0.75), (0.76, 0.4, 0.25), (0.3, 0.6, 0.4),
    (0.92, 0.78, 0.25), (0.14, 0.14, 0.15), (0.7, 0.3, 0.5), (0.45, 0.75, 0.8),
)
METAL: tuple[Color, ...] = ((0.72, 0.72, 0.75), (0.46, 0.46, 0.5), (0.78, 0.62, 0.3), (0.13, 0.13, 0.14))
BRIGHT: tuple[Color, ...] = (
    (0.9, 0.15, 0.15), (0.15, 0.6, 0.9), (0.95, 0.8, 0.1), (0.2, 0.75, 0.3), (0.95, 0.5, 0.1),
    (0.6, 0.25, 0.8), (0.95, 0.4, 0.6), (0.1, 0.7, 0.65), (0.98, 0.98, 0.98), (0.1, 0.1, 0.1),
)
LEAF: tuple[Color, ...] = ((0.2, 0.5, 0.2), (0.28, 0.6, 0.25), (0.15, 0.4, 0.22), (0.4, 0.62, 0.2))
WOOD_TINTS: tuple[tuple[Color, Color], ...] = (
    ((0.86, 0.7, 0.5), (0.62, 0.44, 0.27)),  # oak
    ((0.62, 0.4, 0.24), (0.4, 0.22, 0.12)),  # walnut
    ((0.92, 0.82, 0.66), (0.76, 0.63, 0.45)),  # birch
    ((0.45, 0.26, 0.16), (0.25, 0.13, 0.08)),  # mahogany
    ((0.78, 0.55, 0.35), (0.55, 0.33, 0.18)),  # teak
)
WHITE: Color = (1.0, 1.0, 1.0)


@dataclass
class Materials:
    """Texture list of one house plus named indices into it."""

    textures: list[np.ndarray] = field(default_factory=list)
    woods: list[int] = field(default_factory=list)
    paintings: list[int] = field(default_factory=list)
    rugs: list[int] = field(default_factory=list)
    named: dict[str, int] = field(default_factory=dict)

    def add(self, img: np.ndarray, name: str | None = None) -> int:
        self.textures.append(img)
        idx = len(self.textures) - 1
        if name:
            self.named[name] = idx
        return idx

    def __getitem__(self, name: str) -> int:
        return self.named[name]


def object_materials(rng: np.random.Generator) -> Materials:
    """The object half of a house's texture library (structure textures are added per room)."""
    m = Materials()
    for k in rng.permutation(len(WOOD_TINTS))[:3]:
        light, dark = WOOD_TINTS[k]
        m.woods.append(m.add(tx.wood(rng, light, dark)))
    m.add(tx.fabric(rng), "fabric")
    m.add(tx.stripes(rng, (0.95, 0.95, 0.95), (0.7, 0.7, 0.7), n=int(rng.integers(4, 9))), "stripes")
    # "plain" (painted wood, plastic, paper) is untextured: a nearly flat texture would look the
    # same and costs a texture fetch per pixel on llvmpipe.
    m.named["plain"] = -1
    m.add(tx.stripes(rng, (0.9, 0.9, 0.92), (0.8, 0.8, 0.83), n=32, vertical=False), "metal")
    m.add(tx.marble(rng, (0.92, 0.92, 0.9), (0.55, 0.55, 0.58)), "marble")
    m.add(tx.marble(rng, (0.22, 0.22, 0.24), (0.5, 0.5, 0.52)), "granite")
    m.add(tx.plain(rng, (0.95, 0.98, 0.95), amount=0.35), "leaves")
    m.add(tx.dots(rng, (0.97, 0.97, 0.97), (0.6, 0.6, 0.6)), "dots")
    m.add(tx.checker((0.97, 0.97, 0.97), (0.75, 0.75, 0.75), n=8), "checker")
    for _ in range(4):
        m.paintings.append(m.add(tx.painting(rng)))
    for _ in range(2):
        a, b = (FABRIC[i] for i in rng.choice(len(FABRIC), 2, replace=False))
        if rng.random() < 0.5:
            m.rugs.append(m.add(tx.stripes(rng, a, b, n=int(rng.integers(3, 8)), vertical=bool(rng.random() < 0.5))))
        else:
            m.rugs.append(m.add(tx.checker(a, b, n=int(rng.integers(2, 6)))))
    return m


@dataclass
class Surface:
    """A horizontal rectangle (local or world coords) small items can stand on, with head room."""

    x0: float
    z0: float
    x1: float
    z1: float
    y: float
    clear: float = 0.6


class BuildContext:
    """What every builder needs: the mesh builder, the house RNG, materials and an id allocator."""

    def __init__(self, b: MeshBuilder, rng: np.random.Generator, mat: Materials,
                 new_id: Callable[[str], int]):
        self.b, self.rng, self.mat, self.new_id = b, rng, mat, new_id

    def pick(self, colors: tuple[Color, ...], jitter: float = 0.07) -> Color:
        c = np.asarray(colors[int(self.rng.integers(len(colors)))]) * self.rng.uniform(1 - jitter, 1 + jitter)
        return tuple(float(v) for v in np.clip(c, 0.0, 1.0))

    def wood(self) -> int:
        return self.mat.woods[int(self.rng.integers(len(self.mat.woods)))]

    def uniform(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))
