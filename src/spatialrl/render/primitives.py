"""Low-poly primitives (box, cylinder/cone/frustum, ellipsoid) collected into ``Mesh`` records.

``MeshBuilder`` groups triangles by (texture, instance id), so a house becomes a few dozen meshes
however many primitives it has, and supports a stack of placements (translate + yaw) for composite
furniture built in local coordinates. Every triangle is wound counter-clockwise around its vertex
normals (checked and fixed in ``add``), which is what the renderer's back-face culling expects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from spatialrl.render.mesh import Mesh

Vec3 = Sequence[float]


def yaw_matrix(yaw_deg: float) -> np.ndarray:
    """Rotation about +y in the camera's convention: local +z turns to (sin yaw, 0, cos yaw)."""
    a = math.radians(yaw_deg)
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


class MeshBuilder:
    """Accumulates primitives; ``meshes()`` returns one ``Mesh`` per (texture, instance id)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[int, int], list[tuple[np.ndarray, ...]]] = {}
        self._stack: list[tuple[np.ndarray, np.ndarray]] = [(np.eye(3), np.zeros(3))]

    # ------------------------------------------------------------------ placement
    @contextmanager
    def placed(self, origin: Vec3, yaw_deg: float = 0.0) -> Iterator[None]:
        """Inside the block, coordinates are local to ``origin`` rotated by ``yaw_deg``."""
        rot, off = self._stack[-1]
        local = yaw_matrix(yaw_deg)
        self._stack.append((rot @ local, off + rot @ np.asarray(origin, dtype=np.float64)))
        try:
            yield
        finally:
            self._stack.pop()

    # ------------------------------------------------------------------ raw triangles
    def add(self, positions: np.ndarray, normals: np.ndarray, color: Vec3 | np.ndarray,
            uvs: np.ndarray | None = None, texture: int = -1, instance_id: int = 0) -> None:
        """Add a triangle soup given in local coordinates; fixes winding to match the normals."""
        pos = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
        nrm = np.asarray(normals, dtype=np.float64).reshape(-1, 3)
        rot, off = self._stack[-1]
        pos = pos @ rot.T + off
        nrm = nrm @ rot.T
        nrm /= np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-12)
        col = np.broadcast_to(np.clip(np.asarray(color, dtype=np.float64), 0.0, 1.0), pos.shape)
        uv = np.zeros((len(pos), 2)) if uvs is None else np.asarray(uvs, dtype=np.float64).reshape(-1, 2)
        # Orient every triangle counter-clockwise around its mean vertex normal.
        tri = pos.reshape(-1, 3, 3)
        geo = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        flip = (geo * nrm.reshape(-1, 3, 3).sum(1)).sum(1) < 0
        if flip.any():
            order = np.tile(np.arange(3), (len(tri), 1))
            order[flip] = [0, 2, 1]
            idx = (np.arange(len(tri))[:, None] * 3 + order).ravel()
            pos, nrm, col, uv = pos[idx], nrm[idx], np.asarray(col)[idx], uv[idx]
        key = (int(texture), int(instance_id))
        self._groups.setdefault(key, []).append((pos, nrm, np.array(col), uv))

    def meshes(self) -> list[Mesh]:
        out = []
        for (texture, iid), parts in self._groups.items():
            out.append(Mesh(
                positions=np.concatenate([p[0] for p in parts]),
                normals=np.concatenate([p[1] for p in parts]),
                colors=np.concatenate([p[2] for p in parts]),
                uvs=np.concatenate([p[3] for p in parts]) if texture >= 0 else None,
                texture=texture,
                instance_id=iid,
            ))
        return out

    # ------------------------------------------------------------------ primitives
    def box(self, center: Vec3, size: Vec3, color: Vec3, *, texture: int = -1, instance_id: int = 0,
            tile: float | None = 0.5, faces: str = "xXyYzZ") -> None:
        """Axis-aligned (in local frame) box. ``tile`` = metres per texture repeat (world-scaled
        uvs); ``None`` maps the texture once over every face. ``faces`` picks faces by normal
        (x/X = −x/+x, y/Y, z/Z), e.g. drop the bottom of a box that stands on the floor."""
        c = np.asarray(center, dtype=np.float64)
        h = np.asarray(size, dtype=np.float64) / 2.0
        pos, nrm, uv = [], [], []
        for key, n, u, v in _BOX_FACES:
            if key not in faces:
                continue
            n, u, v = np.array(n, float), np.array(u, float), np.array(v, float)
            hn, hu, hv = abs(n @ h), abs(u @ h), abs(v @ h)
            fc = c + n * hn
            corners = [fc - u * hu - v * hv, fc + u * hu - v * hv, fc + u * hu + v * hv, fc - u * hu + v * hv]
            if tile is None:
                cuv = [(0, 0), (1, 0), (1, 1), (0, 1)]
            else:
                u0, v0 = (u @ c - hu) / tile, (v @ c - hv) / tile
                du, dv = 2 * hu / tile, 2 * hv / tile
                cuv = [(u0, v0), (u0 + du, v0), (u0 + du, v0 + dv), (u0, v0 + dv)]
            for i in (0, 1, 2, 0, 2, 3):
                pos.append(corners[i])
                nrm.append(n)
                uv.append(cuv[i])
        self.add(np.array(pos), np.array(nrm), color, np.array(uv), texture, instance_id)

    def cylinder(self, base: Vec3, radius: float, height: float, color: Vec3, *, top_radius: float | None = None,
                 segments: int = 12, caps: bool = True, texture: int = -1, instance_id: int = 0,
                 tile: float | None = 0.5) -> None:
        """Vertical cylinder standing on ``base`` (centre of its bottom); ``top_radius`` makes a
        frustum, 0 a cone. Side normals are smooth (slanted for cones)."""
        r0, r1 = float(radius), float(radius if top_radius is None else top_radius)
        b = np.asarray(base, dtype=np.float64)
        ang = np.linspace(0.0, 2 * math.pi, segments + 1)
        ring = np.stack([np.sin(ang), np.zeros_like(ang), np.cos(ang)], 1)
        slope = (r0 - r1) / height if height else 0.0
        side_n = ring + np.array([0.0, slope, 0.0])
        pos, nrm, uv = [], [], []
        circ = 2 * math.pi * max(r0, r1)
        for i in range(segments):
            a0, a1 = b + ring[i] * r0, b + ring[i + 1] * r0
            t0, t1 = b + ring[i] * r1 + [0, height, 0], b + ring[i + 1] * r1 + [0, height, 0]
            su = [1.0 - i / segments, 1.0 - (i + 1) / segments]  # u grows to a viewer's right
            us = [s * (circ / tile if tile else 1.0) for s in su]
            vs = [0.0, height / tile if tile else 1.0]
            quad = [(a0, side_n[i], (us[0], vs[0])), (a1, side_n[i + 1], (us[1], vs[0])),
                    (t1, side_n[i + 1], (us[1], vs[1])), (t0, side_n[i], (us[0], vs[1]))]
            tris = (0, 1, 2, 0, 2, 3) if r1 > 0 else (0, 1, 2)
            for k in tris:
                p, n, t = quad[k]
                if r1 == 0 and k == 2:  # cone tip: average normal of the two edges
                    n = (side_n[i] + side_n[i + 1]) / 2
                pos.append(p)
                nrm.append(n)
                uv.append(t)
            if caps:
                for r, y, ny in ((r0, 0.0, -1.0), (r1, height, 1.0)):
                    if r <= 0:
                        continue
                    centre = b + [0, y, 0]
                    for p in (centre, b + ring[i] * r + [0, y, 0], b + ring[i + 1] * r + [0, y, 0]):
                        pos.append(p)
                        nrm.append((0.0, ny, 0.0))
                        d = (p - b)[[0, 2]]
                        uv.append(tuple(d / tile) if tile else tuple(d / (2 * r) + 0.5))
        self.add(np.array(pos), np.array(nrm), color, np.array(uv), texture, instance_id)

    def ellipsoid(self, center: Vec3, radii: Vec3 | float, color: Vec3, *, segments: int = 10, rings: int = 6,
                  texture: int = -1, instance_id: int = 0) -> None:
        """Low-poly UV ellipsoid (a sphere when ``radii`` is a number)."""
        c = np.asarray(center, dtype=np.float64)
        r = np.broadcast_to(np.asarray(radii, dtype=np.float64), (3,))
        th = np.linspace(0.0, math.pi, rings + 1)  # from top (+y) to bottom
        ph = np.linspace(0.0, 2 * math.pi, segments + 1)
        unit = np.stack([np.sin(th)[:, None] * np.sin(ph)[None], np.repeat(np.cos(th)[:, None], len(ph), 1),
                         np.sin(th)[:, None] * np.cos(ph)[None]], -1)  # (rings+1, seg+1, 3)
        pts = c + unit * r
        nrm = unit / (r * r)
        uvs = np.stack(np.meshgrid(ph / (2 * math.pi), 1.0 - th / math.pi), -1)
        pos, nn, uv = [], [], []
        for i in range(rings):
            for j in range(segments):
                quad = [(i, j), (i, j + 1), (i + 1, j + 1), (i + 1, j)]
                tris = [(0, 2, 3)] if i == 0 else ([(0, 1, 2)] if i == rings - 1 else [(0, 1, 2), (0, 2, 3)])
                for t in tris:
                    for k in t:
                        a, b2 = quad[k]
                        pos.append(pts[a, b2])
                        nn.append(nrm[a, b2])
                        uv.append(uvs[a, b2])
        self.add(np.array(pos), np.array(nn), color, np.array(uv), texture, instance_id)


# (key, outward normal, u axis, v axis). u = normal x v: in this left-handed world that is the
# viewer's right when facing the face, so textures (and any text on them) are not mirrored.
_BOX_FACES = (
    ("X", (1, 0, 0), (0, 0, 1), (0, 1, 0)),
    ("x", (-1, 0, 0), (0, 0, -1), (0, 1, 0)),
    ("Z", (0, 0, 1), (-1, 0, 0), (0, 1, 0)),
    ("z", (0, 0, -1), (1, 0, 0), (0, 1, 0)),
    ("Y", (0, 1, 0), (1, 0, 0), (0, 0, 1)),
    ("y", (0, -1, 0), (1, 0, 0), (0, 0, -1)),
)
