"""The one geometry record the renderer accepts: a triangle soup with per-vertex attributes.

A triangle soup (3 vertices per triangle, no index buffer) keeps flat-shaded boxes exact (each face
has its own normals) and lets the renderer concatenate every mesh of a scene into one vertex buffer,
so a whole house is one draw call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_INSTANCE_ID = (1 << 24) - 1  # ids are encoded in 24 bits of an RGBA8 attachment


@dataclass(eq=False)
class Mesh:
    """Triangles with per-vertex position, normal, colour (0..1 RGB, multiplies the texture) and uv.

    ``texture`` indexes the scene's texture list (-1 = untextured); ``instance_id`` names the object
    the triangles belong to (0 = structure: walls, floor, ceiling, roads) for ``render_ids``.
    ``zone`` (optional, -1 = none) groups meshes into regions that hide each other, e.g. the rooms
    of a house: the renderer draws the camera's own zone first so geometry behind its walls is
    rejected by the depth test instead of being shaded (faster, same pixels).
    Front faces wind counter-clockwise around their outward normal (right-hand rule).
    """

    positions: np.ndarray
    normals: np.ndarray
    colors: np.ndarray
    uvs: np.ndarray | None = None
    texture: int = -1
    instance_id: int = 0
    zone: int = -1

    def __post_init__(self) -> None:
        self.positions = _as_f32(self.positions, "positions", 3)
        n = len(self.positions)
        if n % 3:
            raise ValueError(f"Mesh.positions must hold whole triangles (N % 3 == 0), got N={n}")
        self.normals = _as_f32(self.normals, "normals", 3, n)
        self.colors = _as_f32(self.colors, "colors", 3, n)
        if n and (self.colors.min() < 0.0 or self.colors.max() > 1.0):
            raise ValueError("Mesh.colors must be RGB in 0..1")
        if self.uvs is not None:
            self.uvs = _as_f32(self.uvs, "uvs", 2, n)
        if isinstance(self.texture, bool) or int(self.texture) != self.texture or self.texture < -1:
            raise ValueError(f"Mesh.texture must be an int >= -1, got {self.texture!r}")
        self.texture = int(self.texture)
        iid = self.instance_id
        if isinstance(iid, bool) or int(iid) != iid or not 0 <= iid <= MAX_INSTANCE_ID:
            raise ValueError(f"Mesh.instance_id must be an int in 0..{MAX_INSTANCE_ID}, got {iid!r}")
        self.instance_id = int(iid)
        if isinstance(self.zone, bool) or int(self.zone) != self.zone or self.zone < -1:
            raise ValueError(f"Mesh.zone must be an int >= -1, got {self.zone!r}")
        self.zone = int(self.zone)
        if self.texture >= 0 and self.uvs is None:
            raise ValueError(f"Mesh.texture={self.texture} needs uvs")

    @property
    def n_triangles(self) -> int:
        return len(self.positions) // 3


def _as_f32(arr: object, name: str, cols: int, rows: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(arr, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] != cols or (rows is not None and a.shape[0] != rows):
        want = f"({rows if rows is not None else 'N'}, {cols})"
        raise ValueError(f"Mesh.{name} must have shape {want}, got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"Mesh.{name} contains NaN or inf")
    return a
