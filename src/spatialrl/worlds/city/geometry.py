"""Meshes of a city for the shared renderer: streets, sidewalks, markings, buildings with textured
façades and storefronts, shop signs, trees and lamps.

World frame (the renderer's): x = east, y = up, z = north, metres. Every quad is given with its
outward normal; ``MeshBuilder.add`` winds it for back-face culling. Textured quads put ``u`` along
the viewer's right and ``v`` up, so sign text reads the right way round.

Instance ids (for ``Renderer.render_ids``): the signs of place ``i`` carry ``sign_instance_id(i)``;
trees and lamps ``FURNITURE_ID``; everything else 0 (structure).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from spatialrl.render.mesh import Mesh
from spatialrl.render.primitives import MeshBuilder
from spatialrl.worlds.city.lots import Lot, frontage_ends
from spatialrl.worlds.city.places import Place
from spatialrl.worlds.city.styles import RGB
from spatialrl.worlds.city.textures import (
    TEX,
    SignAtlas,
    door_texture,
    facade_texture,
    paving_texture,
    storefront_texture,
)
from spatialrl.worlds.city.world import STAGE_GEOMETRY, STAGE_TEXTURES, City, stage_rng

FURNITURE_ID = 0xF00000
ZONE_SIZE = 80.0  # metres: meshes are grouped into zones the renderer draws nearest first
SIGN_HEIGHT = 1.4  # metres, fascia signs
CORNER_PANEL = (3.2, 1.6)  # metres (w, h): sign facing the intersection from a corner shop
CORNER_PANEL_OUT = 1.2  # metres from the building corner to the panel's centre
CORNER_PANEL_CLEARANCE = 2.6  # metres above the sidewalk
SIGN_MAX_WIDTH = 7.5
SIGN_OFFSET = 0.06  # in front of the wall
BLADE_SIZE = 1.0
SIDEWALK_HEIGHT = 0.15
WHITE: RGB = (1.0, 1.0, 1.0)
_UV_INSET = 1.0 / TEX  # keep sign uvs one texel inside their atlas cell (no bleeding)


def sign_instance_id(place_index: int) -> int:
    return 1 + int(place_index)


def _right_of(normal_xz: np.ndarray) -> tuple[float, float]:
    """Viewer's right (x, z) when facing a wall whose outward normal is ``normal_xz``."""
    return (-float(normal_xz[1]), float(normal_xz[0]))


def _v3(xz: np.ndarray, y: float | np.ndarray) -> np.ndarray:
    xz = np.asarray(xz, dtype=np.float64)
    return np.stack([xz[..., 0], np.broadcast_to(y, xz.shape[:-1]), xz[..., 1]], axis=-1)


class _Batch:
    """Collects quads and triangles per (texture, instance id); turned into meshes in one go."""

    _QUAD = np.array([0, 1, 2, 0, 2, 3])

    def __init__(self) -> None:
        self.tri_groups: dict[tuple[int, int], list[tuple[np.ndarray, ...]]] = defaultdict(list)
        self.quad_groups: dict[tuple[int, int], list[tuple]] = defaultdict(list)

    def tris(self, pos: np.ndarray, nrm: np.ndarray, col, uv: np.ndarray | None,
             tex: int = -1, iid: int = 0) -> None:
        pos = np.asarray(pos, np.float64).reshape(-1, 3)
        n = len(pos)
        self.tri_groups[(tex, iid)].append((
            pos, np.broadcast_to(np.asarray(nrm, np.float64), (n, 3)),
            np.broadcast_to(np.asarray(col, np.float64), (n, 3)),
            np.zeros((n, 2)) if uv is None else np.asarray(uv, np.float64).reshape(n, 2)))

    def quad(self, corners: np.ndarray, normal, color: RGB, uv: np.ndarray | None = None,
             tex: int = -1, iid: int = 0) -> None:
        """Corners in order bottom-left, bottom-right, top-right, top-left as seen from the front."""
        self.quad_groups[(tex, iid)].append((corners, normal, color, uv))

    def meshes(self, zone_size: float = 0.0) -> list[Mesh]:
        """One mesh per (texture, instance id, zone). With ``zone_size`` > 0, triangles are grouped
        into square zones of that size (by centroid) so the renderer can draw the camera's
        neighbourhood first; triangles larger than a zone (the ground) get no zone and come last."""
        mb = MeshBuilder()
        for key in sorted(set(self.tri_groups) | set(self.quad_groups)):
            parts = list(self.tri_groups.get(key, []))
            quads = self.quad_groups.get(key, [])
            if quads:
                corners = np.asarray([q[0] for q in quads], np.float64)  # (Q, 4, 3)
                normals = np.asarray([q[1] for q in quads], np.float64)
                colors = np.asarray([q[2] for q in quads], np.float64)
                uvs = np.asarray([q[3] if q[3] is not None else np.zeros((4, 2)) for q in quads], np.float64)
                parts.append((corners[:, self._QUAD].reshape(-1, 3), np.repeat(normals, 6, axis=0),
                              np.repeat(colors, 6, axis=0), uvs[:, self._QUAD].reshape(-1, 2)))
            tex, iid = key
            pos, nrm, col, uv = (np.concatenate([p[k] for p in parts]) for k in range(4))
            zones = self._zones(pos, zone_size)
            for z in np.unique(zones):
                sel = np.repeat(zones == z, 3)
                with mb.zone(int(z)):
                    mb.add(pos[sel], nrm[sel], col[sel], uv[sel] if tex >= 0 else None, texture=tex, instance_id=iid)
        return mb.meshes()

    @staticmethod
    def _zones(pos: np.ndarray, zone_size: float) -> np.ndarray:
        tri = pos.reshape(-1, 3, 3)
        if zone_size <= 0:
            return np.full(len(tri), -1)
        x, z = tri[:, :, 0], tri[:, :, 2]
        big = np.maximum(x.max(1) - x.min(1), z.max(1) - z.min(1)) > zone_size
        i = np.floor(x.mean(1) / zone_size).astype(np.int64) + 500
        j = np.floor(z.mean(1) / zone_size).astype(np.int64) + 500
        return np.where(big, -1, i * 1000 + j)


def _p3(xz, y: float) -> tuple[float, float, float]:
    return (float(xz[0]), float(y), float(xz[1]))


def _wall(batch: _Batch, p0: np.ndarray, p1: np.ndarray, y0: float, y1: float, normal: np.ndarray,
          color: RGB, tex: int = -1, u: tuple[float, float] = (0.0, 1.0), v: tuple[float, float] = (0.0, 1.0),
          iid: int = 0) -> None:
    """A vertical quad between ground points p0, p1 (x, z) from height y0 to y1; u runs to the right."""
    if y1 - y0 < 1e-4:
        return
    r = _right_of(normal)
    if (p1[0] - p0[0]) * r[0] + (p1[1] - p0[1]) * r[1] < 0:
        p0, p1 = p1, p0
        u = (u[1], u[0]) if tex >= 0 else u
    corners = (_p3(p0, y0), _p3(p1, y0), _p3(p1, y1), _p3(p0, y1))
    uv = ((u[0], v[0]), (u[1], v[0]), (u[1], v[1]), (u[0], v[1]))
    batch.quad(corners, _p3(normal, 0.0), color, uv if tex >= 0 else None, tex, iid)


@dataclass
class SignQuad:
    """One sign face: world corners (bottom-left, bottom-right, top-right, top-left seen from the
    front), its outward normal, and which place it shows."""

    place: int
    corners: np.ndarray
    normal: np.ndarray
    kind: str  # fascia, side (corner shop's side wall), corner (panel facing the crossing), blade


@dataclass
class CityMeshes:
    meshes: list[Mesh]
    textures: list[np.ndarray]
    signs: list[SignQuad]
    n_triangles: int


# --------------------------------------------------------------------------------------------- signs
def _front_axes(lot: Lot) -> tuple[np.ndarray, np.ndarray, float]:
    d = lot.front[1] - lot.front[0]
    w = float(np.linalg.norm(d))
    return d / w, -lot.normal, w  # along the front, into the lot, width


def sign_quads(city: City) -> list[SignQuad]:
    """Every sign face of every place: the fascia over the shop; for corner shops a fascia on the
    side wall and a panel facing the intersection; for other shops both faces of a hanging blade
    sign. Used by the mesh builder and by the visibility check."""
    out = []
    gf = city.style.ground_floor_height
    for place in city.places:
        lot = city.lots[place.lot]
        d, m, width = _front_axes(lot)
        y_front = float(city.ground(lot.front.mean(0)))
        top = y_front + gf - 0.12
        n = lot.normal
        unit_w = place.unit[1] - place.unit[0]
        sw = min(unit_w - 0.5, SIGN_MAX_WIDTH)
        mid = (place.unit[0] + place.unit[1]) / 2
        a = lot.front[0] + d * (mid - sw / 2) + n * SIGN_OFFSET
        b = lot.front[0] + d * (mid + sw / 2) + n * SIGN_OFFSET
        out.append(SignQuad(place.index, _face(a, b, top - SIGN_HEIGHT, top, n), _v3(n, 0.0), "fascia"))
        if place.side_sign:
            corner = lot.front[place.corner_end]
            side_n = -d if place.corner_end == 0 else d
            depth = lot.depth
            sw2 = min(6.0, depth - 1.0)
            if sw2 > 2.0:
                a = corner + m * 0.4 + side_n * SIGN_OFFSET
                b = corner + m * (0.4 + sw2) + side_n * SIGN_OFFSET
                out.append(SignQuad(place.index, _face(a, b, top - SIGN_HEIGHT, top, side_n), _v3(side_n, 0.0),
                                    "side"))
        if place.corner_end >= 0:
            # Corner panel: mounted off the building corner, facing the intersection along the
            # corner's bisector, so it is seen head-on from the middle of the crossing.
            corner, bis = _corner_bisector(lot, place.corner_end)
            centre = corner + bis * CORNER_PANEL_OUT
            r = np.array(_right_of(bis))
            pw, ph = CORNER_PANEL
            y0 = max(top - ph, y_front + CORNER_PANEL_CLEARANCE)
            out.append(SignQuad(place.index, _face(centre - r * pw / 2, centre + r * pw / 2, y0, y0 + ph, bis),
                                _v3(bis, 0.0), "corner"))
        else:
            # Blade sign: perpendicular to the wall at the unit's start, readable from both ways.
            base = lot.front[0] + d * (place.unit[0] + 0.4)
            p_in, p_out = base + n * 0.15, base + n * (0.15 + BLADE_SIZE)
            y0 = y_front + gf + 0.3
            for face_n in (d, -d):
                out.append(SignQuad(place.index, _face(p_in, p_out, y0, y0 + BLADE_SIZE, face_n), _v3(face_n, 0.0),
                                    "blade"))
    return out


def _corner_bisector(lot: Lot, end: int) -> tuple[np.ndarray, np.ndarray]:
    """The building corner at ``lot.front[end]`` and the unit vector pointing out of it, halfway
    between the outward normals of the two walls that meet there."""
    corner = lot.front[end]
    poly = lot.polygon
    k = int(np.argmin(np.linalg.norm(poly - corner, axis=1)))
    normals = []
    for a, b in ((poly[k - 1], poly[k]), (poly[k], poly[(k + 1) % len(poly)])):
        seg = b - a
        normals.append(np.array([seg[1], -seg[0]]) / np.linalg.norm(seg))
    bis = normals[0] + normals[1]
    return corner, bis / np.linalg.norm(bis)


def _face(p0: np.ndarray, p1: np.ndarray, y0: float, y1: float, normal: np.ndarray) -> np.ndarray:
    r = _right_of(normal)
    if (p1 - p0) @ r < 0:
        p0, p1 = p1, p0
    return np.array([_v3(p0, y0), _v3(p1, y0), _v3(p1, y1), _v3(p0, y1)])


def sign_aspects(signs: list[SignQuad]) -> dict[int, float]:
    out = {}
    for s in signs:
        if s.kind == "fascia":
            out[s.place] = float(np.linalg.norm(s.corners[1] - s.corners[0]) / np.linalg.norm(s.corners[3] - s.corners[0]))
    return out


# ------------------------------------------------------------------------------------------ the city
def build_meshes(city: City) -> CityMeshes:
    """All meshes and textures of ``city`` (deterministic for its seed)."""
    style = city.style
    rng = stage_rng(city.seed, STAGE_GEOMETRY)
    trng = stage_rng(city.seed, STAGE_TEXTURES)
    textures: list[np.ndarray] = []

    def add_tex(img: np.ndarray) -> int:
        textures.append(img)
        return len(textures) - 1

    road_tex = add_tex(paving_texture(style.road_color, "cobbles" if style.name == "oldtown" else "asphalt", trng))
    walk_tex = add_tex(paving_texture(style.sidewalk_color, "slabs", trng))
    roof_tex = add_tex(paving_texture(style.roof_color, "tiles", trng))
    patterns = {"metro": ("punched", "ribbon"), "hillside": ("bay",), "oldtown": ("shutters",)}.get(
        style.name, ("punched",))
    facade_tex = {(ci, p): add_tex(facade_texture(style, c, p, trng))
                  for ci, c in enumerate(style.facade_colors) for p in patterns}
    glass_tex = add_tex(facade_texture(style, (0.55, 0.6, 0.65), "glass", trng)) if style.name == "metro" else -1
    store_tex = [add_tex(storefront_texture(style, f, trng)) for f in
                 ((0.15, 0.15, 0.17), (0.35, 0.22, 0.15), style.trim_color)]
    door_tex = {ci: add_tex(door_texture(style, c, trng)) for ci, c in enumerate(style.facade_colors)}

    signs = sign_quads(city)
    atlas = SignAtlas.build(city.places, sign_aspects(signs), first_layer=len(textures))
    textures.extend(atlas.layers)

    batch = _Batch()
    ground = _Batch()
    _ground(ground, city)
    _streets(batch, city, road_tex, walk_tex)
    stores = defaultdict(list)
    for p in city.places:
        stores[p.lot].append(p)
    for li, lot in enumerate(city.lots):
        _building(batch, city, lot, stores.get(li, []), rng, facade_tex, patterns, glass_tex, store_tex,
                  door_tex, roof_tex)
    _signs(batch, signs, atlas)
    _furniture(batch, city, rng)
    meshes = batch.meshes(ZONE_SIZE) + ground.meshes()  # the ground: no zone, drawn last
    return CityMeshes(meshes, textures, signs, sum(m.n_triangles for m in meshes))


def _ground(batch: _Batch, city: City) -> None:
    lo = city.graph.nodes.min(0) - 260.0
    hi = city.graph.nodes.max(0) + 260.0
    color = city.style.ground_color
    if city.terrain.flat:
        c = np.array([_v3(lo, -0.03), _v3([hi[0], lo[1]], -0.03), _v3(hi, -0.03), _v3([lo[0], hi[1]], -0.03)])
        batch.quad(c, (0.0, 1.0, 0.0), color)
        return
    n = 80
    xs, zs = np.linspace(lo[0], hi[0], n + 1), np.linspace(lo[1], hi[1], n + 1)
    gx, gz = np.meshgrid(xs, zs, indexing="ij")
    pts = np.stack([gx, gz], -1)
    # 30 cm below the true ground: the coarse grid bends less than the 6 m road pieces on top of it,
    # and must never poke through them.
    y = city.ground(pts) - 0.3
    p3 = np.stack([gx, y, gz], -1)
    quads = np.stack([p3[:-1, :-1], p3[1:, :-1], p3[1:, 1:], p3[:-1, 1:]], axis=2).reshape(-1, 4, 3)
    tri = quads[:, [0, 1, 2, 0, 2, 3]].reshape(-1, 3)
    nrm = np.cross(quads[:, 1] - quads[:, 0], quads[:, 3] - quads[:, 0])
    nrm = nrm * np.sign(nrm[:, 1:2])
    nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
    batch.tris(tri, np.repeat(nrm, 6, axis=0), color, None)


def _strip(batch: _Batch, city: City, left: np.ndarray, right: np.ndarray, lift: float, color: RGB,
           tex: int, tile: float, samples: int) -> None:
    """A terrain-following ribbon between polylines ``left`` and ``right`` (each (samples, 2))."""
    del samples
    yl = city.ground(left) + lift
    yr = city.ground(right) + lift
    L, R = _v3(left, yl), _v3(right, yr)
    quads = np.stack([L[:-1], R[:-1], R[1:], L[1:]], axis=1)  # (k, 4, 3)
    nrm = np.cross(quads[:, 1] - quads[:, 0], quads[:, 3] - quads[:, 0])
    nrm = nrm * np.sign(nrm[:, 1:2] + 1e-12)
    nrm /= np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-12)
    tri = quads[:, [0, 1, 2, 0, 2, 3]].reshape(-1, 3)
    uv = tri[:, [0, 2]] / tile if tex >= 0 else None
    batch.tris(tri, np.repeat(nrm, 6, axis=0), color, uv, tex)


def _streets(batch: _Batch, city: City, road_tex: int, walk_tex: int) -> None:
    g, style = city.graph, city.style
    ends = frontage_ends(g)
    step = 6.0 if not city.terrain.flat else 1e9  # ribbons follow hills in 6 m pieces; flat: one piece
    cross_at: dict[tuple[int, int], float] = {}  # (edge, node) → where the curbs of the crossing streets end
    for e, (a, b) in enumerate(g.edges):
        pa, pb = g.nodes[a], g.nodes[b]
        length = float(np.linalg.norm(pb - pa))
        d = (pb - pa) / length
        left = np.array([-d[1], d[0]])
        c, o = g.road_width[e] / 2, g.frontage_offset[e]
        k = max(1, math.ceil(length / step))
        t = np.linspace(0.0, length, k + 1)[:, None]
        axis = pa + t * d
        _strip(batch, city, axis - left * c, axis + left * c, 0.0, WHITE, road_tex, 4.0, k)
        # Sidewalks (with curb faces), cut where they meet the crossing streets' curbs.
        for side in (1, -1):
            m = side * left
            t0 = _cut(ends[(e, side)][0], g.road_width, c, o, True, length)
            t1 = _cut(ends[(e, side)][1], g.road_width, c, o, False, length)
            cross_at[(e, int(a))] = max(cross_at.get((e, int(a)), 0.0), t0[0])
            cross_at[(e, int(b))] = max(cross_at.get((e, int(b)), 0.0), length - t1[0])
            for (ti, to), (ui, uo) in [((t0[0], t0[1]), (t1[0], t1[1]))]:
                if min(ui, uo) - max(ti, to) < 0.5:
                    continue
                kk = max(1, math.ceil((max(ui, uo) - min(ti, to)) / step))
                f = np.linspace(0.0, 1.0, kk + 1)[:, None]
                inner = pa + d * (ti + f * (ui - ti)) + m * c
                outer = pa + d * (to + f * (uo - to)) + m * o
                pair = (inner, outer) if side == -1 else (outer, inner)
                _strip(batch, city, pair[0], pair[1], SIDEWALK_HEIGHT, WHITE, walk_tex, 2.0, kk)
                yb = city.ground(inner)
                lo, hi = _v3(inner, yb), _v3(inner, yb + SIDEWALK_HEIGHT)
                curb = np.stack([lo[:-1], lo[1:], hi[1:], hi[:-1]], axis=1)[:, [0, 1, 2, 0, 2, 3]]
                batch.tris(curb.reshape(-1, 3), _v3(-m, 0.0), style.curb_color, None)
        if style.center_line:
            _dashes(batch, city, pa, d, length, style.marking_color)
    for node, nbrs in enumerate(g.adjacency):
        p = g.nodes[node]
        r = max(g.road_width[e] for _, e in nbrs) / 2 * 1.02
        ang = np.linspace(0, 2 * math.pi, 17)
        ring = p + r * np.stack([np.cos(ang), np.sin(ang)], 1)
        rim = _v3(ring, city.ground(ring) + 0.004)  # follows the ground (hills)
        centre = _v3(p, float(city.ground(p)) + 0.004)
        fan = np.stack([np.broadcast_to(centre, (16, 3)), rim[1:], rim[:-1]], axis=1).reshape(-1, 3)
        batch.tris(fan, (0.0, 1.0, 0.0), WHITE, fan[:, [0, 2]] / 4.0, road_tex)
        if style.crosswalks and len(nbrs) >= 3:
            for other, e in nbrs:
                v = g.nodes[other] - p
                start = max(r, cross_at.get((e, node), 0.0)) + 0.6
                if start + 3.5 < float(np.linalg.norm(v)) / 2:
                    _crosswalk(batch, city, p, v / np.linalg.norm(v), g.road_width[e], start, style.marking_color)


def _cut(end, widths: np.ndarray, c: float, o: float, at_start: bool, length: float) -> tuple[float, float]:
    """(inner, outer) distance along the edge where a sidewalk meets the crossing street's curb."""
    if end.corner is None:
        return (0.0, 0.0) if at_start else (length, length)
    r = math.radians(end.phi)
    cf = widths[end.other] / 2
    ti = (cf + c * math.cos(r)) / math.sin(r)
    to = (cf + o * math.cos(r)) / math.sin(r)
    return (ti, to) if at_start else (length - ti, length - to)


def _dashes(batch: _Batch, city: City, pa: np.ndarray, d: np.ndarray, length: float, color: RGB) -> None:
    left = np.array([-d[1], d[0]]) * 0.08
    t = np.arange(14.0, length - 14.0, 6.0)
    if len(t) == 0:
        return
    a = pa + t[:, None] * d
    b = a + 3.0 * d
    quads = np.stack([a - left, b - left, b + left, a + left], axis=1)  # (k, 4, 2)
    y = city.ground(quads) + 0.025
    q3 = _v3(quads, y)
    batch.tris(q3[:, [0, 1, 2, 0, 2, 3]].reshape(-1, 3), (0.0, 1.0, 0.0), color, None)


def _crosswalk(batch: _Batch, city: City, p: np.ndarray, d: np.ndarray, width: float, start: float,
               color: RGB) -> None:
    left = np.array([-d[1], d[0]])
    lat = np.arange(-width / 2 + 0.6, width / 2 - 0.4, 1.0)
    a = p + d * start + lat[:, None] * left
    quads = np.stack([a, a + left * 0.5, a + left * 0.5 + d * 3.0, a + d * 3.0], axis=1)
    y = city.ground(quads) + 0.025
    q3 = _v3(quads, y)
    batch.tris(q3[:, [0, 1, 2, 0, 2, 3]].reshape(-1, 3), (0.0, 1.0, 0.0), color, None)


# ------------------------------------------------------------------------------------------ buildings
def _floors(style, rng: np.random.Generator) -> int:
    lo, hi = style.floors
    cut = lo + (hi - lo) * 2 // 3
    if rng.random() < style.tall_share:
        return int(rng.integers(cut, hi + 1))
    return int(rng.integers(lo, max(lo, cut) + 1))


def _building(batch: _Batch, city: City, lot: Lot, stores: list[Place], rng: np.random.Generator,
              facade_tex: dict, patterns: tuple[str, ...], glass_tex: int, store_tex: list[int],
              door_tex: dict, roof_tex: int) -> None:
    style = city.style
    poly = lot.polygon
    floors = _floors(style, rng)
    ci = int(rng.integers(len(style.facade_colors)))
    pattern = patterns[int(rng.integers(len(patterns)))]
    tex = facade_tex[(ci, pattern)]
    if glass_tex >= 0 and floors >= 12 and rng.random() < 0.5:
        tex = glass_tex
    wall_color = style.facade_colors[ci]
    fh, gf = style.floor_height, style.ground_floor_height
    y_front = float(city.ground(lot.front.mean(0)))
    y_base = float(city.ground(poly).min()) - 0.5
    y_gf = y_front + gf
    y_top = y_gf + (floors - 1) * fh
    bay = 3.0 if style.name == "metro" else 2.6
    cols = style.window_cols_per_tile
    plinth = tuple(v * 0.7 for v in style.trim_color)
    d, _, width = _front_axes(lot)
    n_pts = len(poly)
    for k in range(n_pts):
        p0, p1 = poly[k], poly[(k + 1) % n_pts]
        seg = p1 - p0
        seg_len = float(np.linalg.norm(seg))
        if seg_len < 1e-3:
            continue
        normal = np.array([seg[1], -seg[0]]) / seg_len  # outward for a counter-clockwise polygon
        bays = max(1, round(seg_len / bay))
        u_span = bays / cols
        if not city.terrain.flat:  # on hills the wall goes down to the lowest ground under it
            _wall(batch, p0, p1, y_base, y_front, normal, plinth)
        _wall(batch, p0, p1, y_gf, y_top, normal, WHITE, tex, (0.0, u_span), (0.0, (y_top - y_gf) / (2 * fh)))
        is_front = abs(normal @ lot.normal - 1.0) < 1e-6 and _on_segment(p0, p1, lot.front)
        if not is_front:
            _wall(batch, p0, p1, y_front, y_gf, normal, WHITE, tex, (0.0, u_span), (-gf / (2 * fh), 0.0))
            continue
        # Front ground floor: storefront units, one door bay (houses) and window bays elsewhere.
        units = sorted(p.unit for p in stores)
        if not units and style.name != "metro" and width > 3.0:
            mid = float(rng.uniform(0.3, 0.7)) * width
            units = [(max(0.0, mid - 1.5), min(width, mid + 1.5))]
            unit_tex = [door_tex[ci]]
        else:
            unit_tex = [store_tex[int(rng.integers(len(store_tex)))] for _ in units]
        s = 0.0
        for (u0, u1), utex in zip(units, unit_tex, strict=True):
            _front_band(batch, lot, d, s, u0, y_front, y_gf, WHITE, tex, bay, cols, fh, gf)
            _wall(batch, lot.front[0] + d * u0, lot.front[0] + d * u1, y_front, y_gf, lot.normal, WHITE, utex)
            s = u1
        _front_band(batch, lot, d, s, width, y_front, y_gf, WHITE, tex, bay, cols, fh, gf)
        for place in stores:
            if rng.random() < style.awning_share:
                _awning(batch, lot, d, place, y_gf)
    _roof(batch, city, lot, y_top, wall_color, roof_tex)


def _on_segment(p0: np.ndarray, p1: np.ndarray, front: np.ndarray) -> bool:
    return bool(min(np.linalg.norm(p0 - front[0]) + np.linalg.norm(p1 - front[1]),
                    np.linalg.norm(p0 - front[1]) + np.linalg.norm(p1 - front[0])) < 1e-3)


def _front_band(batch: _Batch, lot: Lot, d: np.ndarray, s0: float, s1: float, y0: float, y1: float, color: RGB,
                tex: int, bay: float, cols: int, fh: float, gf: float) -> None:
    if s1 - s0 < 0.05:
        return
    u0, u1 = s0 / bay / cols, s1 / bay / cols
    _wall(batch, lot.front[0] + d * s0, lot.front[0] + d * s1, y0, y1, lot.normal, color, tex, (u0, u1),
          (-gf / (2 * fh), 0.0))


def _awning(batch: _Batch, lot: Lot, d: np.ndarray, place: Place, y_gf: float) -> None:
    u0, u1 = place.unit[0] + 0.2, place.unit[1] - 0.2
    top = y_gf - 0.12 - SIGN_HEIGHT - 0.15
    n = lot.normal
    a, b = lot.front[0] + d * u0, lot.front[0] + d * u1
    a_out, b_out = a + n * 1.3, b + n * 1.3
    slope_n = np.array([n[0] * 0.45, 1.3, n[1] * 0.45])
    slope_n /= np.linalg.norm(slope_n)
    r = _right_of(n)
    if (b - a) @ r < 0:
        a, b, a_out, b_out = b, a, b_out, a_out
    low = top - 0.5
    corners = np.array([_v3(a_out, low), _v3(b_out, low), _v3(b, top), _v3(a, top)])
    batch.quad(corners, slope_n, place.color)
    batch.quad(corners[[1, 0, 3, 2]], -slope_n, tuple(v * 0.7 for v in place.color))
    valance = np.array([_v3(a_out, low - 0.25), _v3(b_out, low - 0.25), _v3(b_out, low), _v3(a_out, low)])
    batch.quad(valance, _v3(n, 0.0), place.accent)


def _roof(batch: _Batch, city: City, lot: Lot, y_top: float, wall_color: RGB, roof_tex: int) -> None:
    style = city.style
    poly = lot.polygon
    if style.roof == "gable" and not lot.wedge and len(poly) == 4:
        d, m, width = _front_axes(lot)
        depth = lot.depth
        over = 0.3
        f0, f1 = lot.front[0] - d * 0.05, lot.front[1] + d * 0.05
        rise = style.gable_pitch * depth / 2
        eave_f0, eave_f1 = f0 - m * over, f1 - m * over
        eave_b0, eave_b1 = f0 + m * (depth + over), f1 + m * (depth + over)
        ridge0, ridge1 = f0 + m * depth / 2, f1 + m * depth / 2
        y_eave = y_top - over * style.gable_pitch
        for e0, e1, out_m in ((eave_f0, eave_f1, -m), (eave_b0, eave_b1, m)):
            nrm = np.array([out_m[0] * style.gable_pitch, 1.0, out_m[1] * style.gable_pitch])
            nrm /= np.linalg.norm(nrm)
            r = _right_of(out_m)
            a, b = (e0, e1) if (e1 - e0) @ r >= 0 else (e1, e0)
            ra, rb = (ridge0, ridge1) if (e1 - e0) @ r >= 0 else (ridge1, ridge0)
            run = float(np.linalg.norm(ra - a)) + over
            corners = np.array([_v3(a, y_eave), _v3(b, y_eave), _v3(rb, y_top + rise), _v3(ra, y_top + rise)])
            uv = np.array([(0, 0), (width / 3, 0), (width / 3, run / 3), (0, run / 3)])
            batch.quad(corners, nrm, WHITE, uv, roof_tex)
            batch.quad(corners[[1, 0, 3, 2]], -nrm, tuple(v * 0.5 for v in style.roof_color))
        for fa, side_n in ((f0, -d), (f1, d)):  # gable ends
            tri = np.array([_v3(fa, y_top), _v3(fa + m * depth, y_top), _v3(fa + m * depth / 2, y_top + rise)])
            batch.tris(tri, _v3(side_n, 0.0), wall_color, None)
        return
    # Flat roof with a cornice slab.
    y = y_top
    centre = poly.mean(0)
    grown = centre + (poly - centre) * (1.0 + 0.25 / max(1.0, float(np.linalg.norm(poly - centre, axis=1).min())))
    _prism(batch, grown, y - 0.35, y + 0.3, style.trim_color)
    _prism(batch, poly, y + 0.3, y + 0.31, style.roof_color, walls=False)


def _prism(batch: _Batch, poly: np.ndarray, y0: float, y1: float, color: RGB, walls: bool = True) -> None:
    """A convex prism (counter-clockwise ``poly``) with top, bottom and side faces."""
    n = len(poly)
    top = np.array([_v3(poly[0], y1), *[_v3(poly[k], y1) for k in range(1, n)]])
    for k in range(1, n - 1):
        batch.tris(np.array([top[0], top[k], top[k + 1]]), (0.0, 1.0, 0.0), color, None)
        if walls:
            bot = np.array([_v3(poly[0], y0), _v3(poly[k + 1], y0), _v3(poly[k], y0)])
            batch.tris(bot, (0.0, -1.0, 0.0), tuple(v * 0.8 for v in color), None)
    if walls:
        for k in range(n):
            p0, p1 = poly[k], poly[(k + 1) % n]
            seg = p1 - p0
            normal = np.array([seg[1], -seg[0]]) / max(1e-9, float(np.linalg.norm(seg)))
            _wall(batch, p0, p1, y0, y1, normal, color)


# --------------------------------------------------------------------------------------------- signs
def _signs(batch: _Batch, signs: list[SignQuad], atlas: SignAtlas) -> None:
    for s in signs:
        uvs = {"blade": atlas.blade_uv, "corner": atlas.panel_uv}.get(s.kind, atlas.fascia_uv)
        layer, u0, v0, u1, v1 = uvs[s.place]
        u0, v0, u1, v1 = u0 + _UV_INSET, v0 + _UV_INSET, u1 - _UV_INSET, v1 - _UV_INSET
        uv = np.array([(u0, v0), (u1, v0), (u1, v1), (u0, v1)])
        iid = sign_instance_id(s.place)
        batch.quad(s.corners, s.normal, WHITE, uv, layer, iid)
        if s.kind == "corner":  # its back, seen from the sidewalk behind it
            back = s.corners[[1, 0, 3, 2]] - s.normal * 0.03
            batch.quad(back, -s.normal, (0.2, 0.2, 0.22), None, -1, iid)
        if s.kind in ("fascia", "side"):  # a dark back plate so the sign reads as a panel from the side
            back = s.corners - s.normal * (SIGN_OFFSET - 0.01)
            batch.quad(np.array([s.corners[1], back[1], back[2], s.corners[2]]),
                       _v3(_right_of(s.normal[[0, 2]]), 0.0), (0.15, 0.15, 0.15), None, -1, iid)
            batch.quad(np.array([back[0], s.corners[0], s.corners[3], back[3]]),
                       -_v3(_right_of(s.normal[[0, 2]]), 0.0), (0.15, 0.15, 0.15), None, -1, iid)


# ------------------------------------------------------------------------------------------ furniture
def _prototype(build) -> Mesh:
    mb = MeshBuilder()
    build(mb)
    (mesh,) = mb.meshes()
    return mesh


# Low-poly on purpose: every cube face of every panorama runs the vertex shader over all of them.
_TRUNK = _prototype(lambda mb: mb.cylinder((0.0, 0.0, 0.0), 0.14, 1.0, WHITE, segments=5, caps=False))
_CROWN = _prototype(lambda mb: mb.ellipsoid((0.0, 0.0, 0.0), 1.0, WHITE, segments=7, rings=4))


def _lamp_builder(mb: MeshBuilder) -> None:
    """Pole at the origin, arm and head reaching towards local +z (the road)."""
    mb.box((0.0, 2.8, 0.0), (0.14, 5.6, 0.14), WHITE, faces="xXzZ")
    mb.box((0.0, 5.55, 0.45), (0.06, 0.06, 0.9), WHITE, faces="xXyY")
    mb.box((0.0, 5.5, 0.9), (0.5, 0.18, 0.5), WHITE)


_LAMP = _prototype(_lamp_builder)


def _instances(batch: _Batch, proto: Mesh, offsets: np.ndarray, scales: np.ndarray, yaws: np.ndarray,
               colors: np.ndarray, iid: int) -> None:
    """Add copies of ``proto`` scaled (per axis), turned by ``yaw`` (degrees) and moved to ``offsets``."""
    if len(offsets) == 0:
        return
    a = np.radians(yaws)
    c, s_ = np.cos(a), np.sin(a)
    rot = np.zeros((len(a), 3, 3))
    rot[:, 0, 0], rot[:, 0, 2], rot[:, 1, 1], rot[:, 2, 0], rot[:, 2, 2] = c, s_, 1.0, -s_, c
    pos = np.einsum("kij,knj->kni", rot, proto.positions[None] * scales[:, None]) + offsets[:, None]
    nrm = np.einsum("kij,knj->kni", rot, np.broadcast_to(proto.normals, pos.shape) / scales[:, None])
    nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)
    col = np.broadcast_to(colors[:, None], pos.shape)
    batch.tris(pos.reshape(-1, 3), nrm.reshape(-1, 3), col.reshape(-1, 3), None, -1, iid)


def _furniture(batch: _Batch, city: City, rng: np.random.Generator) -> None:
    """Street trees (mid-block only, and never in front of a shop sign) and lamp posts."""
    style, g = city.style, city.graph
    place_spots = np.stack([p.position for p in city.places]) if city.places else np.zeros((0, 2))
    trees, lamps = [], []
    for e, (a, b) in enumerate(g.edges):
        pa, pb = g.nodes[a], g.nodes[b]
        length = float(np.linalg.norm(pb - pa))
        d = (pb - pa) / length
        left = np.array([-d[1], d[0]])
        c = g.road_width[e] / 2
        for side in (1, -1):
            m = side * left
            if style.tree_spacing > 0:
                for t in np.arange(20.0, length - 20.0 + 1e-6, style.tree_spacing):
                    p = pa + d * (t + rng.uniform(-1.0, 1.0)) + m * (c + 0.9)
                    if len(place_spots) and np.min(np.linalg.norm(place_spots - p, axis=1)) < 9.0:
                        continue
                    trees.append((p, float(rng.uniform(2.4, 3.2)), style.tree_crown_radius * float(rng.uniform(0.8, 1.2)),
                                  int(rng.integers(len(style.tree_crown_colors)))))
            if style.lamp_spacing > 0:
                offset = style.lamp_spacing / 2 if side == 1 else 0.0
                for t in np.arange(6.0 + offset, length - 6.0, style.lamp_spacing):
                    lamps.append((pa + d * t + m * (c + 0.35), -m))
    if trees:
        xz = np.array([t[0] for t in trees])
        y = city.ground(xz) + SIDEWALK_HEIGHT
        trunk_h = np.array([t[1] for t in trees])
        r = np.array([t[2] for t in trees])
        base = np.stack([xz[:, 0], y, xz[:, 1]], 1)
        _instances(batch, _TRUNK, base, np.stack([np.ones_like(r), trunk_h + r * 0.5, np.ones_like(r)], 1),
                   np.zeros(len(r)), np.tile(style.tree_trunk_color, (len(r), 1)), FURNITURE_ID)
        crown_at = base + np.stack([np.zeros_like(r), trunk_h + r * 0.8, np.zeros_like(r)], 1)
        colors = np.array([style.tree_crown_colors[t[3]] for t in trees])
        _instances(batch, _CROWN, crown_at, np.stack([r, r * 1.15, r], 1), np.zeros(len(r)), colors, FURNITURE_ID)
    if lamps:
        xz = np.array([p for p, _ in lamps])
        toward = np.array([m for _, m in lamps])
        base = np.stack([xz[:, 0], city.ground(xz) + SIDEWALK_HEIGHT, xz[:, 1]], 1)
        yaw = np.degrees(np.arctan2(toward[:, 0], toward[:, 1]))
        _instances(batch, _LAMP, base, np.ones((len(lamps), 3)), yaw, np.tile(style.lamp_color, (len(lamps), 1)),
                   FURNITURE_ID)
