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
    """Accumulates primitives; ``meshes()`` returns one ``Mesh`` per (texture, instance id, zone)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[int, int, int], list[tuple[np.ndarray, ...]]] = {}
        self._stack: list[tuple[np.ndarray, np.ndarray]] = [(np.eye(3), np.zeros(3))]
        self._zone = -1

    @contextmanager
    def zone(self, zone: int) -> Iterator[None]:
        """Primitives added inside the block get ``Mesh.zone = zone`` (e.g. the room index)."""
        previous, self._zone = self._zone, int(zone)
        try:
            yield
        finally:
            self._zone = previous

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
        """Add a triangle soup given in local coordinates; fixes winding to match the normals.

        ``color`` is one RGB (0..1) for all vertices or an (N, 3) array."""
        pos = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
        nrm = np.asarray(normals, dtype=np.float64).reshape(-1, 3)
        rot, off = self._stack[-1]
        pos = pos @ rot.T + off
        nrm = nrm @ rot.T
        nrm /= np.maximum(np.sqrt((nrm * nrm).sum(1, keepdims=True)), 1e-12)
        col = np.clip(np.asarray(color, dtype=np.float64), 0.0, 1.0)
        if col.ndim == 2:
            col = col.reshape(-1, 3).copy()
        uv = np.zeros((len(pos), 2)) if uvs is None else np.asarray(uvs, dtype=np.float64).reshape(-1, 2)
        # Orient every triangle counter-clockwise around its mean vertex normal.
        tri = pos.reshape(-1, 3, 3)
        e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
        nsum = nrm.reshape(-1, 3, 3).sum(1)
        facing = ((e1[:, 1] * e2[:, 2] - e1[:, 2] * e2[:, 1]) * nsum[:, 0]
                  + (e1[:, 2] * e2[:, 0] - e1[:, 0] * e2[:, 2]) * nsum[:, 1]
                  + (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]) * nsum[:, 2])
        flip = facing < 0
        if flip.any():
            order = np.tile(np.arange(3), (len(tri), 1))
            order[flip] = [0, 2, 1]
            idx = (np.arange(len(tri))[:, None] * 3 + order).ravel()
            pos, nrm, uv = pos[idx], nrm[idx], uv[idx]
            if col.ndim == 2:
                col = col[idx]
        key = (int(texture), int(instance_id), self._zone)
        self._groups.setdefault(key, []).append((pos, nrm, col, uv))

    def meshes(self) -> list[Mesh]:
        """One ``Mesh`` per (texture, instance id, zone), in order of first use."""
        out = []
        for (texture, iid, zone), parts in self._groups.items():
            out.append(Mesh(
                positions=np.concatenate([p[0] for p in parts]),
                normals=np.concatenate([p[1] for p in parts]),
                colors=np.concatenate([p[2] if p[2].ndim == 2 else np.broadcast_to(p[2], p[0].shape)
                                       for p in parts]),
                uvs=np.concatenate([p[3] for p in parts]) if texture >= 0 else None,
                texture=texture,
                instance_id=iid,
                zone=zone,
            ))
        return out

    # ------------------------------------------------------------------ primitives
    def box(self, center: Vec3, size: Vec3, color: Vec3, *, texture: int = -1, instance_id: int = 0,
            tile: float | None = 0.5, faces: str = "xXyYzZ") -> None:
        """Axis-aligned (in local frame) box. ``tile`` = metres per texture repeat (world-scaled
        uvs); ``None`` maps the texture once over every face. ``faces`` picks faces by normal
        (x/X = −x/+x, y/Y, z/Z), e.g. drop the bottom of a box that stands on the floor."""
        keep = [k for k, key in enumerate(_FACE_KEYS) if key in faces]
        if not keep:
            return
        c = np.asarray(center, dtype=np.float64)
        h = np.abs(np.asarray(size, dtype=np.float64)) / 2.0
        n, u, v = _FACE_N[keep], _FACE_U[keep], _FACE_V[keep]  # (F, 3)
        hn, hu, hv = np.abs(n @ h), np.abs(u @ h), np.abs(v @ h)  # (F,)
        corners = (c + n * hn[:, None])[:, None] + (_QUAD[:, 0, None] * hu[:, None, None] * u[:, None]
                                                    + _QUAD[:, 1, None] * hv[:, None, None] * v[:, None])  # (F, 4, 3)
        pos = corners[:, _QUAD_TRIS].reshape(-1, 3)
        nrm = np.repeat(n, 6, axis=0)
        if tile is None:
            uv = np.tile(_QUAD_UV[_QUAD_TRIS], (len(keep), 1))
        else:
            uv = np.stack([(corners * u[:, None]).sum(-1), (corners * v[:, None]).sum(-1)], -1)[:, _QUAD_TRIS]
            uv = uv.reshape(-1, 2) / tile
        self.add(pos, nrm, color, uv, texture, instance_id)

    def cylinder(self, base: Vec3, radius: float, height: float, color: Vec3, *, top_radius: float | None = None,
                 segments: int = 12, caps: bool = True, texture: int = -1, instance_id: int = 0,
                 tile: float | None = 0.5) -> None:
        """Vertical cylinder standing on ``base`` (centre of its bottom); ``top_radius`` makes a
        frustum, 0 a cone. Side normals are smooth (slanted for cones)."""
        r0, r1 = float(radius), float(radius if top_radius is None else top_radius)
        b = np.asarray(base, dtype=np.float64)
        ang = np.linspace(0.0, 2 * math.pi, segments + 1)
        ring = np.stack([np.sin(ang), np.zeros_like(ang), np.cos(ang)], 1)  # (S+1, 3)
        up = np.array([0.0, height, 0.0])
        side_n = ring + np.array([0.0, (r0 - r1) / height if height else 0.0, 0.0])
        bottom, top = b + ring * r0, b + ring * r1 + up
        su = 1.0 - np.arange(segments + 1) / segments  # u grows to a viewer's right
        us = su * (2 * math.pi * max(r0, r1) / tile if tile else 1.0)
        vt = height / tile if tile else 1.0
        i, j = np.arange(segments), np.arange(1, segments + 1)
        parts = []
        if r1 > 0:  # quads (bottom i, bottom i+1, top i+1, top i) as two triangles
            quad_p = np.stack([bottom[i], bottom[j], top[j], top[i]], 1)
            quad_n = np.stack([side_n[i], side_n[j], side_n[j], side_n[i]], 1)
            quad_uv = np.stack([np.c_[us[i], 0 * us[i]], np.c_[us[j], 0 * us[j]], np.c_[us[j], vt + 0 * us[j]],
                                np.c_[us[i], vt + 0 * us[i]]], 1)
            parts.append((quad_p[:, _QUAD_TRIS], quad_n[:, _QUAD_TRIS], quad_uv[:, _QUAD_TRIS]))
        else:  # cone: one triangle per segment, the tip normal averages its two edges
            tip = np.repeat(top[i][:, None], 1, 1)
            tri_p = np.concatenate([bottom[i][:, None], bottom[j][:, None], tip], 1)
            tri_n = np.stack([side_n[i], side_n[j], (side_n[i] + side_n[j]) / 2], 1)
            tri_uv = np.stack([np.c_[us[i], 0 * us[i]], np.c_[us[j], 0 * us[j]], np.c_[us[i], vt + 0 * us[i]]], 1)
            parts.append((tri_p, tri_n, tri_uv))
        if caps:
            for r, y, ny in ((r0, 0.0, -1.0), (r1, height, 1.0)):
                if r <= 0:
                    continue
                centre = b + [0.0, y, 0.0]
                tri_p = np.stack([np.broadcast_to(centre, (segments, 3)), b + ring[i] * r + [0, y, 0],
                                  b + ring[j] * r + [0, y, 0]], 1)
                d = (tri_p - b)[..., [0, 2]]
                tri_uv = d / tile if tile else d / (2 * r) + 0.5
                parts.append((tri_p, np.broadcast_to([0.0, ny, 0.0], tri_p.shape), tri_uv))
        self.add(np.concatenate([p[0].reshape(-1, 3) for p in parts]),
                 np.concatenate([np.asarray(p[1]).reshape(-1, 3) for p in parts]), color,
                 np.concatenate([p[2].reshape(-1, 2) for p in parts]), texture, instance_id)

    def ellipsoid(self, center: Vec3, radii: Vec3 | float, color: Vec3, *, segments: int = 10, rings: int = 6,
                  texture: int = -1, instance_id: int = 0) -> None:
        """Low-poly UV ellipsoid (a sphere when ``radii`` is a number)."""
        c = np.asarray(center, dtype=np.float64)
        r = np.broadcast_to(np.asarray(radii, dtype=np.float64), (3,))
        th = np.linspace(0.0, math.pi, rings + 1)  # from top (+y) to bottom
        ph = np.linspace(0.0, 2 * math.pi, segments + 1)
        unit = np.stack([np.sin(th)[:, None] * np.sin(ph)[None], np.repeat(np.cos(th)[:, None], len(ph), 1),
                         np.sin(th)[:, None] * np.cos(ph)[None]], -1)  # (rings+1, seg+1, 3)
        pts = (c + unit * r).reshape(-1, 3)
        nrm = (unit / (r * r)).reshape(-1, 3)
        uvs = np.stack(np.meshgrid(ph / (2 * math.pi), 1.0 - th / math.pi), -1).reshape(-1, 2)
        ri, sj = np.meshgrid(np.arange(rings), np.arange(segments), indexing="ij")
        a = ri * (segments + 1) + sj  # corner (i, j); quad = a, a+1, a+seg+2, a+seg+1
        quad = np.stack([a, a + 1, a + segments + 2, a + segments + 1], -1)  # (rings, seg, 4)
        tris = [quad[0][:, [0, 2, 3]]]  # top cap: the pole corners coincide, one triangle each
        if rings > 2:
            tris.append(quad[1:-1][..., _QUAD_TRIS].reshape(-1, 3))
        tris.append(quad[-1][:, [0, 1, 2]])  # bottom cap
        idx = np.concatenate(tris).ravel()
        self.add(pts[idx], nrm[idx], color, uvs[idx], texture, instance_id)


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
_FACE_KEYS = [f[0] for f in _BOX_FACES]
_FACE_N, _FACE_U, _FACE_V = (np.array([f[k] for f in _BOX_FACES], dtype=np.float64) for k in (1, 2, 3))
_QUAD = np.array([(-1, -1), (1, -1), (1, 1), (-1, 1)], dtype=np.float64)  # corner signs along (u, v)
_QUAD_UV = (_QUAD + 1) / 2
_QUAD_TRIS = np.array([0, 1, 2, 0, 2, 3])
