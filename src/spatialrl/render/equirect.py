"""Cube map → equirectangular panorama: the six face cameras and the ``cv2.remap`` lookup tables.

The tables depend only on (panorama size, face size, north), so they are computed once and cached;
a panorama then costs six face renders and one remap.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from spatialrl.render.camera import Camera

# (yaw, pitch) of the six faces, in the order they are stacked top to bottom in the face strip.
FACES: tuple[tuple[float, float], ...] = ((0.0, 0.0), (90.0, 0.0), (180.0, 0.0), (270.0, 0.0),
                                          (0.0, -90.0), (0.0, 90.0))


def cube_cameras(position: Sequence[float]) -> list[Camera]:
    pos = tuple(float(v) for v in position)
    if len(pos) != 3:
        raise ValueError(f"position must be (x, y, z), got {position!r}")
    return [Camera(pos, yaw, pitch, fov_deg=90.0) for yaw, pitch in FACES]


def pixel_directions(width: int, height: int, north_deg: float) -> np.ndarray:
    """Unit view direction (H, W, 3) of every panorama pixel (see ``Renderer.render_equirect``)."""
    yaw = np.radians(north_deg - 180.0 + 360.0 * (np.arange(width) + 0.5) / width)
    elev = np.radians(90.0 - 180.0 * (np.arange(height) + 0.5) / height)
    yaw, elev = np.meshgrid(yaw, elev)
    return np.stack([np.sin(yaw) * np.cos(elev), np.sin(elev), np.cos(yaw) * np.cos(elev)], axis=-1)


@lru_cache(maxsize=8)
def remap_tables(width: int, height: int, face: int, north_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """``(map_x, map_y)`` float32 tables sampling a (6*face, face) strip of cube faces (in ``FACES``
    order, top to bottom: exactly how ``Renderer`` returns the six face frames)."""
    d = pixel_directions(width, height, north_deg)
    bases = [c.basis() for c in cube_cameras((0.0, 0.0, 0.0))]
    forward = np.stack([b[2] for b in bases])  # (6, 3)
    along = d @ forward.T  # (H, W, 6) cosine to each face axis
    k = along.argmax(-1)
    right = np.stack([b[0] for b in bases])[k]
    up = np.stack([b[1] for b in bases])[k]
    a = np.take_along_axis(along, k[..., None], -1)[..., 0]
    x = (d * right).sum(-1) / a  # in [-1, 1] on the chosen face
    y = (d * up).sum(-1) / a
    col = np.clip((x + 1.0) * 0.5 * face - 0.5, 0.0, face - 1.0)
    row = np.clip((1.0 - y) * 0.5 * face - 0.5, 0.0, face - 1.0)
    map_x = col.astype(np.float32)
    map_y = (k * face + row).astype(np.float32)
    map_x.setflags(write=False)
    map_y.setflags(write=False)
    return map_x, map_y
